"""The compress plan under DSPARK's ragged verify: a CPU model of the write rule,
checked entry for entry against the plans an NVIDIA H200 produced, then used to find
the widest verify each sglang tree serves. That width is what the depth lint allows
(patches.toml `verify_rows`): depth 7 with compact ragged verify, whose requests
verify 1..8 rows each, is served by 0.5.17 only with 0020, and by 0.5.23 as released.

Evidence: benchmarks/dsv4_compact_check.sh on an H200 (docs/benchmarks.md, "Ragged
verify"); the records are docs/benchmarks/dsv4-compact-h200/plan-*.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm12x.patches import series as patch_series
from tests.support import compress_plan as model

RECORDS = Path(__file__).resolve().parents[2] / "docs/benchmarks/dsv4-compact-h200"
TREES = ["0.5.17-pristine", "0.5.17-patched", "0.5.23-pristine", "0.5.23-patched"]


def record(tree: str) -> dict:
    return json.loads((RECORDS / f"plan-{tree}.json").read_text())


def cases():
    for tree in TREES:
        for case in record(tree)["plan"]["compact"]:
            yield pytest.param(
                tree,
                case,
                id=f"{tree}-c{case['ratio']}-{case['rows']}"
                f"{'-req-ring' if case['req_ring'] else ''}",
            )


@pytest.mark.parametrize("tree, case", cases())
def test_the_model_plans_what_the_h200_planned(tree, case):
    version, state = tree.split("-")
    g = model.Geometry(case["ratio"], case["ring"], case["req_ring"])
    planned = model.plan_writes(
        model.rule_of(version, state), g, case["seq_lens"], case["extend_lens"]
    )
    assert planned == [tuple(w) for w in case["writes"]]


def test_the_records_cover_every_rule_ring_and_width():
    seen = {
        (model.rule_of(*t.split("-")), c["ratio"], c["req_ring"], c["rows"])
        for t in TREES
        for c in record(t)["plan"]["compact"]
    }
    for rule in model.RULES:
        for ratio in (4, 128):
            for rows in ("1..8", "1..10", "1..11"):
                assert (rule, ratio, False, rows) in seen
    assert ("0.5.23", 4, True, "1..8") in seen


def test_the_h200_missed_rows_only_where_the_model_says():
    # The record's own verdicts: pristine 0.5.17 loses rows at depth 7 compact;
    # 0020 and 0.5.23 plan every row the next step reads up to 10 rows.
    verdict = {
        (t, c["ratio"], c["req_ring"], c["rows"]): c["missing_needed"]
        for t in TREES
        for c in record(t)["plan"]["compact"]
    }
    assert verdict["0.5.17-pristine", 4, False, "1..8"] > 0
    for tree in ("0.5.17-patched", "0.5.23-pristine", "0.5.23-patched"):
        for ratio in (4, 128):
            assert verdict[tree, ratio, False, "1..8"] == 0
            assert verdict[tree, ratio, False, "1..10"] == 0
    assert verdict["0.5.23-pristine", 4, False, "1..11"] > 0  # its own 10-row bound


@pytest.mark.parametrize(
    "version, state, rule",
    [
        ("0.5.17", "pristine", "0.5.17-pristine"),
        ("0.5.17", "patched", "0.5.17-patched"),
        ("0.5.23", "pristine", "0.5.23"),
    ],
)
def test_the_widest_served_verify_is_the_depth_lint_s_bound(version, state, rule):
    c4 = model.widest_served(rule, model.Geometry(4, model.SPEC_RING[4]))
    c128 = model.widest_served(rule, model.Geometry(128, model.SPEC_RING[128]))
    rows = (
        patch_series.UNPATCHED_VERIFY_ROWS
        if state == "pristine" and version == "0.5.17"
        else patch_series.verify_rows(version).rows
    )
    assert min(c4, c128) == rows


def test_0_5_23_s_per_request_ring_serves_the_same_widths():
    shared = model.widest_served("0.5.23", model.Geometry(4, 16))
    per_request = model.widest_served("0.5.23", model.Geometry(4, 16, req_ring=True))
    assert shared == per_request == 10


def test_depth_7_compact_is_served_with_the_fix_and_not_without():
    g = model.Geometry(4, 16)
    for width in range(1, 9):  # compact at depth 7: each request 1..8 rows
        assert all(
            model.verify_is_served("0.5.17-patched", g, s, width) for s in range(4096, 4096 + 256)
        )
    assert not all(
        model.verify_is_served("0.5.17-pristine", g, s, 8) for s in range(4096, 4096 + 256)
    )


def test_an_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="unknown rule"):
        model.first_written("0.5.99", model.Geometry(4, 16), 100, 4)
