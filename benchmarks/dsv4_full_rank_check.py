"""Compact ragged verify at a full DP rank, through sglang 0.5.23's own metadata chain.

The question (issue 28): under ``SGLANG_RAGGED_VERIFY_MODE=compact`` a verify batch is
padded to a captured graph tier of ``graph_num_tokens`` rows and
``_ragged_capture_slots(tier) = min(tier, max_bs)`` request slots. The DeepSeek-V4
backend pads the layout with ``padded_to_bucket(padded_bs=slots)`` and no cap, so
when a rank holds ``max_bs`` requests there is no padding slot and the tier's
leftover rows (``tier - sum(verify_lens)``) are given to the last real request. Its
extend length then reaches the compress planner hundreds of rows wide. What does the
planner do with that, and with whose state?

This script runs the chain as sglang runs it, on a CUDA GPU:

1. ``RaggedVerifyLayout.from_verify_lens_device`` with the tier the DSPARK planner
   picks (``verify_layout_graph_num_tokens_floor`` rounded up on the runner's token
   grid, ``_build_ragged_verify_token_buckets``): sglang's own code, imported from
   the tree.
2. ``_ragged_capture_slots`` (the decode graph runner), ``_resolve_verify_layout``
   and ``init_forward_metadata_target_verify`` (the DeepSeek-V4 backend): the real
   functions, compiled from the tree's source files (ast) and called on stand-in
   ``self`` objects that hold only the attributes they read. The backend module
   itself cannot be imported without the whole serving stack.
3. ``seq_lens + extend_seq_lens`` as ``make_forward_metadata_from_raw_verify`` does
   (its ragged branch; the rest of that method builds attention metadata the
   compressor does not read), then the GPU compress planner (``plan_compress_prefill``
   of the tree's c_plan.cuh, compiled as sglang's ``load_jit`` does by
   benchmarks/dsv4_kernel_check.py) with the arguments ``CompressorPrefillPlan.generate``
   passes (``use_cuda_graph=True``, ``num_q_tokens = graph_num_tokens``).

``req_to_token`` is laid out as sglang's ``ReqToTokenPool`` keeps it: row 0 is the
padding row (all zeros: "cuda-graph padded batches default req_pool_indices to 0"),
requests hold rows 1..N, and a row holds its request's locations up to its allocated
length (the verify's seq + draft tokens). Past that a row keeps whatever its last
occupant wrote (``free`` does not clear it): ``--stale fresh`` models a row never
used before (zeros: location 0, the padding page), ``--stale reused`` a row whose
previous occupant's pages now belong to another live request (worst case: the next
row's request, aligned so the extend's last rows read that request's newest rows). Full location 0 and SWA page 0 are the padding
sink (the paged allocators hand out pages from 1).

For every case it records the per-request extend lengths and the write plan, and
reports: needed verify rows the plan leaves unwritten (missing), and the ring slots
the plan writes for rows no request verified (ghost rows), by owner: a live row some
request's next compression reads (its own or another request's), the padding sink,
or a slot no live row holds.

Prepare (any machine, repository root; writes only sglang's own files, unchanged):
    python benchmarks/dsv4_full_rank_check.py prepare .cache/wheels/sglang-0.5.23-*.whl .devtrees/full-rank
Run (CUDA machine; msgspec and apache_tvm_ffi importable):
    python benchmarks/dsv4_full_rank_check.py run --tree .devtrees/full-rank --json out/full-rank.json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import subprocess
import sys
import types
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# What the chain needs from the wheel: modules imported as they are, and source files
# whose functions are compiled one by one (their modules import the serving stack).
IMPORTED = (
    "sglang/srt/environ.py",
    "sglang/srt/speculative/ragged_verify.py",
    "sglang/kernels/ops/speculative/ragged_verify_kernels.py",
)
COMPILED = {
    "sglang/srt/layers/attention/deepseek_v4_backend.py": [
        "_resolve_verify_layout",
        "init_forward_metadata_target_verify",
        "make_forward_metadata_from_raw_verify",
        "_make_target_verify_c128_metadata",
        "get_cuda_graph_seq_len_fill_value",
        "DSV4RawVerifyMetadata",
    ],
    "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py": [
        "_ragged_capture_slots",
        "_build_ragged_verify_token_buckets",
    ],
    "sglang/srt/speculative/dspark_components/dspark_planner.py": [
        "verify_layout_graph_num_tokens_floor",
        "ragged_capture_num_tokens",
    ],
    "sglang/srt/arg_groups/cuda_graph_hook.py": ["generate_decode_cuda_graph_batch_sizes"],
}
PLAN_SOURCES = "sglang/kernels/jit/"

# Geometry of the throughput recipes (DSPARK depth 7: 8 draft tokens per request;
# --cuda-graph-max-bs-decode 64) and of DeepSeek-V4's pools.
DRAFT_TOKENS = 8
SWA_PAGE = {4: 128, 128: 256}
SPEC_RING = {4: 16, 128: 256}  # get_compress_state_ring_size(ratio, 8 draft tokens)
MAX_TOKENS = 8192


def series_targets(version: str) -> list[str]:
    """Every file the version's patch series changes (apply-patches checks them all):
    each patch's target and whatever else its diff names."""
    import tomllib

    root = HERE.parent / "patches/sglang"
    table = tomllib.loads((root / "patches.toml").read_text())
    files = set()
    for patch in table["patch"]:
        if version in patch["sglang"]:
            files.add(patch["target"])
            for line in (root / version / patch["file"]).read_text().splitlines():
                if line.startswith("+++ b/"):
                    files.add(line[len("+++ b/") :].split("\t")[0])
    return sorted(files)


def prepare(wheel: Path, out: Path) -> None:
    """Two trees of sglang's own files the chain needs, out of the wheel: `pristine`
    (unchanged) and `patched` (scripts/apply-patches, as the image applies the series).
    The packages above the imported modules are empty (sglang/__init__.py imports the
    serving stack)."""
    version = wheel.name.split("-")[1]
    keep = {*IMPORTED, *COMPILED, *series_targets(version)}
    for state in ("pristine", "patched"):
        tree = out / state
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
            wanted = [n for n in names if n in keep or n.startswith(PLAN_SOURCES)]
            wanted += [
                n for n in names if ".dist-info/" in n and n.endswith(("METADATA", "RECORD"))
            ]
            for name in (n for n in wanted if not n.endswith("/")):
                target = tree / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(name))
        for module in IMPORTED:
            for parent in Path(module).parents:
                if parent != Path("."):
                    init = tree / parent / "__init__.py"
                    if not init.exists():
                        init.write_text("")
        if state == "patched":
            done = subprocess.run(
                [
                    sys.executable,
                    str(HERE.parent / "scripts/apply-patches"),
                    "--site-packages",
                    str(tree),
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                raise SystemExit(f"apply-patches failed on {tree}:\n{done.stderr}")
    print(f"prepared {out}/pristine and {out}/patched from {wheel.name}")


def compile_functions(tree: Path, namespace: dict[str, Any]) -> dict[str, Any]:
    """The named functions and classes of each source file, compiled from the tree's
    own source in one shared namespace (the names they use from their modules are
    given in it)."""
    found: dict[str, Any] = {}
    for rel, names in COMPILED.items():
        module = ast.parse((tree / rel).read_text(), filename=str(tree / rel))
        nodes: dict[str, ast.stmt] = {}
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in names:
                nodes.setdefault(node.name, node)
        missing = sorted(set(names) - set(nodes))
        if missing:
            raise SystemExit(f"{rel}: no definition of {', '.join(missing)}: not sglang 0.5.23?")
        body = [ast.ImportFrom("__future__", [ast.alias("annotations")], 0), *nodes.values()]
        code = compile(ast.fix_missing_locations(ast.Module(body, [])), str(tree / rel), "exec")
        exec(code, namespace)
        found.update({name: namespace[name] for name in names})
    return found


STATES = ("pristine", "patched")


def load_chain(trees: Path):
    """sglang's modules (the same in both trees: the series changes none of them),
    and each tree's compiled functions."""
    os.environ["SGLANG_RAGGED_VERIFY_MODE"] = "compact"
    sys.path.insert(0, str(trees / "pristine"))
    import torch
    from sglang.srt.environ import envs
    from sglang.srt.speculative import ragged_verify as rv

    def namespace() -> dict[str, Any]:
        return {
            "torch": torch,
            "envs": envs,
            "dataclass": dataclass,
            "Optional": Any,
            "Union": Any,
            "List": list,
            "Tuple": tuple,
            "RaggedVerifyLayout": rv.RaggedVerifyLayout,
            "RaggedVerifyMode": rv.RaggedVerifyMode,
            "read_ragged_verify_mode": rv.read_ragged_verify_mode,
            "resolve_ragged_verify_layout": rv.resolve_ragged_verify_layout,
            # The recipes run no context parallelism: the only field the method reads.
            "get_parallel": lambda: types.SimpleNamespace(attn_cp_size=1),
            # What the compressor is handed: make_forward_metadata_from_raw_verify's
            # calls, recorded (the planner runs on them, with the case's tables).
            "create_paged_compressor_data": lambda compress_ratio, **kw: (
                "compressor",
                compress_ratio,
                kw,
            ),
            "DSV4Metadata": lambda *args, **kw: kw,
            "functools": __import__("functools"),
            "FusedCompressMetadata": object,
            # generate_decode_cuda_graph_batch_sizes reads two resolved fields through it.
            "resolving_view": lambda server_args: server_args,
        }

    return rv, {state: compile_functions(trees / state, namespace()) for state in STATES}


@dataclass
class Case:
    name: str
    ratio: int
    req_ring: bool
    stale: str
    seq_lens: list[int]
    widths: list[int]


def chain(
    rv,
    fns,
    case: Case,
    max_bs: int,
    capture_bs: list[int],
    dev: str = "cuda",
    tier: int | None = None,
    path: str = "graph",
) -> dict:
    """Steps 1-2 of the module docstring: what the compress planner is handed. On
    "cpu" sglang's own torch implementations of the two kernels run instead of its
    Triton ones (the CPU model tests/unit/test_full_rank_model.py checks).

    tier: a tier the SPS planner or a DP neighbour set (any of the runner's token
    buckets that holds the batch's rows); None: the batch's own floor, rounded up. path "eager": the verify replays no graph
    and the backend pads the layout to bs = len(seq_lens) (no padding slot)."""
    import torch

    runner = types.SimpleNamespace(
        max_bs=max_bs, captured_req_width=DRAFT_TOKENS, capture_bs=capture_bs
    )
    runner.capture_num_tokens = fns["_build_ragged_verify_token_buckets"](runner)
    runner.ragged_verify_mode = True
    model_runner = types.SimpleNamespace(decode_cuda_graph_runner=runner)
    n = len(case.widths)
    floor = fns["verify_layout_graph_num_tokens_floor"](
        num_reqs=n,
        ragged_verify_mode=rv.RaggedVerifyMode.COMPACT,
        verify_num_draft_tokens=DRAFT_TOKENS,
        model_runner=model_runner,
    )
    own = rv.round_up_grid(floor, fns["ragged_capture_num_tokens"](model_runner=model_runner))
    if tier is None:
        tier = own
    elif tier < sum(case.widths) or tier not in runner.capture_num_tokens:
        # The DSPARK planner's own tier (verify_layout_graph_num_tokens_floor's
        # tier_num_tokens: min(tier, requests x draft tokens)) can set any bucket that
        # holds the batch's rows; a DP neighbour's larger batch any bucket above.
        raise ValueError(f"tier {tier}: not a bucket holding the batch's rows")
    layout = rv.RaggedVerifyLayout.from_verify_lens_device(
        verify_lens=torch.tensor(case.widths, dtype=torch.int32, device=dev), graph_num_tokens=tier
    )
    slots = fns["_ragged_capture_slots"](runner, tier) if path == "graph" else n
    backend = types.SimpleNamespace(
        online_c128_mtp=types.SimpleNamespace(enabled=lambda: False),
        has_c128=True,
        needs_cpu_seq_lens=False,
        speculative_num_draft_tokens=DRAFT_TOKENS,
        extend_seq_lens_buffer=torch.zeros(max_bs, dtype=torch.int32, device=dev),
        extend_start_loc_buffer=torch.zeros(max_bs, dtype=torch.int32, device=dev),
    )
    backend._make_target_verify_c128_metadata = types.MethodType(
        fns["_make_target_verify_c128_metadata"], backend
    )
    fill = fns["get_cuda_graph_seq_len_fill_value"](backend)
    batch = types.SimpleNamespace(spec_info=types.SimpleNamespace(ragged_verify_layout=layout))
    padded = fns["_resolve_verify_layout"](backend, batch, bs=slots)
    # The runner's buffers past the real requests: req_pool_indices 0, seq_lens the fill.
    rows = list(range(1, n + 1)) + [0] * (slots - n)
    seqs = case.seq_lens + [fill] * (slots - n)
    raw = fns["init_forward_metadata_target_verify"](
        backend,
        max_seq_len=max(seqs) + tier,
        req_pool_indices=torch.tensor(rows, dtype=torch.int64, device=dev),
        seq_lens=torch.tensor(seqs, dtype=torch.int64, device=dev),
        out_cache_loc=torch.zeros(tier, dtype=torch.int64, device=dev),
        ragged_layout=padded,
    )
    # The backend's own next step.
    stand_in_attention(backend)
    made = fns["make_forward_metadata_from_raw_verify"](backend, raw, graph_backed=True)
    handed = {}
    for ratio in (4, 128):
        _, r, kw = made[f"c{ratio}_compress_metadata"]
        assert r == ratio
        handed[ratio] = {
            "seq_ends": [int(x) for x in kw["seq_lens"].tolist()],
            "extends": [int(x) for x in kw["extend_lens"].tolist()],
            "num_q": int(kw["num_q_tokens"]),
        }
    assert handed[4] == handed[128]
    return {
        "tier": tier,
        "slots": slots,
        "rows": rows,
        "seqs": seqs,
        "layout_extends": [int(x) for x in raw.extend_seq_lens.tolist()],
        **handed[4],
    }


def stand_in_attention(backend) -> None:
    """What make_forward_metadata_from_raw_verify reads besides the compressor's
    inputs: the attention-side helpers it calls, stood in (their output goes to
    attention, not to the compressor), and the pool handles it passes through."""
    import torch

    backend.token_to_kv_pool = None
    # Read for its width only (0025 bounds the causal lengths by it): a row as wide as
    # the tables' (tables()).
    backend.req_to_token = torch.zeros((1, MAX_TOKENS), dtype=torch.int32)
    backend.MAX_SEQ_LEN_FOR_CAPTURE = 0
    backend.has_c4 = backend.has_c128 = True
    # Attention's causal lengths (stood in: zeros, one a query row).
    backend._expand_prefill_casually_vectorized = lambda **kw: (
        torch.zeros(kw["num_tokens"], dtype=torch.int32),
        None,
    )
    backend.make_core_attn_metadata = lambda **kw: types.SimpleNamespace(low_ratios=())
    backend.init_forward_metadata_indexer = lambda *a, **kw: None


def tables(case: Case, handed: dict):
    """req_to_token and full -> SWA as sglang's pools hold them (module docstring)."""
    import torch

    n = len(case.widths)
    r2t = torch.zeros((n + 1, MAX_TOKENS), dtype=torch.int32)
    pos = torch.arange(MAX_TOKENS, dtype=torch.int32)
    live_len = [s + DRAFT_TOKENS for s in case.seq_lens]
    # Request in row r (1..n) owns full locations (r - 1) * MAX_TOKENS + SWA page + p.
    own = [(r - 1) * MAX_TOKENS + SWA_PAGE[4] + pos for r in range(1, n + 1)]
    for r in range(1, n + 1):
        i = r - 1
        r2t[r, : live_len[i]] = own[i][: live_len[i]]
        end = case.seq_lens[i] + handed["layout_extends"][i]
        if case.stale == "reused" and end > live_len[i]:
            # Worst case: the row's previous occupant's pages were handed to the
            # next row's request, and the stale entries the extend's last rows read
            # are that request's newest rows (its verify's last position).
            o = r % n
            shift = end - (case.seq_lens[o] + case.widths[o])
            for p in range(live_len[i], end):
                if 0 <= p - shift < live_len[o]:
                    r2t[r, p] = own[o][p - shift]
    # full -> SWA: the identity (both page-aligned, page 0 the padding sink).
    f2s = torch.arange(n * MAX_TOKENS + SWA_PAGE[4] + 1, dtype=torch.int64)
    return r2t, f2s


def slot_of(ratio: int, ring: int, req_ring: bool, row: int, position: int, r2t, f2s) -> int:
    """sglang's ring slot formulas (c_plan.cuh compute_loc / compute_c128_loc /
    compute_req_ring_loc), read through the tables."""
    if ratio == 128 or req_ring:
        return row * ring + position % ring
    swa = int(f2s[int(r2t[row, position])])
    return (swa // SWA_PAGE[4]) * ring + swa % ring


def needed(ratio: int, position: int) -> bool:
    """A row some acceptance keeps and the next compression reads back (as in
    benchmarks/dsv4_kernel_check.py)."""
    boundary = (position + 1) // ratio * ratio
    return position >= boundary - (ratio if ratio == 4 else 0)


def analyse(case: Case, handed: dict, writes: list[tuple[int, int]], r2t, f2s) -> dict:
    ratio, ring = case.ratio, SPEC_RING[case.ratio]
    n = len(case.widths)
    # Every live row some request's next compression reads: the ring's live content.
    owner: dict[int, tuple[int, int]] = {}
    for i in range(n):
        # Rows the next compression of request i reads, whatever it accepts: from
        # its least next length's boundary (less the c4 overlap) to its verify's end.
        first = (case.seq_lens[i] + 1) // ratio * ratio - (ratio if ratio == 4 else 0)
        for p in range(max(0, first), case.seq_lens[i] + case.widths[i]):
            owner[slot_of(ratio, ring, case.req_ring, i + 1, p, r2t, f2s)] = (i, p)
    padding_slots = {slot_of(ratio, ring, case.req_ring, 0, p, r2t, f2s) for p in range(ring)}
    written = dict(writes)
    rid = 0
    missing: list[dict] = []
    ghost = {"own": 0, "other": 0, "padding": 0, "free": 0}
    victims: dict[int, int] = {}
    wrong_slot = 0
    for slot_index, (row, seq, ext) in enumerate(
        zip(handed["rows"], handed["seqs"], handed["extends"])
    ):
        real = case.widths[slot_index] if slot_index < n else 0
        for j in range(ext):
            position = seq + j
            loc = written.get(rid)
            if j < real:
                if loc is not None:
                    wrong_slot += loc != slot_of(
                        ratio, ring, case.req_ring, row, position, r2t, f2s
                    )
                elif needed(ratio, position):
                    missing.append({"request": slot_index, "row": j, "position": position})
            elif loc is not None:
                who = owner.get(loc)
                if loc in padding_slots or (not case.req_ring and ratio == 4 and loc < ring):
                    ghost["padding"] += 1
                elif who is None:
                    ghost["free"] += 1
                elif who[0] == slot_index:
                    ghost["own"] += 1
                else:
                    ghost["other"] += 1
                    victims[who[0]] = victims.get(who[0], 0) + 1
            rid += 1
    return {
        "missing_needed": len(missing),
        "missing": missing[:16],
        "ghost_writes": ghost,
        "overwritten_live": ghost["own"] + ghost["other"],
        "victims": sorted(victims.items()),
        "wrong_slot": wrong_slot,
    }


def cases(seeds: int, max_bs: int) -> list[tuple[str, int, list[int], list[int]]]:
    """(scenario, seed, seq_lens, widths): a full rank (max_bs requests), one request
    short of it (the recipe invariant), a light batch, each with widths 1..8 drawn
    per request; plus every request at full width (no leftover) as a control."""
    out = []
    for scenario, count in (("full", max_bs), ("full-minus-one", max_bs - 1), ("light", 16)):
        for seed in range(seeds):
            rng = random.Random(1000 * count + seed)
            seqs = [rng.randrange(2 * 256, MAX_TOKENS - 1024) for _ in range(count)]
            widths = [rng.randint(1, DRAFT_TOKENS) for _ in range(count)]
            out.append((scenario, seed, seqs, widths))
    rng = random.Random(7)
    out.append(("full-uniform", 0, [rng.randrange(512, 7000) for _ in range(max_bs)], [8] * max_bs))
    # The minimal case, as a full rank: one request of width 3 last.
    out.append(
        ("full-last-width-3", 0, [3000 + 37 * i for i in range(max_bs)], [8] * (max_bs - 1) + [3])
    )
    return out


def capture_sizes(fns, max_bs: int) -> list[int]:
    """The decode graph sizes sglang resolves for a DSPARK recipe with this cap."""
    resolved = types.SimpleNamespace(
        disable_cuda_graph_padding=False, speculative_algorithm="DSPARK"
    )
    return fns["generate_decode_cuda_graph_batch_sizes"](resolved, max_bs)


def run(args) -> int:
    import torch

    sys.path.insert(0, str(HERE))
    import dsv4_kernel_check as kc

    rv, by_state = load_chain(args.tree)
    # c_plan.cuh is the same in both trees (the series changes store.cuh only there).
    planner = kc.plan_module(args.tree / "pristine", args.build)
    capture_bs = capture_sizes(by_state["pristine"], args.max_bs)
    results = []
    for state, fns in by_state.items():
        for case in case_list(args.seeds, args.max_bs):
            handed = chain(rv, fns, case, args.max_bs, capture_bs)
            r2t, f2s = tables(case, handed)
            dev = "cuda"
            plan_c, plan_w = planner.plan_prefill(
                torch.tensor(handed["rows"], dtype=torch.int64, device=dev),
                r2t.to(dev),
                f2s.to(dev),
                torch.tensor(handed["seq_ends"], dtype=torch.int64, device=dev),
                torch.tensor(handed["extends"], dtype=torch.int64, device=dev),
                torch.empty(0, dtype=torch.uint8),
                handed["num_q"],
                case.ratio,
                SWA_PAGE[case.ratio],
                SPEC_RING[case.ratio],
                True,
                use_req_ring=case.req_ring,
            )
            torch.cuda.synchronize()
            plan_w = torch.from_dlpack(plan_w).cpu().view(torch.int32).reshape(-1, 2)
            writes = [(rid, loc) for rid, loc in plan_w.tolist() if rid != -1]
            results.append(
                {
                    "state": state,
                    "case": vars(case),
                    "scenario": case.name.split("/")[0],
                    **handed,
                    "writes": writes,
                    **analyse(case, handed, writes, r2t, f2s),
                }
            )
    meta = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "sglang": next(iter((args.tree / "pristine").glob("sglang-*.dist-info")), Path("?")).name,
        "max_bs": args.max_bs,
        "capture_bs": capture_bs,
        "draft_tokens": DRAFT_TOKENS,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "cases": results}))
    print(summary(meta, results))
    return 0


def summary(meta: dict, results: list[dict]) -> str:
    """The run's table, one row per tree, scenario, ring and req_to_token state."""
    lines = [
        f"{meta['gpu']}, torch {meta['torch']}, {meta['sglang']}, max_bs {meta['max_bs']}",
        "",
        "| tree | scenario | ring | req_to_token past the row | cases | last request's extend, max (layout / compressor) | needed rows missing | ghost rows over live slots (own / other request) | ghost rows in the padding sink | cases with another request's slot overwritten |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        c = r["case"]
        ring = "c128" if c["ratio"] == 128 else ("c4 per-request" if c["req_ring"] else "c4 shared")
        groups.setdefault((r["state"], r["scenario"], ring, c["stale"]), []).append(r)
    for (state, scenario, ring, stale), rows in groups.items():
        n = len(rows[0]["case"]["widths"])
        layout = max(r["layout_extends"][n - 1] for r in rows)
        handed = max(r["extends"][n - 1] for r in rows)
        own = sum(r["ghost_writes"]["own"] for r in rows)
        other = sum(r["ghost_writes"]["other"] for r in rows)
        lines.append(
            f"| {state} | {scenario} | {ring} | {stale} | {len(rows)} | {layout} / {handed} | "
            f"{sum(r['missing_needed'] for r in rows)} | {own} / {other} | "
            f"{sum(r['ghost_writes']['padding'] for r in rows)} | "
            f"{sum(1 for r in rows if r['ghost_writes']['other'])} |"
        )
    return "\n".join(lines)


RECORD = HERE.parent / "docs/benchmarks/dsv4-full-rank-h200/full-rank-h200.json"
DOC = HERE.parent / "docs/benchmarks.md"
BEGIN = "<!-- full-rank-table: generated by `python -m tools.regen` from the record; edit that -->"
END = "<!-- /full-rank-table -->"


def doc_block(record: dict) -> str:
    """docs/benchmarks.md's counts and table for a run's JSON: the batches (distinct
    scenario and seed), the cases per tree, and summary()'s table."""
    cases = record["cases"]
    trees = sorted({c["state"] for c in cases})
    batches = len({c["case"]["name"] for c in cases})
    per_tree = {t: sum(1 for c in cases if c["state"] == t) for t in trees}
    if len(set(per_tree.values())) != 1:
        raise ValueError(f"{RECORD}: the trees ran different cases: {per_tree}")
    rows = summary(record["meta"], cases).splitlines()[2:]
    return "\n".join(
        [
            BEGIN,
            f"The record holds {batches} batches, {per_tree[trees[0]]} cases per tree "
            f"({len(cases)} in all; max_bs {record['meta']['max_bs']}, "
            f"{record['meta']['draft_tokens']} draft tokens).",
            "",
            *rows,
            END,
        ]
    )


def replace_doc_block(text: str, record: dict | None = None) -> str:
    """text with its full-rank block regenerated from the record."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC} has no {BEGIN!r} ... {END!r} block")
    record = record if record is not None else json.loads(RECORD.read_text())
    return text[:start] + doc_block(record) + text[end + len(END) :]


def case_list(seeds: int, max_bs: int) -> list[Case]:
    """Every case the run covers: each scenario on each ring and req_to_token state."""
    out = []
    for scenario, seed, seqs, widths in cases(seeds, max_bs):
        for ratio, req_ring in ((4, False), (4, True), (128, False)):
            for stale in ("fresh", "reused"):
                out.append(Case(f"{scenario}/{seed}", ratio, req_ring, stale, seqs, widths))
    return out


def chain_cpu(args) -> int:
    """Steps 1-2 on the CPU (sglang's torch implementations of the two kernels), for
    both trees and every case of the run: what the planner is handed, for the model
    test (tests/patch/test_full_rank_compact.py)."""
    import torch

    rv, by_state = load_chain(args.tree)
    capture_bs = capture_sizes(by_state["pristine"], args.max_bs)
    out = []
    if args.neighbour:
        print(json.dumps(neighbour_tiers(rv, by_state, args.max_bs, capture_bs)))
        return 0
    with torch.inference_mode():
        for state, fns in by_state.items():
            for case in case_list(args.seeds, args.max_bs):
                handed = chain(rv, fns, case, args.max_bs, capture_bs, dev="cpu")
                out.append({"state": state, "case": vars(case), **handed})
    print(json.dumps({"max_bs": args.max_bs, "capture_bs": capture_bs, "cases": out}))
    return 0


def neighbour_tiers(rv, by_state, max_bs: int, capture_bs: list[int]) -> dict:
    """Every tier of the runner's token buckets, as a DP neighbour can set it, on both
    paths: a full rank of width-1 requests, one request and 16 requests of width 1, in
    both trees; what the layout and the compressor give the last request."""
    import torch

    fns = by_state["pristine"]
    runner = types.SimpleNamespace(
        max_bs=max_bs, captured_req_width=DRAFT_TOKENS, capture_bs=capture_bs
    )
    buckets = fns["_build_ragged_verify_token_buckets"](runner)
    out = []
    with torch.inference_mode():
        for count in (max_bs, 16, 1):
            case = Case(
                f"n{count}", 4, False, "fresh", [3000 + 37 * i for i in range(count)], [1] * count
            )
            for tier in buckets:
                for path in ("graph", "eager"):
                    for state, state_fns in by_state.items():
                        try:
                            handed = chain(
                                rv, state_fns, case, max_bs, capture_bs, "cpu", tier, path
                            )
                        except ValueError:  # the tier cannot hold the batch
                            continue
                        out.append(
                            {
                                "state": state,
                                "path": path,
                                "requests": count,
                                "tier": tier,
                                "slots": handed["slots"],
                                "last_layout": handed["layout_extends"][count - 1],
                                "last_compressor": handed["extends"][count - 1],
                                "max_compressor": max(handed["extends"]),
                            }
                        )
    return {"buckets": buckets, "capture_bs": capture_bs, "max_bs": max_bs, "cases": out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="the pristine and patched trees, from a wheel")
    p.add_argument("wheel", type=Path)
    p.add_argument("out", type=Path)
    r = sub.add_parser("run", help="run the chain and the planner on the GPU")
    r.add_argument("--tree", type=Path, required=True)
    r.add_argument("--json", type=Path, required=True)
    r.add_argument("--build", type=Path, default=Path("/tmp/sm12x-full-rank-build"))
    r.add_argument("--seeds", type=int, default=8)
    r.add_argument("--max-bs", type=int, default=64)
    c = sub.add_parser("chain-cpu", help="steps 1-2 of every case on the CPU, as JSON")
    c.add_argument("--tree", type=Path, required=True)
    c.add_argument("--seeds", type=int, default=6)
    c.add_argument("--max-bs", type=int, default=64)
    c.add_argument(
        "--neighbour",
        action="store_true",
        help="every token bucket as a DP neighbour's tier, graph and eager paths",
    )
    args = parser.parse_args(argv)
    if hasattr(args, "tree"):
        args.tree = args.tree.resolve()  # the JIT build #includes the sources by path
    if args.command == "chain-cpu":
        return chain_cpu(args)
    if args.command == "prepare":
        prepare(args.wheel, args.out)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
