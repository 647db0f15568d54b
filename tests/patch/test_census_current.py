"""The current track's census: sglang 0.5.23 with no dispatch patch, on flashinfer 0.7.2.

flashinfer 0.7 decides in its compiled module, at run time, which kernel a call's
metadata allows (a runtime envelope instead of 0.6's instantiation tables).
sm12x.selftest.envelope emulates that module from the wheel's own C++ (its
resolver's rules, the prefill head table parsed from attention_plan.h); the
Python planner above it and sglang's dispatch stay real. Every recipe shape must
land on a CUTLASS kernel with sglang's stock dispatch, and the emulation must
refuse what the C++ refuses, or passing would prove nothing.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest

from sm12x.versions import load_versions
from tests.support import trees

CURRENT = load_versions("current")


def _routes(report: dict, scenario: str) -> Counter:
    return Counter(c["route"] for c in report["calls"] if c["scenario"] == scenario)


@pytest.fixture(scope="module")
def current_site(sglang_tree, flashinfer_tree):
    """The current track's image configuration: its sglang with its series (apply-patches),
    its own flashinfer pin."""
    return [sglang_tree(CURRENT["SGLANG_VERSION"]), flashinfer_tree(CURRENT["FLASHINFER_VERSION"])]


@pytest.fixture(scope="module")
def census(current_site, tmp_path_factory):
    return trees.selftest(current_site, tmp_path_factory.mktemp("current") / "census.json")


def test_every_recipe_shape_lands_on_cutlass_with_no_dispatch_patch(census):
    proc, report = census
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert report["versions"]["sglang"] == CURRENT["SGLANG_VERSION"]
    assert report["versions"]["flashinfer-python"] == CURRENT["FLASHINFER_VERSION"]
    assert "every unpatched call lands on a CUTLASS kernel" in proc.stdout
    assert "no dispatch patch" in proc.stdout
    assert set(report["summary"]) == {"unpatched", "triton"}, "a stock sglang has no patched run"
    routes = _routes(report, "unpatched")
    assert set(routes) == {"cutlass"} and routes["cutlass"] > 1000
    assert all(
        c["detail"] == "" and c["width"] == c["topk"]
        for c in report["calls"]
        if c["scenario"] == "unpatched"
    )
    assert set(_routes(report, "triton")) == {"triton"}


def test_the_census_covers_0_5_23_s_own_shapes(census):
    """The shapes come from 0.5.23's code: the draft's index width from its builder,
    the target's head count from its own _kernel_num_heads (no padding to 64 at
    TP > 1 once flashinfer's decode serves the local heads), 256-token SWA pages."""
    calls = [c for c in census[1]["calls"] if c["scenario"] == "unpatched"]
    assert {c["phase"] for c in calls} == {"draft", "verify", "extend"}
    assert {c["path"] for c in calls} == {"decode", "prefill"}
    assert {c["layer"] for c in calls if c["phase"] == "verify"} == {"swa", "c4", "c128"}
    assert {c["topk"] for c in calls if c["phase"] == "draft"} == {192}
    assert {c["num_heads"] for c in calls if c["phase"] == "draft"} == {64}
    # TP 1, 2, 4, 8: 64, 32, 16, 8 local heads, decode and prefill alike.
    for phase in ("verify", "extend"):
        assert {c["num_heads"] for c in calls if c["phase"] == phase} == {64, 32, 16, 8}
    assert {c["with_topk_length"] for c in calls} == {True, False}
    draft_tokens = {c["num_tokens"] for c in calls if c["phase"] == "draft"}
    assert {3, 7, 64 * 3, 64 * 7} <= draft_tokens


def test_the_envelope_rules_are_read_from_the_wheel(flashinfer_tree):
    from sm12x.selftest.envelope import EnvelopeRules

    rules = EnvelopeRules.from_flashinfer(
        flashinfer_tree(CURRENT["FLASHINFER_VERSION"]) / "flashinfer", CURRENT["FLASHINFER_VERSION"]
    )
    assert rules.decode_max_heads == 128 and rules.fixed_page_size == 64
    assert "DSV4" in rules.runtime_page_models
    assert rules.prefill_heads["DSV4", 2] == {8, 16, 32, 64, 128}  # MG (and MG dual)
    assert rules.prefill_heads["DSV4", 1] == frozenset()  # no SG for DSV4
    assert rules.prefill_heads["DSV4", 4] == frozenset()  # swapAB: inline-scale models only
    assert rules.prefill_heads["DSV3_2", 4] == {64, 128}
    assert rules.prefill_heads["DSV4_1", 1] == {8, 16, 32, 64}


PROBE = """
import json, sys, sm12x.selftest.env as e
e.stub_torchvision()
from sm12x.selftest import census, envelope
from sm12x.selftest.census import Producer, Shape
from sglang.kernels.ops.attention import flash_mla_sm120 as m
rules = envelope.EnvelopeRules.from_flashinfer(e.flashinfer_package(), "0.7.2")
shapes = [
    # phase, layer, tokens, heads, topk, extra_topk, extra_pbs
    Shape("extend", "swa", 4096, 64, 128, 0, 0),     # a recipe shape: accepted
    Shape("extend", "swa", 4096, 24, 128, 0, 0),     # prefill has no 24-head instance
    Shape("verify", "swa", 96, 64, 200, 0, 0),       # prefill needs whole 64-wide tiles
    Shape("verify", "c4", 128, 48, 128, 512, 64),    # MG dual: no 48 heads either
    Shape("verify", "swa", 8, 48, 200, 0, 0),        # decode: runtime heads and topk
    # sglang sizes the decode scratch by the heads, flashinfer's Python wants them
    # padded to 16: refused before the module is asked (real code, both sides).
    Shape("verify", "swa", 8, 24, 200, 0, 0),
]
with envelope.EnvelopeEmulator(None, envelope=rules) as em:
    with census.Configure(m, "unpatched"):
        out = [census.run_shape(m, em, s, Producer(4, 2, 1, 1024), "unpatched")
               for s in shapes]
print(json.dumps([(o.route, o.detail) for o in out]))
"""


def test_the_emulated_module_refuses_what_flashinfer_0_7_refuses(current_site):
    proc = trees.run_python(current_site, ["-c", PROBE])
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [route for route, _ in got] == [
        "cutlass",
        "error",
        "error",
        "error",
        "cutlass",
        "error",
    ], got
    assert "num_heads=24" in got[1][1] and "topk=200" in got[2][1], got
    assert "num_heads=48" in got[3][1], got
    assert "mid_out shape" in got[5][1] and "too small" in got[5][1], got


def test_a_flashinfer_whose_resolver_changed_is_refused_in_one_line(
    sglang_tree, flashinfer_tree, tmp_path
):
    """The rules were written from 0.7.2's C++: another text is not emulated by them."""
    changed = tmp_path / "flashinfer-changed"
    shutil.copytree(flashinfer_tree(CURRENT["FLASHINFER_VERSION"]), changed)
    resolver = next(changed.rglob("sparse_mla_sm120/attention_resolve.cu"))
    resolver.write_text(resolver.read_text() + "\n// a new rule\n")
    proc, _ = trees.selftest(
        [sglang_tree(CURRENT["SGLANG_VERSION"]), changed], tmp_path / "census.json", "--quick"
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert ("csrc/sparse_mla_sm120/attention_resolve.cu is not flashinfer 0.7.2's") in proc.stderr


def test_the_patched_scenario_is_refused_on_a_stock_sglang(current_site, tmp_path):
    proc, _ = trees.selftest(current_site, tmp_path / "census.json", "--scenarios", "patched")
    assert proc.returncode == 2 and "this sglang has no dispatch patch" in proc.stderr
