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


# --- DeepSeek-V4.1: the ratio-2 pair ring and ratio-1 rows (sglang 0.5.23) -------------

V41_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/models/DeepSeek-V4.1-Flash"


def _sglang_source(member: str) -> str:
    import zipfile

    from sm12x.mock import wheels

    with zipfile.ZipFile(wheels.wheel("sglang", "0.5.23")) as archive:
        return archive.read(member).decode()


def _sglang_function(member: str, name: str, **names):
    """One top-level function of sglang's source, compiled on its own (what it
    reads besides its arguments passed in `names`)."""
    import ast

    tree = ast.parse(_sglang_source(member))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = dict(names)
    exec(compile(ast.Module(body=[fn], type_ignores=[]), member, "exec"), namespace)
    return namespace[name]


def test_v41_compresses_at_the_ratios_its_line_names():
    from sm12x.recipe.lines import V4_FLASH_0731, V41_FLASH

    config = json.loads((V41_FIXTURE / "config.json").read_text())["text_config"]
    assert set(config["compress_ratios"]) - {0} == set(V41_FLASH.compress_ratios) == {1, 2}
    v4 = json.loads((V41_FIXTURE.parent / "DeepSeek-V4-Flash-0731" / "config.json").read_text())
    assert set(v4["compress_ratios"]) - {0} == set(V4_FLASH_0731.compress_ratios)


@pytest.mark.wheels
def test_the_c2_ring_is_sglang_s_own():
    real = _sglang_function(
        "sglang/srt/mem_cache/deepseek_v4_memory_pool.py",
        "get_compress_state_ring_size",
        ONLINE_C128=False,
    )
    for drafts in range(0, 17):
        assert model.c2_ring(drafts) == real(2, drafts), drafts


@pytest.mark.wheels
def test_the_c2_verify_kernel_takes_uniform_blocks_only():
    # what the model's rule rests on, in the kernel's own host checks and its Verify mode
    c2 = _sglang_source("sglang/kernels/jit/csrc/deepseek_v4/c2.cuh")
    assert "CHECK_HOST(!is_verify || num_tokens % draft_len == 0);" in c2
    assert "CHECK_HOST(!is_verify || ring_size > draft_len)" in c2
    assert "if (blockIdx.x != 0) partner = params.kv_input + static_cast<int64_t>(row - 1)" in c2
    assert "params.ring_size - 1 : write_offset - 1" in c2
    sparse = _sglang_source("sglang/srt/layers/attention/dsv4/dsv41_sparse.py")
    assert "req, int(forward_batch.spec_info.draft_token_num), output_size=num_tokens" in sparse


def test_the_c2_ring_serves_every_static_verify_the_depth_lint_allows():
    rows = patch_series.v41_verify_rows("0.5.23")
    assert rows == 10
    assert model.c2_widest_served(max_rows=rows) == rows
    for width in range(1, rows + 1):
        ring = model.c2_ring(width)
        assert ring > width
        assert all(model.c2_verify_is_served(width, ring, f) for f in range(4096, 4096 + 64))


def test_a_c2_ring_no_wider_than_the_verify_is_refused():
    # the rule the ring's size guards (the kernel's CHECK_HOST): at ring == width two
    # even rows of one block would park in one slot; any wider ring serves the block,
    # since every acceptance keeps at least one row and the partner is then this
    # verify's own parked row
    with pytest.raises(ValueError, match="wider than the draft length"):
        model.c2_verify_rows(8, 8, [4096])
    for width, ring in ((3, 4), (5, 6), (7, 8)):
        assert all(model.c2_verify_is_served(width, ring, f) for f in range(100, 140))


def test_c2_verify_rows_pair_within_the_block_and_park_even_rows():
    rows = model.c2_verify_rows(4, 8, [4097, 4100])
    assert [r.position for r in rows] == [4097, 4098, 4099, 4100, 4100, 4101, 4102, 4103]
    assert rows[0].partner == ("ring", 0 * 8 + 4096 % 8)
    assert rows[1].partner == ("row", 0)
    assert rows[4].partner == ("ring", 1 * 8 + 4099 % 8)
    assert [r.parks_at for r in rows] == [None, 2, None, 4, 12, None, 14, None]


def test_compact_rows_go_to_other_requests():
    # compact packs each request's 1..7 rows; token_req_indices repeats each request 7
    # times: every row after the first short request belongs to another request
    wrong, total = model.compact_misassigned(7, [7] * 64)
    assert (wrong, total) == (0, 448)  # uniform: the static layout, nothing wrong
    # one short request first: after it, 4 of every 7 rows take the previous request
    assert model.compact_misassigned(7, [3] + [7] * 63) == (252, 444)
    # only a short last request leaves the others in place
    assert model.compact_misassigned(7, [7] * 63 + [2]) == (0, 443)


def c2_records() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(RECORDS.glob("c2-*.json"))]


def c2_cases():
    """The static verifies the H200 ran (the compact ones are judged below: the model
    of compact's parking is not held to the GPU, whose parks it does not match entry
    for entry; compact is refused for V4.1 on what the GPU itself shows)."""
    for run in c2_records():
        tree = f"{run['sglang']}-{run['state']}"
        for case in run["c2"]["uniform"]:
            if "parks" in case:
                yield pytest.param(case, id=f"{tree}-static-{case['rows']}")


def test_the_h200_parks_compact_rows_in_other_requests_rings():
    """Why the ragged-verify lint refuses compact for V4.1 on 0.5.23: in every compact
    layout the H200 ran, rows were parked in another request's ring, and the per-row
    request map the V4.1 paths build cannot take a compact layout at all."""
    compact = [c for run in c2_records() for c in run["c2"]["compact"] if "parks" in c]
    assert len(compact) == 12
    assert all(c["parked_in_other_request"] > 0 for c in compact)
    assert all("Invalid output_size" in c["repeat_interleave"] for c in compact)


@pytest.mark.skipif(
    not c2_records(),
    reason="no GPU record of V4.1's c2 ring yet: the CPU model above is unproven until "
    "benchmarks/dsv4_compact_check.sh --v41 runs (docs/benchmarks.md)",
)
@pytest.mark.parametrize("case", list(c2_cases()))
def test_the_c2_model_parks_where_the_gpu_parked(case):
    positions = case.get("positions")
    if positions is None:  # a compact record keeps req and the parks only
        positions = [None] * len(case["req"])
    for row, slot in case["parks"]:
        if positions[row] is not None:
            assert slot == model.c2_park_slot(case["req"][row], positions[row], case["ring"])
        else:
            assert slot is not None and slot // case["ring"] == case["req"][row]
    if "missing_needed" in case:
        assert case["missing_needed"] == 0
        assert all(slot is not None for _, slot in case["parks"])
