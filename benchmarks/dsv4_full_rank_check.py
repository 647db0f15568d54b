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
import gzip
import hashlib
import inspect
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
    "sglang/srt/debug_utils/cuda_coredump.py",  # 0.5.17's environ imports it last
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
}
# The decode graph sizes: a function of its own in 0.5.23, a ServerArgs method in
# 0.5.17 (the same body); the first that the tree holds is compiled as CAPTURE.
CAPTURE_SOURCES = (
    ("sglang/srt/arg_groups/cuda_graph_hook.py", "generate_decode_cuda_graph_batch_sizes"),
    ("sglang/srt/server_args.py", "_generate_decode_cuda_graph_batch_sizes"),
)
PLAN_SOURCES = "sglang/kernels/jit/"

# Geometry of the largest compact recipe (rtx-pro-6000-tp4-throughput: DSPARK depth 7,
# 8 draft tokens per request; --cuda-graph-max-bs-decode 64), the mixed-width
# scenarios' rank; every compact recipe's own (recipes.json, written by prepare) sets
# the tiers of the neighbour sweep. DeepSeek-V4's pools: the backend asserts
# page_size == 256 and the pool keeps the SWA page equal to it (256-token logical
# pages: deepseek_v4_memory_pool.py, linker_pool_assembler.py); the speculative rings
# are get_compress_state_ring_size(ratio, any draft tokens): 16 for c4, 256 for c128.
DRAFT_TOKENS = 8
SWA_PAGE = {4: 256, 128: 256}
SPEC_RING = {4: 16, 128: 256}
MAX_TOKENS = 8192
RECIPES = "recipes.json"


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
    keep = {*IMPORTED, *COMPILED, *(rel for rel, _ in CAPTURE_SOURCES), *series_targets(version)}
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
    (out / RECIPES).write_text(json.dumps(recipe_geometry(), indent=1) + "\n")
    print(f"prepared {out}/pristine and {out}/patched from {wheel.name}")


def recipe_geometry() -> dict[str, dict[str, int]]:
    """Each compact recipe's rank: its largest decode graph (the lint's
    largest_decode_graph: --cuda-graph-max-bs-decode clamped to the rank's requests)
    and its verify width (DSPARK depth + 1). Read here by the project's own recipe
    model, so the GPU machine needs none of it."""
    sys.path.insert(0, str(HERE.parent))
    from sm12x.recipe import load_recipe
    from sm12x.recipe.derived import largest_decode_graph

    out = {}
    for path in sorted((HERE.parent / "recipes").glob("*.yaml")):
        recipe = load_recipe(path, lint=False)
        if recipe.dspark is not None and recipe.dspark.ragged_verify == "compact":
            out[path.stem] = {
                "max_bs": largest_decode_graph(recipe),
                "draft": recipe.dspark.block_size + 1,
            }
    if not out:
        raise SystemExit("no compact recipe under recipes/: nothing sets the tiers")
    return out


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
            raise SystemExit(
                f"{rel}: no definition of {', '.join(missing)}: not sglang 0.5.17/0.5.23?"
            )
        body = [ast.ImportFrom("__future__", [ast.alias("annotations")], 0), *nodes.values()]
        code = compile(ast.fix_missing_locations(ast.Module(body, [])), str(tree / rel), "exec")
        exec(code, namespace)
        found.update({name: namespace[name] for name in names})
    for rel, name in CAPTURE_SOURCES:
        if (tree / rel).is_file():
            module = ast.parse((tree / rel).read_text(), filename=str(tree / rel))
            node = next(
                (n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name == name),
                None,
            )
            if node is None:
                raise SystemExit(f"{rel}: no definition of {name}")
            code = compile(
                ast.fix_missing_locations(ast.Module([node], [])), str(tree / rel), "exec"
            )
            exec(code, namespace)
            found["CAPTURE"] = namespace[name]
            break
    else:
        raise SystemExit(f"{tree}: none of {[rel for rel, _ in CAPTURE_SOURCES]}")
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
    """One batch on one ring and req_to_token state. path: "graph" (replay: the
    runner's min(tier, max_bs) slots) or "eager" (bs = len(seq_lens)); tier: the
    token bucket a DP neighbour or the SPS planner set (None: the batch's own floor);
    max_bs and draft: the recipe's rank."""

    name: str
    ratio: int
    req_ring: bool
    stale: str
    seq_lens: list[int]
    widths: list[int]
    path: str = "graph"
    tier: int | None = None
    recipe: str = "rtx-pro-6000-tp4-throughput"
    max_bs: int = 64
    draft: int = DRAFT_TOKENS


def chain(rv, fns, case: Case, dev: str = "cuda") -> dict:
    """Steps 1-2 of the module docstring: what the compress planner is handed. On
    "cpu" sglang's own torch implementations of the two kernels run instead of its
    Triton ones (the CPU model tests/patch/test_full_rank_compact.py checks).

    The runner's graph sizes and token buckets are the tree's own for the case's
    max_bs and draft width. case.tier: a bucket the SPS planner (tier_num_tokens) or a
    DP neighbour's larger batch set, any that holds the batch's rows; None: the
    batch's own floor, rounded up. case.path "eager": the verify replays no graph and
    the backend pads the layout to bs = len(seq_lens) (no padding slot)."""
    import torch

    draft, max_bs = case.draft, case.max_bs
    capture_bs = capture_sizes(fns, max_bs)
    runner = types.SimpleNamespace(max_bs=max_bs, captured_req_width=draft, capture_bs=capture_bs)
    runner.capture_num_tokens = fns["_build_ragged_verify_token_buckets"](runner)
    runner.ragged_verify_mode = True
    model_runner = types.SimpleNamespace(decode_cuda_graph_runner=runner)
    n = len(case.widths)
    floor = fns["verify_layout_graph_num_tokens_floor"](
        num_reqs=n,
        ragged_verify_mode=rv.RaggedVerifyMode.COMPACT,
        verify_num_draft_tokens=draft,
        model_runner=model_runner,
    )
    own = rv.round_up_grid(floor, fns["ragged_capture_num_tokens"](model_runner=model_runner))
    tier = own if case.tier is None else case.tier
    if case.tier is not None and (tier < sum(case.widths) or tier not in runner.capture_num_tokens):
        raise ValueError(f"tier {tier}: not a bucket holding the batch's rows")
    layout = rv.RaggedVerifyLayout.from_verify_lens_device(
        verify_lens=torch.tensor(case.widths, dtype=torch.int32, device=dev), graph_num_tokens=tier
    )
    slots = fns["_ragged_capture_slots"](runner, tier) if case.path == "graph" else n
    backend = types.SimpleNamespace(
        online_c128_mtp=types.SimpleNamespace(enabled=lambda: False),
        has_c128=True,
        needs_cpu_seq_lens=False,
        speculative_num_draft_tokens=draft,
        extend_seq_lens_buffer=torch.zeros(max(max_bs, n), dtype=torch.int32, device=dev),
        extend_start_loc_buffer=torch.zeros(max(max_bs, n), dtype=torch.int32, device=dev),
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
    # 0.5.23's graph_backed only steers the indexer (the compressor's plan is always
    # built for a graph-sized num_q); 0.5.17's method has no such argument.
    make = fns["make_forward_metadata_from_raw_verify"]
    extra = {"graph_backed": True} if "graph_backed" in inspect.signature(make).parameters else {}
    made = make(backend, raw, **extra)
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
    live_len = [s + case.draft for s in case.seq_lens]
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


def cases(seeds: int, max_bs: int, draft: int) -> list[tuple[str, int, list[int], list[int]]]:
    """(scenario, seed, seq_lens, widths): a full rank (max_bs requests), one request
    short of it, a light batch, each with widths 1..draft drawn per request; every
    request at full width (no leftover) as a control; and a full rank whose last
    request verifies 3 rows after requests one row short of full width: the tier
    (max_bs x draft) leaves it max_bs + draft - 1 rows, well past the draft width (71
    at max_bs 64, draft 8)."""
    out = []
    for scenario, count in (("full", max_bs), ("full-minus-one", max_bs - 1), ("light", 16)):
        for seed in range(seeds):
            rng = random.Random(1000 * count + seed)
            seqs = [rng.randrange(2 * 256, MAX_TOKENS - 1024) for _ in range(count)]
            widths = [rng.randint(1, draft) for _ in range(count)]
            out.append((scenario, seed, seqs, widths))
    rng = random.Random(7)
    out.append(
        ("full-uniform", 0, [rng.randrange(512, 7000) for _ in range(max_bs)], [draft] * max_bs)
    )
    out.append(
        (
            "full-last-width-3",
            0,
            [3000 + 37 * i for i in range(max_bs)],
            [draft - 1] * (max_bs - 1) + [3],
        )
    )
    return out


def capture_sizes(fns, max_bs: int) -> list[int]:
    """The decode graph sizes sglang resolves for a DSPARK recipe with this cap."""
    resolved = types.SimpleNamespace(
        disable_cuda_graph_padding=False, speculative_algorithm="DSPARK"
    )
    return fns["CAPTURE"](resolved, max_bs)


def buckets(fns, max_bs: int, draft: int) -> list[int]:
    """The runner's token buckets (its verify tiers) for a recipe's rank."""
    runner = types.SimpleNamespace(
        max_bs=max_bs, captured_req_width=draft, capture_bs=capture_sizes(fns, max_bs)
    )
    return list(fns["_build_ragged_verify_token_buckets"](runner))


def rings(tree: Path) -> list[tuple[int, bool]]:
    """The rings a tree's planner has: c4 on shared SWA pages, c4 per request (0.5.23's
    plan only), c128."""
    sys.path.insert(0, str(HERE))
    import dsv4_kernel_check as kc

    per_request = kc.has_req_ring(tree)
    return [(4, False), *([(4, True)] if per_request else []), (128, False)]


def case_list(fns, seeds: int, recipes: dict, ring_list: list[tuple[int, bool]]) -> list[Case]:
    """Every case the run covers, on both paths (graph replay and eager).

    The mixed-width scenarios (cases()) on the largest compact recipe's rank, on every
    ring and both req_to_token states. Then, for every compact recipe, its own tiers:
    a full rank and one request, all of width 1, on every token bucket that holds the
    batch (the tree's _build_ragged_verify_token_buckets over its decode graph sizes:
    any of them the SPS planner or a DP neighbour's larger batch can set), on every
    ring with reused rows (the state in which ghost rows can land on another
    request's slots)."""
    out = []
    ref_name, ref = max(recipes.items(), key=lambda kv: (kv[1]["max_bs"] * kv[1]["draft"], kv[0]))
    geometry = {"recipe": ref_name, "max_bs": ref["max_bs"], "draft": ref["draft"]}
    for path in ("graph", "eager"):
        for scenario, seed, seqs, widths in cases(seeds, ref["max_bs"], ref["draft"]):
            for ratio, req_ring in ring_list:
                for stale in ("fresh", "reused"):
                    out.append(
                        Case(
                            f"{scenario}/{seed}",
                            ratio,
                            req_ring,
                            stale,
                            seqs,
                            widths,
                            path,
                            **geometry,
                        )
                    )
    for name, g in sorted(recipes.items()):
        for count in (g["max_bs"], 1):
            seqs = [3000 + 37 * i for i in range(count)]
            for tier in buckets(fns, g["max_bs"], g["draft"]):
                if tier < count:
                    continue
                for path in ("graph", "eager"):
                    for ratio, req_ring in ring_list:
                        out.append(
                            Case(
                                f"tiers-{name}/n{count}-t{tier}",
                                ratio,
                                req_ring,
                                "reused",
                                seqs,
                                [1] * count,
                                path,
                                tier,
                                name,
                                g["max_bs"],
                                g["draft"],
                            )
                        )
    return out


def load_recipes(trees: Path) -> dict:
    path = trees / RECIPES
    if not path.is_file():
        raise SystemExit(f"{path}: missing; run `prepare` again (it writes the recipes' ranks)")
    return json.loads(path.read_text())


def writes_digest(writes: list) -> str:
    """The write plan, sorted, as a SHA-256: the record keeps this, not the plan."""
    text = json.dumps(sorted([int(r), int(loc)] for r, loc in writes))
    return hashlib.sha256(text.encode()).hexdigest()


def run(args) -> int:
    import torch

    sys.path.insert(0, str(HERE))
    import dsv4_kernel_check as kc

    rv, by_state = load_chain(args.tree)
    recipes = load_recipes(args.tree)
    version = tree_version(args.tree / "pristine")
    results = []
    for state, fns in by_state.items():
        tree = args.tree / state
        # One build per distinct c_plan.cuh (0.5.17's series patches it; 0.5.23's not).
        source = kc.kernel_root(tree) / "csrc/deepseek_v4/c_plan.cuh"
        digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
        planner = kc.plan_module(tree, args.build / digest)
        for case in case_list(fns, args.seeds, recipes, rings(tree)):
            handed = chain(rv, fns, case)
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
            analysis = analyse(case, handed, writes, r2t, f2s)
            results.append(
                {
                    "state": state,
                    "case": vars(case),
                    "scenario": case.name.split("/")[0],
                    **{k: v for k, v in handed.items() if k not in ("rows", "seqs")},
                    "writes": len(writes),
                    "writes_sha256": writes_digest(writes),
                    **analysis,
                }
            )
    meta = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "sglang": version,
        "recipes": recipes,
        "draft_tokens": DRAFT_TOKENS,
        "swa_page": SWA_PAGE,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_record(args.json, {"meta": meta, "cases": results})
    print(summary(meta, results))
    return 0


def tree_version(tree: Path) -> str:
    found = sorted(tree.glob("sglang-*.dist-info"))
    if not found:
        raise SystemExit(f"{tree}: no sglang-*.dist-info; run `prepare` again")
    return found[0].name.split("-")[1].removesuffix(".dist")


def write_record(path: Path, record: dict) -> None:
    text = json.dumps(record, separators=(",", ":"))
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)


def read_record(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


def ring_name(case: dict) -> str:
    if case["ratio"] == 128:
        return "c128"
    return "c4 per-request" if case["req_ring"] else "c4 shared"


def summary(meta: dict, results: list[dict]) -> str:
    """The run's table: one row per tree, scenario and path, over its rings and
    req_to_token states (the JSON has every case)."""
    lines = [
        f"{meta['gpu']}, torch {meta['torch']}, sglang {meta['sglang']}",
        "",
        "| tree | scenario | path | cases | last request's extend, max (layout / compressor) | needed rows missing | ghost rows over live slots (own / other request) | ghost rows in the padding sink | cases with another request's slot overwritten |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["state"], r["scenario"], r["case"]["path"]), []).append(r)
    for (state, scenario, path), rows in groups.items():
        layout = max(r["layout_extends"][len(r["case"]["widths"]) - 1] for r in rows)
        handed = max(r["extends"][len(r["case"]["widths"]) - 1] for r in rows)
        own = sum(r["ghost_writes"]["own"] for r in rows)
        other = sum(r["ghost_writes"]["other"] for r in rows)
        lines.append(
            f"| {state} | {scenario} | {path} | {len(rows)} | {layout} / {handed} | "
            f"{sum(r['missing_needed'] for r in rows)} | {own} / {other} | "
            f"{sum(r['ghost_writes']['padding'] for r in rows)} | "
            f"{sum(1 for r in rows if r['ghost_writes']['other'])} |"
        )
    return "\n".join(lines)


RECORD_DIR = HERE.parent / "docs/benchmarks/dsv4-full-rank-h200"
RECORDS = {v: RECORD_DIR / f"full-rank-{v}.json.gz" for v in ("0.5.17", "0.5.23")}
DOC = HERE.parent / "docs/benchmarks.md"
BEGIN = "<!-- full-rank-table: generated by `python -m tools.regen` from the record; edit that -->"
END = "<!-- /full-rank-table -->"


def doc_block(records: dict[str, dict]) -> str:
    """docs/benchmarks.md's counts and tables for each track's run: the batches
    (distinct scenario, seed and tier), the cases per tree and path, and summary()'s
    table."""
    out = [BEGIN]
    for version, record in sorted(records.items()):
        cases = record["cases"]
        meta = record["meta"]
        trees = sorted({c["state"] for c in cases})
        per_tree = {t: sum(1 for c in cases if c["state"] == t) for t in trees}
        if len(set(per_tree.values())) != 1:
            raise ValueError(f"{RECORDS[version]}: the trees ran different cases: {per_tree}")
        mixed = {c["case"]["name"] for c in cases if not c["scenario"].startswith("tiers-")}
        tiers = {c["case"]["name"] for c in cases if c["scenario"].startswith("tiers-")}
        paths = sorted({c["case"]["path"] for c in cases})
        ranks = ", ".join(
            f"{name} {g['max_bs']} x {g['draft']}" for name, g in sorted(meta["recipes"].items())
        )
        out += [
            "",
            f"sglang {version} ({meta['gpu']}): {len(mixed)} mixed-width batches and "
            f"{len(tiers)} tier batches, {per_tree[trees[0]]} cases per tree on the "
            f"{' and '.join(paths)} paths ({len(cases)} in all). Ranks (largest decode "
            f"graph x verify width): {ranks}.",
            "",
            *summary(meta, cases).splitlines()[2:],
        ]
    return "\n".join([*out, END])


def replace_doc_block(text: str, records: dict[str, dict] | None = None) -> str:
    """text with its full-rank block regenerated from the records."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC} has no {BEGIN!r} ... {END!r} block")
    if records is None:
        records = {v: read_record(p) for v, p in RECORDS.items()}
    return text[:start] + doc_block(records) + text[end + len(END) :]


def chain_cpu(args) -> int:
    """Steps 1-2 on the CPU (sglang's torch implementations of the two kernels), for
    both trees and every case of the run: what the planner is handed, for the model
    test (tests/patch/test_full_rank_compact.py)."""
    import torch

    rv, by_state = load_chain(args.tree)
    recipes = load_recipes(args.tree)
    out = []
    with torch.inference_mode():
        for state, fns in by_state.items():
            for case in case_list(fns, args.seeds, recipes, rings(args.tree / state)):
                handed = chain(rv, fns, case, dev="cpu")
                out.append({"state": state, "case": vars(case), **handed})
    capture = {
        name: capture_sizes(by_state["pristine"], g["max_bs"]) for name, g in recipes.items()
    }
    tiers = {
        name: buckets(by_state["pristine"], g["max_bs"], g["draft"]) for name, g in recipes.items()
    }
    print(
        json.dumps(
            {
                "sglang": tree_version(args.tree / "pristine"),
                "recipes": recipes,
                "capture_bs": capture,
                "buckets": tiers,
                "cases": out,
            }
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="the pristine and patched trees, from a wheel")
    p.add_argument("wheel", type=Path)
    p.add_argument("out", type=Path)
    r = sub.add_parser("run", help="run the chain and the planner on the GPU")
    r.add_argument("--tree", type=Path, required=True)
    r.add_argument("--json", type=Path, required=True, help="the record (.json or .json.gz)")
    r.add_argument("--build", type=Path, default=Path("/tmp/sm12x-full-rank-build"))
    r.add_argument("--seeds", type=int, default=6)
    c = sub.add_parser("chain-cpu", help="steps 1-2 of every case on the CPU, as JSON")
    c.add_argument("--tree", type=Path, required=True)
    c.add_argument("--seeds", type=int, default=6)
    args = parser.parse_args(argv)
    if hasattr(args, "tree"):
        args.tree = args.tree.resolve()  # the JIT build #includes the sources by path
        if not (args.tree / "pristine").is_dir():
            raise SystemExit(f"{args.tree}: no pristine/ tree; run `prepare WHEEL {args.tree}`")
    if args.command == "chain-cpu":
        return chain_cpu(args)
    if args.command == "prepare":
        prepare(args.wheel, args.out)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
