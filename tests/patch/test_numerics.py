"""Numerics on CPU: the real page split and Triton decode kernel under TRITON_INTERPRET=1.

A reference attention (sglang's own PyTorch implementation) stands in for the
CUTLASS kernel. Shows that a padded call gives the unpadded result, that -1
padding never changes a result, and that the Triton fallback matches.
"""

from __future__ import annotations

import json

import pytest
import torch

from sm12x.selftest.numerics import Diff
from tests.support import trees

PROBE = str(trees.REPO / "tests" / "patch" / "numerics_probe.py")


@pytest.fixture(scope="module")
def probe(sglang_tree, flashinfer_tree, pins):
    site = [sglang_tree(pins["SGLANG_VERSION"]), flashinfer_tree(pins["FLASHINFER_VERSION"])]
    proc = trees.run_python(site, [PROBE], env={"TRITON_INTERPRET": "1"}, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_padded_decode_call_equals_the_unpadded_reference(probe):
    assert probe["decode_routes"] == [["cutlass-decode", 512, 8]]  # split-K sized for 512
    assert probe["decode_patched_vs_reference"]["max_abs"] == 0.0


def test_missing_topk_length_is_filled_with_the_original_width(probe):
    assert probe["no_topk_length_lengths"] == [192, 192]
    assert probe["decode_no_topk_length_vs_reference"]["max_abs"] == 0.0


def test_padded_prefill_call_equals_the_unpadded_reference(probe):
    assert probe["prefill_routes"] == [["cutlass-prefill", 512, None]]
    assert probe["prefill_patched_vs_reference"]["max_abs"] == 0.0


@pytest.mark.parametrize(
    "name",
    [
        "reference_padded_vs_unpadded",
        "reference_lse_padded_vs_unpadded",
        "triton_padded_vs_unpadded",
        "triton_lse_padded_vs_unpadded",
    ],
)
def test_minus_one_padding_never_changes_a_result(probe, name):
    assert probe[name]["exact"], probe[name]


def test_triton_kernel_matches_the_reference(probe):
    # Different arithmetic (online softmax in fp32): equal within bf16 rounding.
    assert probe["triton_vs_reference"]["close"], probe["triton_vs_reference"]
    assert probe["triton_lse_vs_reference"]["max_abs"] <= 1e-4


def test_unservable_shape_falls_back_to_triton_with_original_indices(probe):
    assert probe["fallback_routes"] == [["triton", 192, None]]
    assert probe["fallback_indices_unchanged"]
    assert probe["fallback_vs_triton"]["exact"]
    assert probe["fallback_vs_reference"]["close"], probe["fallback_vs_reference"]


def test_no_comparison_saw_a_non_finite_value(probe):
    for name, diff in probe.items():
        if isinstance(diff, dict):
            assert diff["nonfinite"] == 0, (name, diff)


@pytest.mark.parametrize(
    "bad",
    [
        torch.full((2, 64, 512), float("nan")),  # the kernel wrote nothing sensible
        torch.cat([torch.full((1, 64, 512), float("nan")), torch.zeros(1, 64, 512)]),
        torch.full((2, 64, 512), float("inf")),
    ],
)
def test_a_non_finite_output_fails_every_comparison_the_tests_make(bad):
    # What the comparisons used to do: skip non-finite places, so max_abs of an
    # all-NaN output against any reference was 0.0 and "== 0.0" passed.
    reference = torch.zeros(2, 64, 512)
    diff = Diff.of("bad", bad, reference)
    assert diff.max_abs == float("inf") and diff.nonfinite > 0
    assert not diff.exact and not diff.close
    assert diff.max_abs != 0.0 and not diff.max_abs <= 1e-4
    # Against itself too: NaN is never equal to NaN.
    if bad.isnan().any():
        assert Diff.of("self", bad, bad.clone()).max_abs == float("inf")


def test_matching_infinities_are_agreement_not_distance():
    # An LSE of -inf (a row with nothing to attend to) on both sides is equal.
    a = torch.tensor([[0.5, float("-inf")]])
    diff = Diff.of("lse", a, a.clone())
    assert diff.max_abs == 0.0 and diff.exact and diff.close and diff.nonfinite == 0
    assert Diff.of("lse", a, torch.tensor([[0.5, float("inf")]])).max_abs == float("inf")


def test_the_census_page_split_stand_in_writes_what_the_real_kernels_write(probe, pins):
    assert probe["split_emulation_equals_kernel"]
    # sglang >= 0.5.17 copies only the touched source pages (2 of 6 here: 4 of
    # the 12 64-token pages written); 0.5.16 copies all of them.
    assert probe["split_masked"] == (pins["SGLANG_VERSION"] != "0.5.16")
    assert probe["split_pages_left_alone"] == (8 if probe["split_masked"] else 0)
