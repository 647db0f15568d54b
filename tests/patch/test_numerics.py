"""Numerics on CPU: the real page split and Triton decode kernel under TRITON_INTERPRET=1.

A reference attention (sglang's own PyTorch implementation) stands in for the
CUTLASS kernel. Shows that a padded call gives the unpadded result, that -1
padding never changes a result, and that the Triton fallback matches.
"""

from __future__ import annotations

import json

import pytest

from support import trees

PROBE = str(trees.REPO / "tests" / "patch" / "numerics_probe.py")


@pytest.fixture(scope="module")
def probe(sglang_tree, flashinfer_tree, pins):
    site = [sglang_tree(pins["SGLANG_VERSION"]), flashinfer_tree(pins["FLASHINFER_VERSION"])]
    proc = trees.run_python(site, [PROBE],
                            env={"TRITON_INTERPRET": "1"}, timeout=1200)
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


@pytest.mark.parametrize("name", ["reference_padded_vs_unpadded", "reference_lse_padded_vs_unpadded",
                                  "triton_padded_vs_unpadded", "triton_lse_padded_vs_unpadded"])
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
