"""Compact ragged verify at a full DP rank, sglang 0.5.23 (issue 28).

The H200 ran sglang's own chain (benchmarks/dsv4_full_rank_check.py: the layout and
its padding kernels, the graph runner's slot count, the DeepSeek-V4 backend's
``_resolve_verify_layout`` and ``init_forward_metadata_target_verify``, then the GPU
compress planner) and recorded every case under docs/benchmarks/dsv4-full-rank-h200/.
This module holds a CPU model of the same chain to those records, entry for entry:
steps 1-2 are sglang's own code with its torch implementations of the two kernels
(run here in a subprocess on the unpacked 0.5.23 wheel), step 3 is the write rule of
tests/support/compress_plan.py (itself held to earlier H200 plans). Then it states
what the records show, which is what the full-rank lint (sm12x/recipe/lints.py)
guards: a rank that fills its largest decode graph hands its last request the tier's
leftover rows and the planner loses that request's verify rows; one request short of
it, the leftover goes to the padding row and no live row is touched.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import compress_plan as model
from tests.support import trees

REPO = Path(__file__).resolve().parents[2]
RECORD = REPO / "docs/benchmarks/dsv4-full-rank-h200/full-rank-h200.json"
sys.path.insert(0, str(REPO / "benchmarks"))
import dsv4_full_rank_check as check  # noqa: E402


def run_chain_cpu(root: Path, *extra: str) -> dict:
    """Steps 1-2 on the CPU for both trees (pristine, and patched by scripts/apply-patches
    as the image is), by sglang 0.5.23's own code, in a process of their own."""
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks/dsv4_full_rank_check.py"),
            "chain-cpu",
            "--tree",
            str(root),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def full_rank_trees(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("full-rank")
    check.prepare(trees.wheels.wheel("sglang", "0.5.23"), root)
    return root


def model_plan(case: check.Case, handed: dict) -> tuple[list[list[int]], dict]:
    """Step 3 by the write-rule model: the plan, and the run's analysis of it."""
    g = model.Geometry(case.ratio, check.SPEC_RING[case.ratio], case.req_ring)
    r2t, f2s = check.tables(case, handed)
    plan, rid = [], 0
    for row, seq, ext in zip(handed["rows"], handed["seqs"], handed["extends"]):
        for j in range(ext):
            if model.writes("0.5.23", g, seq + ext, seq + j, ext):
                plan.append(
                    [rid, check.slot_of(case.ratio, g.ring, case.req_ring, row, seq + j, r2t, f2s)]
                )
            rid += 1
    return sorted(plan), check.analyse(case, handed, [tuple(w) for w in plan], r2t, f2s)


@pytest.fixture(scope="module")
def cpu_chain(full_rank_trees) -> dict:
    return run_chain_cpu(full_rank_trees)


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(RECORD.read_text())


@pytest.fixture(scope="module")
def modelled(cpu_chain) -> dict[str, list[dict]]:
    """The run's own cases (check.case_list) through the CPU model of the whole chain,
    by tree."""
    out: dict[str, list[dict]] = {"pristine": [], "patched": []}
    for c in cpu_chain["cases"]:
        case = check.Case(**c["case"])
        plan, analysis = model_plan(case, c)
        out[c["state"]].append(
            {**c["case"], "scenario": case.name.split("/")[0], **c, "writes": plan, **analysis}
        )
    return out


def test_the_record_is_the_h200_on_sglang_0_5_23_and_the_recipes_geometry(record, cpu_chain):
    meta = record["meta"]
    assert "H200" in meta["gpu"] and meta["sglang"].startswith("sglang-0.5.23")
    assert meta["max_bs"] == 64 and meta["draft_tokens"] == check.DRAFT_TOKENS
    assert meta["capture_bs"] == cpu_chain["capture_bs"]
    assert len(record["cases"]) == len(cpu_chain["cases"]) == 2 * len(check.case_list(6, 64))


def test_the_cpu_model_agrees_with_the_h200_entry_for_entry(record, cpu_chain, modelled):
    """Steps 1-2 (sglang's torch kernels here, its Triton ones there) hand the planner
    the same; step 3 (the write-rule model) plans the same writes; so the analysis the
    record states is the model's."""
    flat = modelled["pristine"] + modelled["patched"]
    for gpu, cpu, mine in zip(record["cases"], cpu_chain["cases"], flat, strict=True):
        assert (gpu["state"], gpu["case"]) == (cpu["state"], cpu["case"])
        for key in (
            "tier",
            "slots",
            "rows",
            "seqs",
            "layout_extends",
            "extends",
            "seq_ends",
            "num_q",
        ):
            assert gpu[key] == cpu[key], (gpu["state"], gpu["case"]["name"], key)
        assert mine["writes"] == sorted(gpu["writes"]), (gpu["state"], gpu["case"]["name"])
        for key in ("missing_needed", "ghost_writes", "victims", "wrong_slot"):
            as_json = json.loads(json.dumps(mine[key]))
            assert as_json == gpu[key], (gpu["state"], gpu["case"]["name"], key)


def by(cases: list[dict], scenario: str) -> list[dict]:
    found = [c for c in cases if c["scenario"] == scenario]
    assert found, scenario
    return found


def test_the_series_hands_the_compressor_each_requests_own_rows(modelled):
    """The patch's red/green on the chain itself: pristine, the compressor gets a full
    rank's leftover on the last request; patched, every extend within the draft width,
    and the same layout (attention) as before."""
    for pristine, patched in zip(modelled["pristine"], modelled["patched"], strict=True):
        assert pristine["name"] == patched["name"]
        assert pristine["layout_extends"] == patched["layout_extends"]
        assert patched["extends"] == [min(e, check.DRAFT_TOKENS) for e in patched["layout_extends"]]
        assert all(e <= check.DRAFT_TOKENS for e in patched["extends"])
        assert pristine["extends"] == pristine["layout_extends"]
    assert any(max(c["extends"]) > check.DRAFT_TOKENS for c in by(modelled["pristine"], "full"))


def test_unpatched_a_full_rank_loses_its_last_requests_rows(modelled):
    full = by(modelled["pristine"], "full")
    n = 64
    assert all(c["slots"] == n for c in full)
    # A full rank with widths 1..8 always has a leftover: the tier is 512 rows.
    for c in full:
        assert c["extends"][n - 1] == c["widths"][n - 1] + c["tier"] - sum(c["widths"])
        assert c["extends"][n - 1] > c["widths"][n - 1]
        assert c["missing_needed"] > 0, c["name"]
        assert {m["request"] for m in c["missing"]} == {n - 1}
    # The ghost rows land on live ring slots: the request's own (c128 and the
    # per-request c4 ring, in some batches) or, through a req_to_token row whose stale
    # entries point at another request's pages, that request's (shared c4: every batch).
    assert sum(c["ghost_writes"]["own"] for c in full if c["ratio"] == 128) > 0
    assert sum(c["ghost_writes"]["own"] for c in full if c["req_ring"]) > 0
    shared = [c for c in full if c["ratio"] == 4 and not c["req_ring"]]
    assert all(c["victims"] for c in shared if c["stale"] == "reused")
    assert all(c["ghost_writes"]["other"] == 0 for c in shared if c["stale"] == "fresh")


@pytest.mark.parametrize("state", ["pristine", "patched"])
def test_below_a_full_rank_no_live_row_is_touched(modelled, state):
    for scenario in ("full-minus-one", "light", "full-uniform"):
        for c in by(modelled[state], scenario):
            n = len(c["widths"])
            assert c["extends"][:n] == c["widths"], c["name"]
            assert c["missing_needed"] == 0 and c["overwritten_live"] == 0, c["name"]
            assert c["wrong_slot"] == 0, c["name"]


def test_patched_a_full_rank_is_served(modelled):
    for scenario in ("full", "full-last-width-3", "full-uniform"):
        for c in by(modelled["patched"], scenario):
            assert c["missing_needed"] == 0, c["name"]
            assert c["overwritten_live"] == 0, c["name"]
            assert c["ghost_writes"]["other"] == 0, c["name"]


def backend_method(tree: Path, name: str):
    """One method of the tree's DeepSeek-V4 backend, compiled from its source."""
    import ast
    import functools
    import types

    import torch

    path = tree / "sglang/srt/layers/attention/deepseek_v4_backend.py"
    module = ast.parse(path.read_text())
    (node,) = [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name == name]
    body = [ast.ImportFrom("__future__", [ast.alias("annotations")], 0), node]
    namespace = {
        "torch": torch,
        "functools": functools,
        "Optional": object,
        "create_paged_compressor_data": lambda compress_ratio, **kw: kw,
        "DSV4Metadata": lambda *args, **kw: kw,
        "types": types,
    }
    exec(compile(ast.fix_missing_locations(ast.Module(body, [])), str(path), "exec"), namespace)
    return namespace[name]


def test_the_pinned_tracks_port_hands_the_compressor_each_requests_own_rows(tmp_path):
    """0024 on sglang 0.5.17 (same padding: its _resolve_verify_layout pads to the slots
    with no cap, its _ragged_capture_slots is min(tier, max_bs)): the compressor is
    handed the full rank's inflated last extend unpatched, the draft width patched.
    The layout is the full-rank case above (64 requests, tier 512)."""
    import types

    import torch

    check.prepare(trees.wheels.wheel("sglang", "0.5.17"), tmp_path)
    widths = [3] * 63 + [2]
    extends = widths[:-1] + [512 - sum(widths[:-1])]
    raw = types.SimpleNamespace(
        req_pool_indices=torch.arange(1, 65),
        seq_lens=torch.full((64,), 4000),
        out_cache_loc=torch.zeros(512, dtype=torch.int64),
        extend_seq_lens=torch.tensor(extends),
        extend_start_loc=torch.zeros(64, dtype=torch.int32),
        verify_lens=torch.tensor(extends),
        total_verify_tokens=512,
        c128_compress_metadata=None,
    )
    backend = types.SimpleNamespace(speculative_num_draft_tokens=check.DRAFT_TOKENS)
    check.stand_in_attention(backend)
    handed = {}
    for state in ("pristine", "patched"):
        method = backend_method(tmp_path / state, "make_forward_metadata_from_raw_verify")
        made = method(backend, raw)
        for ratio in (4, 128):
            kw = made[f"c{ratio}_compress_metadata"]
            handed[state, ratio] = (kw["extend_lens"].tolist(), kw["seq_lens"].tolist())
    for ratio in (4, 128):
        assert handed["pristine", ratio][0][-1] == 512 - 3 * 63
        assert handed["patched", ratio][0] == [min(e, check.DRAFT_TOKENS) for e in extends]
        assert handed["patched", ratio][1] == [4000 + min(e, 8) for e in extends]


def test_every_tier_a_neighbour_can_set_on_both_paths(full_rank_trees):
    """Every tier of the runner's token buckets (from the tree's own
    generate_decode_cuda_graph_batch_sizes and _build_ragged_verify_token_buckets for
    max_bs 64) that holds the batch, as the SPS planner (tier_num_tokens) or a DP
    neighbour sets it, on graph replay
    and on the eager path (bs = len(seq_lens)): a full rank, 16 requests and one, all
    of width 1. Graph replay below max_bs keeps a padding slot at every tier; a full
    rank and every eager batch hand the last request the leftover pristine; patched,
    the compressor never sees more than the draft width."""
    found = run_chain_cpu(full_rank_trees, "--neighbour")
    assert found["buckets"] == sorted({bs * check.DRAFT_TOKENS for bs in found["capture_bs"]})
    assert max(found["capture_bs"]) == found["max_bs"] == 64
    seen = set()
    for c in found["cases"]:
        n, tier, state, path = c["requests"], c["tier"], c["state"], c["path"]
        seen.add((n, path, state))
        leftover_last = tier - (n - 1)
        # Graph replay: min(tier, max_bs) slots, a padding slot unless that is n (a
        # full rank, or a tier of exactly n rows: no leftover). Eager: n slots.
        slots = min(tier, found["max_bs"]) if path == "graph" else n
        assert c["slots"] == slots, c
        assert c["last_layout"] == (1 if slots > n else leftover_last), c
        if state == "pristine":
            assert c["last_compressor"] == c["last_layout"], c
        else:
            assert c["last_compressor"] == min(c["last_layout"], check.DRAFT_TOKENS), c
            assert c["max_compressor"] <= check.DRAFT_TOKENS, c
    assert len(seen) == 3 * 2 * 2
    # A full rank meets the leftover at every tier above its rows, not only the top:
    # 64 width-1 requests on tier 80 give the last request 17 rows.
    mid = [c for c in found["cases"] if c["requests"] == 64 and c["tier"] == 80]
    assert {(c["state"], c["last_layout"], c["last_compressor"]) for c in mid} == {
        ("pristine", 17, 17),
        ("patched", 17, check.DRAFT_TOKENS),
    }
    # Pristine is exposed on the eager path with one request once the tier is above 8.
    assert any(
        c["state"] == "pristine"
        and c["path"] == "eager"
        and c["requests"] == 1
        and c["last_compressor"] > check.DRAFT_TOKENS
        for c in found["cases"]
    )
