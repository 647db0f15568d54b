"""Compact ragged verify at a full DP rank, both tracks (sglang 0.5.17 and 0.5.23;
issues 28 and 48).

The H200 ran sglang's own chain (benchmarks/dsv4_full_rank_check.py: the layout and
its padding kernels, the graph runner's slot count and token buckets, the
DeepSeek-V4 backend's ``_resolve_verify_layout`` and
``init_forward_metadata_target_verify``, then the GPU compress planner) on graph
replay and on the eager path, on every tier each compact recipe's rank can be set to,
and recorded every case under docs/benchmarks/dsv4-full-rank-h200/.
This module holds a CPU model of the same chain to those records, entry for entry:
steps 1-2 are sglang's own code with its torch implementations of the two kernels
(run here in a subprocess on the unpacked 0.5.23 wheel), step 3 is the write rule of
tests/support/compress_plan.py (itself held to earlier H200 plans). Then it states
what the records show, which is what the full-rank lint (sm12x/recipe/lints.py)
guards: a rank that fills its largest decode graph (on graph replay) or any batch on
the eager path hands its last request the tier's leftover rows and the planner loses
that request's verify rows; on graph replay one request short of a full rank, the
leftover goes to the padding row and no live row is touched. Patch 0024 serves all
of them.
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
sys.path.insert(0, str(REPO / "benchmarks"))
import dsv4_full_rank_check as check  # noqa: E402

VERSIONS = ("0.5.17", "0.5.23")


def run_chain_cpu(root: Path, *extra: str) -> dict:
    """Steps 1-2 on the CPU for both trees (pristine, and patched by scripts/apply-patches
    as the image is), by the tree's own code, in a process of their own."""
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


@pytest.fixture(scope="module", params=VERSIONS)
def version(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def full_rank_trees(tmp_path_factory, version) -> Path:
    root = tmp_path_factory.mktemp(f"full-rank-{version}")
    check.prepare(trees.wheels.wheel("sglang", version), root)
    return root


def model_plan(version: str, state: str, case: check.Case, handed: dict):
    """Step 3 by the write-rule model (the tree's rule, the served pool's SWA page):
    the plan, and the run's analysis of it."""
    g = model.Geometry(
        case.ratio, check.SPEC_RING[case.ratio], case.req_ring, check.SWA_PAGE[case.ratio]
    )
    rule = model.rule_of(version, state)
    r2t, f2s = check.tables(case, handed)
    plan, rid = [], 0
    for row, seq, ext in zip(handed["rows"], handed["seqs"], handed["extends"]):
        for j in range(ext):
            if model.writes(rule, g, seq + ext, seq + j, ext):
                plan.append(
                    [rid, check.slot_of(case.ratio, g.ring, case.req_ring, row, seq + j, r2t, f2s)]
                )
            rid += 1
    return sorted(plan), check.analyse(case, handed, [tuple(w) for w in plan], r2t, f2s)


@pytest.fixture(scope="module")
def cpu_chain(full_rank_trees) -> dict:
    return run_chain_cpu(full_rank_trees)


@pytest.fixture(scope="module")
def record(version) -> dict:
    return check.read_record(check.RECORDS[version])


@pytest.fixture(scope="module")
def modelled(cpu_chain, version) -> dict[str, list[dict]]:
    """The run's own cases (check.case_list) through the CPU model of the whole chain,
    by tree."""
    out: dict[str, list[dict]] = {"pristine": [], "patched": []}
    for c in cpu_chain["cases"]:
        case = check.Case(**c["case"])
        plan, analysis = model_plan(version, c["state"], case, c)
        out[c["state"]].append(
            {**c["case"], "scenario": case.name.split("/")[0], **c, "writes": plan, **analysis}
        )
    return out


def test_the_record_is_the_h200_on_the_tree_and_every_compact_recipes_rank(
    record, cpu_chain, version
):
    meta = record["meta"]
    assert "H200" in meta["gpu"] and meta["sglang"] == cpu_chain["sglang"] == version
    assert meta["recipes"] == cpu_chain["recipes"] == check.recipe_geometry()
    assert {int(k): v for k, v in meta["swa_page"].items()} == check.SWA_PAGE == {4: 256, 128: 256}
    assert len(record["cases"]) == len(cpu_chain["cases"])
    assert {c["case"]["path"] for c in record["cases"]} == {"graph", "eager"}


@pytest.fixture(scope="module")
def observed(record) -> dict[str, list[dict]]:
    """The H200's cases (what the planner wrote and the analysis of it), by tree: what
    the findings below are read from."""
    out: dict[str, list[dict]] = {"pristine": [], "patched": []}
    for r in record["cases"]:
        out[r["state"]].append({**r["case"], **r})
    return out


def model_holds(version: str, state: str, gpu: dict) -> bool:
    """The write-rule model covers extends up to the draft width on 0.5.17's pristine
    planner (held to the kernel records there); past it, that planner's rule is the
    record's alone."""
    return (
        model.rule_of(version, state) != "0.5.17-pristine"
        or max(gpu["extends"]) <= gpu["case"]["draft"]
    )


def test_the_cpu_model_agrees_with_the_h200_entry_for_entry(record, cpu_chain, modelled, version):
    """Steps 1-2 (sglang's torch kernels here, its Triton ones there) hand the planner
    the same, for every case; step 3 (the write-rule model) plans the same writes (the
    record keeps their count and SHA-256) wherever the model holds, so the analysis
    the record states is the model's there."""
    flat = modelled["pristine"] + modelled["patched"]
    held = 0
    for gpu, cpu, mine in zip(record["cases"], cpu_chain["cases"], flat, strict=True):
        assert (gpu["state"], gpu["case"]) == (cpu["state"], cpu["case"])
        for key in ("tier", "slots", "layout_extends", "extends", "seq_ends", "num_q"):
            assert gpu[key] == cpu[key], (gpu["state"], gpu["case"]["name"], key)
        if not model_holds(version, gpu["state"], gpu):
            continue
        held += 1
        assert len(mine["writes"]) == gpu["writes"], (gpu["state"], gpu["case"]["name"])
        assert check.writes_digest(mine["writes"]) == gpu["writes_sha256"], gpu["case"]["name"]
        for key in ("missing_needed", "ghost_writes", "victims", "wrong_slot"):
            as_json = json.loads(json.dumps(mine[key]))
            assert as_json == gpu[key], (gpu["state"], gpu["case"]["name"], key)
    # Every case on 0.5.23 and every patched case; on 0.5.17 only pristine's
    # inflated extends are the record's alone.
    assert held == len(flat) if version == "0.5.23" else held >= len(modelled["patched"])


def by(cases: list[dict], scenario: str, path: str | None = None) -> list[dict]:
    """The cases of a scenario (a name ending in "-": every scenario it begins)."""
    found = [
        c
        for c in cases
        if (
            c["scenario"] == scenario
            or (scenario.endswith("-") and c["scenario"].startswith(scenario))
        )
        and (path is None or c["path"] == path)
    ]
    assert found, (scenario, path)
    return found


def test_the_series_hands_the_compressor_each_requests_own_rows(observed):
    """The patch's red/green on the chain itself: pristine, the compressor gets the
    leftover on the last request; patched, every extend within the draft width, and
    the same layout (attention) as before."""
    for pristine, patched in zip(observed["pristine"], observed["patched"], strict=True):
        assert pristine["name"] == patched["name"]
        assert pristine["layout_extends"] == patched["layout_extends"]
        draft = patched["draft"]
        assert patched["extends"] == [min(e, draft) for e in patched["layout_extends"]]
        assert pristine["extends"] == pristine["layout_extends"]
    for path in ("graph", "eager"):
        assert any(max(c["extends"]) > c["draft"] for c in by(observed["pristine"], "full", path))


def own_bug(version: str) -> bool:
    """0.5.17's pristine planner also loses rows of any verify wider than 4 (the row cap
    0020 lifts): its pristine tree is not a baseline for the leftover alone."""
    return version == "0.5.17"


@pytest.mark.parametrize("path", ["graph", "eager"])
def test_unpatched_a_full_rank_loses_its_last_requests_rows(observed, path, version):
    full = by(observed["pristine"], "full", path)
    for c in full:
        n = len(c["widths"])
        assert c["slots"] == n
        # A full rank with mixed widths always has a leftover: the tier is max_bs x 8.
        assert c["extends"][n - 1] == c["widths"][n - 1] + c["tier"] - sum(c["widths"])
        assert c["extends"][n - 1] > c["widths"][n - 1]
        assert c["missing_needed"] > 0, c["name"]
        if not own_bug(version):
            assert {m["request"] for m in c["missing"]} == {n - 1}
    # The ghost rows land on live ring slots: the request's own, or through a
    # req_to_token row whose stale entries point at another request's pages, that
    # request's (shared c4 ring).
    assert sum(c["ghost_writes"]["own"] for c in full if c["ratio"] == 128) > 0
    shared = [c for c in full if c["ratio"] == 4 and not c["req_ring"]]
    assert any(c["victims"] for c in shared if c["stale"] == "reused")
    assert all(c["ghost_writes"]["other"] == 0 for c in shared if c["stale"] == "fresh")


@pytest.mark.parametrize("state", ["pristine", "patched"])
def test_on_graph_replay_below_a_full_rank_no_live_row_is_touched(observed, state, version):
    # 0.5.17 pristine loses rows of widths above 4 at any batch (0020's row cap), so
    # there the leftover's part is checked alone, and the row cap's loss must show:
    # a pristine 0.5.17 that lost nothing would mean these cases miss the bug 0020 fixes.
    capped = state == "pristine" and own_bug(version)
    lost = 0
    for scenario in ("full-minus-one", "light", "full-uniform"):
        for c in by(observed[state], scenario, "graph"):
            n = len(c["widths"])
            assert c["extends"][:n] == c["widths"], c["name"]
            assert c["overwritten_live"] == 0, c["name"]
            assert c["wrong_slot"] == 0, c["name"]
            if capped:
                lost += c["missing_needed"] > 0 and max(c["widths"]) > 4
            else:
                assert c["missing_needed"] == 0, c["name"]
    assert lost > 0 if capped else lost == 0


def test_on_the_eager_path_any_batch_size_is_exposed(observed):
    """bs = len(seq_lens): no padding slot, so one request short of a full rank and a
    light batch hand their last request the leftover too, and pristine loses its rows."""
    for scenario in ("full-minus-one", "light"):
        found = by(observed["pristine"], scenario, "eager")
        assert all(c["slots"] == len(c["widths"]) for c in found)
        assert sum(c["missing_needed"] for c in found) > 0, scenario
        assert any(c["ghost_writes"]["other"] for c in found), scenario


def test_a_last_request_of_width_3_is_inflated(observed):
    """63 requests of width 7 and one of 3 on the tier 64 x 8: the last is handed
    max_bs + draft - 1 = 71 rows pristine on either path, the draft width patched."""
    for pristine, patched in zip(
        by(observed["pristine"], "full-last-width-3"),
        by(observed["patched"], "full-last-width-3"),
        strict=True,
    ):
        n, draft = len(pristine["widths"]), pristine["draft"]
        assert pristine["widths"][-1] == 3 and pristine["extends"][n - 1] == n + draft - 1 == 71
        assert patched["extends"][n - 1] == draft
    assert sum(c["missing_needed"] for c in by(observed["pristine"], "full-last-width-3")) > 0


def test_patched_every_case_is_served(observed):
    """Patched, on both paths, at every tier of every compact recipe: no needed row
    missing, no live slot overwritten, no write to a wrong slot."""
    for c in observed["patched"]:
        assert c["missing_needed"] == 0, c["name"]
        assert c["overwritten_live"] == 0, c["name"]
        assert c["ghost_writes"]["other"] == 0, c["name"]
        assert c["wrong_slot"] == 0, c["name"]


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


def test_every_tier_a_neighbour_can_set_on_both_paths(cpu_chain, observed):
    """Every compact recipe's token buckets (the tree's own
    generate_decode_cuda_graph_batch_sizes and _build_ragged_verify_token_buckets for
    its largest decode graph and verify width) that hold the batch, as the SPS planner
    (tier_num_tokens) or a DP neighbour sets them, on graph replay and on the eager
    path (bs = len(seq_lens)): a full rank and one request, all of width 1. Graph
    replay below max_bs keeps a padding slot at every tier; a full rank at every tier
    above its rows, and the eager path at any batch size, hand the last request the
    leftover pristine; patched, the compressor never sees more than the draft width."""
    recipes = cpu_chain["recipes"]
    for name, g in recipes.items():
        assert max(cpu_chain["capture_bs"][name]) == g["max_bs"]
        assert cpu_chain["buckets"][name] == sorted(
            {bs * g["draft"] for bs in cpu_chain["capture_bs"][name]}
        )
    seen = set()
    for state in ("pristine", "patched"):
        for c in by(observed[state], "tiers-"):
            n, tier, path, draft = len(c["widths"]), c["tier"], c["path"], c["draft"]
            assert tier in cpu_chain["buckets"][c["recipe"]]
            seen.add((c["recipe"], n, path, state))
            slots = min(tier, c["max_bs"]) if path == "graph" else n
            assert c["slots"] == slots, c["name"]
            last = c["layout_extends"][n - 1]
            assert last == (1 if slots > n else tier - (n - 1)), c["name"]
            if state == "pristine":
                assert c["extends"][n - 1] == last
            else:
                assert c["extends"][n - 1] == min(last, draft)
                assert max(c["extends"]) <= draft
    assert len(seen) == len(recipes) * 2 * 2 * 2
    # A full rank meets the leftover at every tier above its rows, not only the top:
    # 64 width-1 requests on tier 80 give the last request 17 rows, and pristine loses
    # needed rows at mid tiers on graph replay.
    mid = [
        c
        for state in ("pristine", "patched")
        for c in observed[state]
        if c["name"] == "tiers-rtx-pro-6000-tp4-throughput/n64-t80" and c["path"] == "graph"
    ]
    assert {(c["state"], c["layout_extends"][63], c["extends"][63]) for c in mid} == {
        ("pristine", 17, 17),
        ("patched", 17, 8),
    }
    for name, g in recipes.items():
        top = max(cpu_chain["buckets"][name])
        exposed = [
            c
            for c in by(observed["pristine"], f"tiers-{name}", "graph")
            if len(c["widths"]) == g["max_bs"] and c["tier"] < top and c["missing_needed"]
        ]
        assert exposed, f"{name}: no mid tier loses rows on a full rank"
        # Eager: one request, on a tier a neighbour sets, is exposed.
        assert any(
            len(c["widths"]) == 1 and c["missing_needed"]
            for c in by(observed["pristine"], f"tiers-{name}", "eager")
        ), name
