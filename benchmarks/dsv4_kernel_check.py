"""DeepSeek-V4 compress-plan and KV-store kernels of a sglang tree, run on a CUDA GPU.

What patches 0020-0022 change, checked on the kernels themselves (docs/benchmarks.md
has the figures and the commands; benchmarks/dsv4_kernel_check.sh runs it all):

- `plan`: sglang's `plan_compress_prefill` (c_plan.cuh) for speculative verify
  batches of 4..8 rows per request, through the GPU planner (kernel0 + kernel_1,
  what sglang uses under CUDA graphs) and the host loop (CPU lengths). For every
  row it reads the write plan back and asks: is the row in the state ring, at the
  slot sglang's own slot formula gives? A row is *needed* when some acceptance
  outcome keeps it and the next compression reads it back (every row for c4; all
  but a 128-block's last row for c128). It also compares the two planners' plans
  row by row (ragged batches too) and hashes every plan, so a report across trees
  can show the patch leaves non-speculative plans alone.
- `race`: one GPU-planner launch on a uniform and on a ragged batch, to run
  under `compute-sanitizer --tool racecheck`.
- `store`: the fused FlashMLA and indexer KV-store kernels (store.cuh) with an
  index of -1 among valid ones, as the full -> SWA lookup yields for a token
  without an SWA page. The cache sits right after a guard region of the same
  allocation: a write before the cache base shows up as changed guard bytes.
  `--standalone` gives the cache an allocation of its own instead, for
  `compute-sanitizer --tool memcheck`.
- `c2`: DeepSeek-V4.1's ratio-2 compressor (c2.cuh, sglang 0.5.23's
  `c2_decode_norm_rope_store` in its target-verify mode), the only compress state
  V4.1's layers keep (they compress at ratios 2 and 1; ratio 1 keeps none). For
  static verifies of 2..11 rows per request (DSPARK depth 1..10) at the pair ring
  sglang sizes for them, it reads back where every even row parked and what every
  odd row pooled (against a torch reference of the pair pooling and RMSNorm), and
  asks, for every acceptance, whether the next step's first row finds its partner.
  Then compact batches, as sglang 0.5.23 lays them out for V4.1: rows packed by
  verify_lens, `req` from token_req_indices (each request repeated draft_len
  times): which ring each row parked in against the request it belongs to, and
  whether the kernel and torch.repeat_interleave refuse the shapes.
- `report`: Markdown tables from the JSON files of several trees.

The kernels are compiled from the tree's own sources the way sglang's
`load_jit` does (the same `#include` + TVM_FFI_DLL_EXPORT_TYPED_FUNC wrapper,
include path and flags, via tvm-ffi's `load_inline`), without importing sglang:
its package imports the whole serving stack, which the kernels do not use.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
from pathlib import Path

import torch

# DeepSeek-V4's SWA page is its window, 128 (pool_configurator: window_size). The
# planner requires swa_page_size % ring_size == 0, which the speculative c128 ring
# (256) does not meet at 128; c128's slots are request-scoped and never read the SWA
# page, so c128 runs with a 256-token page here.
SWA_PAGE = {4: 128, 128: 256}
SPEC_RING = {4: 16, 128: 256}  # get_compress_state_ring_size(ratio, is_speculative=True)
PLAIN_RING = {4: 8, 128: 128}  # ... and without speculative decoding
VERIFY_ROWS = range(4, 9)  # DSPARK depth 3..7 verifies depth + 1 rows
MAX_TOKENS = 8192  # req_to_token row length (a multiple of every SWA page)


# --- building the kernels the way sglang's load_jit does ----------------------------


def kernel_root(tree: Path) -> Path:
    """sglang 0.5.17 keeps JIT sources under sglang/kernels/jit, 0.5.16 under jit_kernel."""
    for rel in ("sglang/kernels/jit", "sglang/jit_kernel"):
        if (tree / rel / "csrc" / "deepseek_v4" / "c_plan.cuh").is_file():
            return tree / rel
    sys.exit(f"{tree}: no sglang JIT sources (csrc/deepseek_v4/c_plan.cuh) found")


def sglang_version(tree: Path) -> str:
    infos = sorted(tree.glob("sglang-*.dist-info"))
    return infos[0].name.removeprefix("sglang-").removesuffix(".dist-info") if infos else "?"


def namespaced(tree: Path) -> bool:
    """sglang 0.5.23 puts its JIT kernels in `namespace sglang` and its loader wraps the
    exports in the same namespace (kernels/jit/utils/compile/spec.py)."""
    plan = kernel_root(tree) / "csrc" / "deepseek_v4" / "c_plan.cuh"
    return "namespace sglang {" in plan.read_text()


def has_req_ring(tree: Path) -> bool:
    """sglang 0.5.23's plan takes `use_req_ring` (c4 with a unified KV pool keeps a
    per-request ring, compressor_v2.py)."""
    plan = kernel_root(tree) / "csrc" / "deepseek_v4" / "c_plan.cuh"
    return "use_req_ring" in plan.read_text()


def load_kernel(
    tree: Path, name: str, source: str, wrappers: list[tuple[str, str]], build_root: Path
):
    """Compile (once per tree and build root) and load one JIT module."""
    from tvm_ffi import load_module
    from tvm_ffi.cpp import load_inline

    root = kernel_root(tree)
    major, minor = torch.cuda.get_device_capability()
    suffix = "a" if major >= 9 else ""
    build = build_root / f"{name}-{major}{minor}"
    built = build / f"{name}.so"
    if built.is_file():
        return load_module(str(built))
    os.environ["TVM_FFI_CUDA_ARCH_LIST"] = f"{major}.{minor}{suffix}"
    sources = [f'#include "{root / "csrc" / source}"']
    exports = [
        f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({export}, ({kernel}));" for export, kernel in wrappers
    ]
    if namespaced(tree):
        sources = [
            "#include <tvm/ffi/function.h>",
            *sources,
            "namespace sglang {",
            *exports,
            "}  // namespace sglang",
        ]
    else:
        sources += exports
    return load_inline(
        name,
        cpp_sources=[],
        cuda_sources=sources,
        extra_cflags=["-std=c++20", "-O3"],
        extra_cuda_cflags=[
            f"-DSGL_CUDA_ARCH={major * 100 + minor * 10}",
            "-std=c++20",
            "-O3",
            "--expt-relaxed-constexpr",
        ],
        extra_include_paths=[str(root / "include")],
        build_directory=str(build),
    )


class Planner:
    """The compiled plan_compress_prefill of one tree, called with the arguments its
    own signature takes (0.5.23 adds use_req_ring before use_cuda_graph)."""

    def __init__(self, module, req_ring_param: bool):
        self.module, self.req_ring_param = module, req_ring_param

    def plan_prefill(self, *args, use_req_ring: bool = False):
        *head, use_cuda_graph = args
        if self.req_ring_param:
            return self.module.plan_prefill(*head, use_req_ring, use_cuda_graph)
        assert not use_req_ring, "this sglang's plan has no per-request ring"
        return self.module.plan_prefill(*head, use_cuda_graph)


def plan_module(tree: Path, build_root: Path) -> Planner:
    module = load_kernel(
        tree,
        "compress_plan",
        "deepseek_v4/c_plan.cuh",
        [("plan_prefill", "plan_compress_prefill")],
        build_root,
    )
    return Planner(module, has_req_ring(tree))


def store_module(tree: Path, build_root: Path, kind: str, page_size: int):
    cls = "FlashMLA" if kind == "flashmla" else "Indexer"
    # make_cpp_args(bf16, int64, page_size, is_arch_support_pdl()): PDL on sm_90+
    pdl = "true" if torch.cuda.get_device_capability()[0] >= 9 else "false"
    # 0.5.23's FlashMLA store takes the KV layout too; DeepSeek-V4's is KVLayout::V4
    # (attn.py's _jit_fused_store_module), whose page bytes are the older formula.
    layout = "deepseek_v4::KVLayout::V4, " if kind == "flashmla" and namespaced(tree) else ""
    return load_kernel(
        tree,
        f"store_{kind}_{page_size}",
        "deepseek_v4/store.cuh",
        [("run", f"FusedStoreCache{cls}Kernel<bf16_t, int64_t, {page_size}, {layout}{pdl}>::run")],
        build_root,
    )


# --- the plan -------------------------------------------------------------------------


class Batch:
    """A batch of requests: request i owns req_pool row i and a private SWA range."""

    def __init__(self, seq_lens: list[int], extend_lens: list[int]):
        assert all(0 < e <= s < MAX_TOKENS for s, e in zip(seq_lens, extend_lens))
        self.seq_lens, self.extend_lens = seq_lens, extend_lens
        self.starts = [0]
        for e in extend_lens:
            self.starts.append(self.starts[-1] + e)
        self.num_q = self.starts[-1]

    def rows(self):
        """(ragged_id, request, row index j, position) of every extend row."""
        for i, (s, e) in enumerate(zip(self.seq_lens, self.extend_lens)):
            for j in range(e):
                yield self.starts[i] + j, i, j, s - e + j


_TABLES: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def tables(reqs: int):
    """req_to_token and full -> SWA on the GPU, page-aligned as sglang's allocators keep
    them: request i's token at position p has full loc i * MAX_TOKENS + p + 1 (0 is
    the padding sink) and SWA loc i * MAX_TOKENS + p."""
    if reqs not in _TABLES:
        pos = torch.arange(MAX_TOKENS, dtype=torch.int64)
        full = torch.arange(reqs, dtype=torch.int64)[:, None] * MAX_TOKENS + pos + 1
        swa = torch.arange(reqs * MAX_TOKENS + 1, dtype=torch.int64) - 1
        swa[0] = 0
        _TABLES[reqs] = (full.to(torch.int32).cuda(), swa.cuda())
    return _TABLES[reqs]


def expected_slot(
    ratio: int, ring: int, request: int, position: int, req_ring: bool = False
) -> int:
    """sglang's own slot formulas (c_plan.cuh compute_loc / compute_c128_loc, 0.5.23's
    compute_req_ring_loc)."""
    if ratio == 128 or req_ring:
        return request * ring + position % ring
    swa_loc = request * MAX_TOKENS + position
    return (swa_loc // SWA_PAGE[4]) * ring + swa_loc % ring


def needed(ratio: int, position: int) -> bool:
    """Some acceptance keeps the row and the next compression reads it from the ring.

    Kept with L tokens in all (L > position), the next compression reads back to
    last boundary(L) - ratio for the overlapping c4, to boundary(L) for c128; the
    least L (= position + 1) reads furthest back.
    """
    boundary = (position + 1) // ratio * ratio
    return position >= boundary - (ratio if ratio == 4 else 0)


def run_plan(module, batch: Batch, ratio: int, ring: int, on_gpu: bool, req_ring: bool = False):
    """The plan as two lists of tuples (compress rows, write rows), invalid ones dropped."""
    dev = "cuda"
    r2t, f2s = tables(len(batch.seq_lens))
    rids = torch.arange(len(batch.seq_lens), dtype=torch.int64, device=dev)
    seq = torch.tensor(batch.seq_lens, dtype=torch.int64)
    ext = torch.tensor(batch.extend_lens, dtype=torch.int64)
    if on_gpu:
        seq, ext = seq.to(dev), ext.to(dev)
        pin = torch.empty(0, dtype=torch.uint8)
    else:
        pin = torch.empty(batch.num_q * 24, dtype=torch.uint8, pin_memory=True)
    plan_c, plan_w = module.plan_prefill(
        rids,
        r2t,
        f2s,
        seq,
        ext,
        pin,
        batch.num_q,
        ratio,
        SWA_PAGE[ratio],
        ring,
        False,
        use_req_ring=req_ring,
    )
    plan_c = torch.from_dlpack(plan_c).cpu().view(torch.int32).reshape(-1, 4)
    plan_w = torch.from_dlpack(plan_w).cpu().view(torch.int32).reshape(-1, 2)
    torch.cuda.synchronize()
    compress = []
    for seq_len, packed, page0, page1 in plan_c.tolist():
        if seq_len == -1:
            continue
        compress.append((seq_len, packed & 0xFFFF, (packed >> 16) & 0xFFFF, page0, page1))
    writes = [(rid, loc) for rid, loc in plan_w.tolist() if rid != -1]
    return sorted(compress), sorted(writes)


def digest(plan) -> str:
    return hashlib.sha256(json.dumps(plan).encode()).hexdigest()[:16]


def coverage(batch: Batch, writes, ratio: int, ring: int, req_ring: bool = False) -> dict:
    """Which verify rows the write plan puts in the ring, by row index."""
    rows = max(batch.extend_lens)
    written = dict(writes)
    planned = [0] * rows
    missing = [0] * rows
    wrong_slot = 0
    need_total = 0
    for rid, req, j, position in batch.rows():
        if rid in written:
            planned[j] += 1
            wrong_slot += written[rid] != expected_slot(ratio, ring, req, position, req_ring)
        if needed(ratio, position):
            need_total += 1
            missing[j] += rid not in written
    return {
        "planned_by_row": planned,
        "missing_needed_by_row": missing,
        "needed": need_total,
        "missing_needed": sum(missing),
        "wrong_slot": wrong_slot,
        "rows_total": batch.num_q,
        "rows_planned": sum(planned),
    }


def verify_batch(ratio: int, rows: int) -> Batch:
    """Every alignment to the ratio and to the SWA page, twice over (256 requests)."""
    base = 4 * SWA_PAGE[4] if ratio == 4 else 16 * 128
    seq = [base + k for k in range(256)]
    return Batch(seq, [rows] * len(seq))


def ragged_batch(seed: int, lo: int, hi: int, count: int = 100) -> Batch:
    rnd = random.Random(seed)
    seq = [rnd.randrange(2 * 128 * 8, MAX_TOKENS - 1) for _ in range(count)]
    ext = [rnd.randint(lo, min(hi, s)) for s in seq]
    return Batch(seq, ext)


def check_plan(module) -> dict:
    out: dict = {"coverage": [], "agreement": [], "plans": {}}
    for ratio in (4, 128):
        ring = SPEC_RING[ratio]
        for rows in VERIFY_ROWS:
            batch = verify_batch(ratio, rows)
            gpu = run_plan(module, batch, ratio, ring, on_gpu=True)
            host = run_plan(module, batch, ratio, ring, on_gpu=False)
            for path, plan in (("gpu", gpu), ("host", host)):
                out["coverage"].append(
                    {
                        "ratio": ratio,
                        "ring": ring,
                        "rows": rows,
                        "path": path,
                        "requests": len(batch.seq_lens),
                        **coverage(batch, plan[1], ratio, ring),
                    }
                )
            out["agreement"].append(agreement(f"verify-{rows}", ratio, ring, host, gpu))
            out["plans"][f"verify-{rows}-r{ratio}-ring{ring}"] = digest(gpu)
        # Ragged verify (per-request widths 4..8: the GPU planner's general path),
        # and prefill-like extends with and without speculative rings.
        cases = [
            ("ragged-verify", SPEC_RING[ratio], 4, 8),
            ("prefill-spec-ring", SPEC_RING[ratio], 1, 400),
            ("prefill-plain-ring", PLAIN_RING[ratio], 1, 400),
            ("verify-plain-ring", PLAIN_RING[ratio], 4, 4),
        ]
        for name, ring, lo, hi in cases:
            batch = ragged_batch(ratio * 1000 + len(name), lo, hi)
            gpu = run_plan(module, batch, ratio, ring, on_gpu=True)
            host = run_plan(module, batch, ratio, ring, on_gpu=False)
            out["agreement"].append(agreement(name, ratio, ring, host, gpu))
            out["plans"][f"{name}-r{ratio}-ring{ring}-host"] = digest(host)
            out["plans"][f"{name}-r{ratio}-ring{ring}-gpu"] = digest(gpu)
            if name == "ragged-verify":
                out["coverage"].append(
                    {
                        "ratio": ratio,
                        "ring": ring,
                        "rows": "4..8",
                        "path": "gpu (ragged)",
                        "requests": len(batch.seq_lens),
                        **coverage(batch, gpu[1], ratio, ring),
                    }
                )
    out["compact"] = check_compact(module)
    return out


# DSPARK's ragged verify (SGLANG_RAGGED_VERIFY_MODE=compact / cap-accept) gives each
# request of a batch its own verify width, from the planner's min_verify_len (>= 1) to
# depth + 1 (dspark_planner.py: verify_lens per request; an idle slot verifies 1 row).
# Widths 1..8 are depth 7 (the throughput recipes); 1..10 the widest any plan keeps on
# the 16-slot c4 ring; 1..11 one past it, where rows must go missing.
COMPACT_WIDTHS = [(1, 8), (1, 10), (1, 11)]


def check_compact(module: Planner) -> list[dict]:
    """Ragged verify batches of mixed per-request widths through the GPU planner (the
    one CUDA-graph verify uses), with the whole write plan kept so a CPU model of the
    write rule can be checked against it entry by entry."""
    results = []
    for ratio in (4, 128):
        rings = [False, True] if ratio == 4 and module.req_ring_param else [False]
        for req_ring in rings:
            ring = SPEC_RING[ratio]
            for lo, hi in COMPACT_WIDTHS:
                batch = ragged_batch(ratio * 7919 + hi, lo, hi, count=128)
                compress, writes = run_plan(
                    module, batch, ratio, ring, on_gpu=True, req_ring=req_ring
                )
                host = run_plan(module, batch, ratio, ring, on_gpu=False, req_ring=req_ring)
                results.append(
                    {
                        "ratio": ratio,
                        "ring": ring,
                        "req_ring": req_ring,
                        "rows": f"{lo}..{hi}",
                        "path": "gpu (compact)",
                        "requests": len(batch.seq_lens),
                        **coverage(batch, writes, ratio, ring, req_ring),
                        "host_writes_equal": host[1] == writes,
                        "seq_lens": batch.seq_lens,
                        "extend_lens": batch.extend_lens,
                        "writes": writes,
                    }
                )
    return results


def agreement(case: str, ratio: int, ring: int, host, gpu) -> dict:
    return {
        "case": case,
        "ratio": ratio,
        "ring": ring,
        "compress_equal": host[0] == gpu[0],
        "write_equal": host[1] == gpu[1],
        "host_writes": len(host[1]),
        "gpu_writes": len(gpu[1]),
        "host_compress": len(host[0]),
        "gpu_compress": len(gpu[0]),
    }


def race_batches() -> list[Batch]:
    """A uniform verify batch and a ragged one, over many warps (kernel0's reduction)."""
    uniform = Batch([4096 + k for k in range(1000)], [5] * 1000)
    ext = [5] * 1000
    ext[700] = 3  # one short request in warp 21: only its warp's min sees it
    ragged = Batch([4096 + k for k in range(1000)], ext)
    return [uniform, ragged]


def check_race(module, launches: int) -> dict:
    """GPU planner vs host loop on the ragged batch, many times: a lost warp result
    would pass the batch for uniform and plan a different (overrunning) layout."""
    uniform, ragged = race_batches()
    run_plan(module, uniform, 4, SPEC_RING[4], on_gpu=True)
    host = run_plan(module, ragged, 4, SPEC_RING[4], on_gpu=False)
    mismatches = 0
    for _ in range(launches):
        mismatches += run_plan(module, ragged, 4, SPEC_RING[4], on_gpu=True) != host
    return {"launches": launches, "mismatches": mismatches}


# --- the KV-store kernels --------------------------------------------------------------


def store_page_bytes(kind: str, page_size: int) -> int:
    if kind == "flashmla":
        return -(-584 * page_size // 576) * 576
    return 132 * page_size


STORE_KERNELS = {"flashmla": (256, 512), "indexer": (64, 128)}  # page size, row width


def check_store(tree: Path, build_root: Path, standalone: bool, kinds: list[str]) -> list[dict]:
    results = []
    for kind in kinds:
        page_size, dim = STORE_KERNELS[kind]
        module = store_module(tree, build_root, kind, page_size)
        page_bytes = store_page_bytes(kind, page_size)
        pages, guard_pages = 8, 2
        tokens = 64
        gen = torch.Generator(device="cuda").manual_seed(7)
        values = torch.randn(tokens, dim, generator=gen, device="cuda").to(torch.bfloat16)
        # sglang's full -> SWA lookup ends with -1 ("no page"); full loc -1 maps to it.
        lookup = torch.cat(
            [torch.arange(pages * page_size, device="cuda"), torch.tensor([-1], device="cuda")]
        )
        full_locs = torch.arange(tokens, device="cuda") * 5 % (pages * page_size)
        invalid = torch.tensor([3, 17, 40, 63], device="cuda")
        full_locs[invalid] = -1
        index = lookup[full_locs].to(torch.int64)
        if standalone:
            cache = torch.full((pages, page_bytes), 0xA5, dtype=torch.uint8, device="cuda")
            guard = None
        else:
            arena = torch.full(
                (guard_pages + pages, page_bytes), 0xA5, dtype=torch.uint8, device="cuda"
            )
            guard, cache = arena[:guard_pages], arena[guard_pages:]
        module.run(values, cache, index)
        torch.cuda.synchronize()
        entry = {
            "kernel": kind,
            "page_size": page_size,
            "tokens": tokens,
            "invalid_rows": int(invalid.numel()),
            "index_of_invalid": -1,
            "cache_digest": hashlib.sha256(cache.cpu().numpy().tobytes()).hexdigest()[:16],
        }
        if guard is not None:
            changed = (guard != 0xA5).sum().item()
            entry["guard_bytes_changed"] = int(changed)
        results.append(entry)
    return results


# --- DeepSeek-V4.1's ratio-2 pair ring ------------------------------------------------

C2_HEAD, C2_ROPE = 512, 64  # FlashCompress2Kernel's static_assert: the FlashMLA layouts
C2_PAGE = 128  # the c2 pool's page: a 256-token FULL page / ratio 2 (a power of two)
C2_ROWS = range(2, 12)  # DSPARK depth 1..10 verifies depth + 1 rows
C2_EPS = 1e-20  # V4.1's rms_norm_eps


def c2_ring(num_draft_tokens: int) -> int:
    """sglang 0.5.23's get_compress_state_ring_size(2, num_draft_tokens)."""
    return 2 if num_draft_tokens <= 0 else 1 << (num_draft_tokens + 1).bit_length()


def has_c2(tree: Path) -> bool:
    return (kernel_root(tree) / "csrc" / "deepseek_v4" / "c2.cuh").is_file()


def c2_module(tree: Path, build_root: Path):
    pdl = "true" if torch.cuda.get_device_capability()[0] >= 9 else "false"
    kernel = (
        f"FlashCompress2Kernel<{C2_HEAD}, {C2_ROPE}, {C2_PAGE}, "
        f"deepseek_v4::KVLayout::V4, {pdl}>::run_decode_fusion"
    )
    return load_kernel(
        tree, f"c2_{C2_PAGE}", "deepseek_v4/c2.cuh", [("decode_fusion", kernel)], build_root
    )


def c2_page_bytes() -> int:
    return -(-584 * C2_PAGE // 576) * 576  # KVLayout::V4's kv_page_bytes


def c2_reference(kv_old, kv_new, weight) -> torch.Tensor:
    """compressor.pool_pairs then finish (dsv41_sparse.py), in torch: softmax over the
    pair's scores, the bf16 round, RMSNorm with fp32 statistics."""
    kv = torch.stack([kv_old[:, :C2_HEAD], kv_new[:, :C2_HEAD]], dim=1)
    score = torch.stack([kv_old[:, C2_HEAD:], kv_new[:, C2_HEAD:]], dim=1)
    pooled = (kv * score.softmax(dim=1)).sum(dim=1).to(torch.bfloat16).float()
    normed = pooled * torch.rsqrt(pooled.square().mean(-1, keepdim=True) + C2_EPS)
    return (weight.float() * normed).to(torch.bfloat16)


def run_c2(
    module,
    draft_len: int,
    ring: int,
    firsts: list[int],
    req: list[int],
    owner: list[int],
    seed: int,
    padded: int = 0,
) -> dict:
    """One verify launch: rows are `owner`'s requests' consecutive positions from
    firsts[owner]; `req` is the request index the kernel is given per row; the last
    `padded` rows are graph padding (raw_out_loc 0: they write nothing)."""
    n = len(owner)
    requests = max(owner) + 1
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    positions, seen = [], {}
    for r in owner:
        positions.append(firsts[r] + seen.get(r, 0))
        seen[r] = seen.get(r, 0) + 1
    kv_input = torch.randn(n, 2 * C2_HEAD, generator=gen, device=dev)
    state = torch.randn(max(requests, max(req) + 1) * ring, 2 * C2_HEAD, generator=gen, device=dev)
    before = state.clone()
    weight = (1 + 0.1 * torch.randn(C2_HEAD, generator=gen, device=dev)).to(torch.bfloat16)
    max_pos = max(positions) + 2
    freqs = torch.randn(max_pos, C2_ROPE, generator=gen, device=dev)
    raw_out_loc = torch.arange(1, n + 1, device=dev, dtype=torch.int64) * 2
    if padded:
        raw_out_loc[n - padded :] = 0
    pages = (n + 2) // C2_PAGE + 1
    cache = torch.zeros(pages, c2_page_bytes(), dtype=torch.uint8, device=dev)
    out = torch.zeros(n, C2_HEAD, dtype=torch.bfloat16, device=dev)
    pos_t = torch.tensor(positions, device=dev, dtype=torch.int64)
    req_t = torch.tensor(req, device=dev, dtype=torch.int64)
    try:
        module.decode_fusion(
            kv_input,
            state,
            out,
            weight,
            pos_t,
            req_t,
            raw_out_loc,
            C2_EPS,
            freqs,
            cache,
            ring,
            draft_len,
        )
        torch.cuda.synchronize()
    except Exception as err:  # the kernel's host checks (CHECK_HOST) raise here
        return {"refused": str(err).strip().splitlines()[-1][:300]}
    # where each even row parked: the slot whose contents equal its kv_input row
    changed = (state != before).any(dim=1).nonzero().flatten().tolist()
    parks = []
    for row in range(n - padded):
        if positions[row] % 2:
            continue
        hit = [s for s in changed if torch.equal(state[s], kv_input[row])]
        parks.append([row, hit[0] if hit else None])
    # what each odd row pooled, against the reference with the partner the kernel's
    # rule gives (the previous row inside a block, else the ring)
    odd = [row for row in range(n - padded) if positions[row] % 2]
    errs = []
    for row in odd:
        first_in_block = row % draft_len == 0
        slot = req[row] * ring + (positions[row] - 1) % ring
        partner = before[slot] if first_in_block else kv_input[row - 1]
        ref = c2_reference(partner[None], kv_input[row][None], weight)[0].float()
        errs.append((out[row].float() - ref).abs().max().item())
    return {
        "positions": positions,
        "req": req,
        "owner": owner,
        "parks": parks,
        "slots_changed": len(changed),
        "max_abs_err": max(errs) if errs else 0.0,
    }


def c2_served(draft_len: int, ring: int, firsts: list[int], launch: dict) -> int:
    """Acceptance outcomes whose next step's first (odd) row would not find its partner
    in the ring as the GPU left it."""
    parked = {slot: launch["positions"][row] for row, slot in launch["parks"] if slot is not None}
    missing = 0
    for r, first in enumerate(firsts):
        for accepted in range(1, draft_len + 1):
            nxt = first + accepted
            if nxt % 2 and parked.get(r * ring + (nxt - 1) % ring) != nxt - 1:
                missing += 1
    return missing


def check_c2(module) -> dict:
    rng = random.Random(11)
    uniform, compact = [], []
    for rows in C2_ROWS:
        ring = c2_ring(rows)
        requests = 8
        firsts = [4096 + rng.randrange(0, 64) for _ in range(requests)]
        owner = [r for r in range(requests) for _ in range(rows)]
        launch = run_c2(module, rows, ring, firsts, list(owner), owner, seed=rows)
        launch.update(rows=rows, ring=ring, firsts=firsts)
        if "refused" not in launch:
            launch["missing_needed"] = c2_served(rows, ring, firsts, launch)
        uniform.append(launch)
    for rows in (7, 8):  # compact at depth 6 / 7: each request 1..rows rows, packed
        ring = c2_ring(rows)
        for seed in range(3):
            lens = [rng.randint(1, rows) for _ in range(16)]
            firsts = [4096 + rng.randrange(0, 64) for _ in lens]
            owner = [r for r, k in enumerate(lens) for _ in range(k)]
            pad = -len(owner) % rows  # padded to whole blocks, as a graph bucket pads
            owner_padded = owner + [owner[-1]] * pad
            req = [r for r in range(len(lens)) for _ in range(rows)][: len(owner_padded)]
            launch = run_c2(
                module, rows, ring, firsts, req, owner_padded, seed=100 + seed, padded=pad
            )
            entry = {"rows": rows, "ring": ring, "verify_lens": lens, "padded_rows": pad}
            if "refused" in launch:
                entry["refused"] = launch["refused"]
            else:
                entry["parked_in_other_request"] = sum(
                    1
                    for row, slot in launch["parks"]
                    if slot is not None and slot // ring != owner_padded[row]
                )
                entry["rows_total"] = len(owner_padded)
                entry["req"] = req
                entry["positions"] = launch["positions"]
                entry["parks"] = launch["parks"]
            unpadded = run_c2(module, rows, ring, firsts, req[: len(owner)], owner, seed=200 + seed)
            entry["unpadded_refused"] = unpadded.get("refused")
            reqs = torch.arange(len(lens), device="cuda")
            try:
                torch.repeat_interleave(reqs, rows, output_size=len(owner))
                torch.cuda.synchronize()
                entry["repeat_interleave"] = "accepted"
            except RuntimeError as err:
                entry["repeat_interleave"] = str(err).strip().splitlines()[0][:200]
            compact.append(entry)
    return {"uniform": uniform, "compact": compact}


# --- report ------------------------------------------------------------------------------


def c2_report(runs: list[dict]) -> list[str]:
    lines = [
        "### DeepSeek-V4.1's ratio-2 pair ring (c2.cuh, static verify)",
        "",
        "| tree | rows | ring | parked rows read back | outcomes missing the partner | "
        "max abs err vs torch |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        name = f"{run['sglang']}-{run['state']}"
        if "c2_build_error" in run:
            error = run["c2_build_error"].strip().splitlines()[-1][:200]
            lines.append(f"| {name} | - | - | c2.cuh did not build: {error} | | |")
            continue
        for case in run["c2"]["uniform"]:
            if "refused" in case:
                lines.append(
                    f"| {name} | {case['rows']} | {case['ring']} | refused: {case['refused']} | | |"
                )
                continue
            found = sum(1 for _, s in case["parks"] if s is not None)
            lines.append(
                f"| {name} | {case['rows']} | {case['ring']} | {found} of {len(case['parks'])} | "
                f"{case['missing_needed']} | {case['max_abs_err']:.3g} |"
            )
    lines += [
        "",
        "### Compact verify as sglang 0.5.23 lays it out for V4.1",
        "",
        "| tree | rows | verify_lens | padded launch | unpadded launch | repeat_interleave |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        name = f"{run['sglang']}-{run['state']}"
        for case in run.get("c2", {}).get("compact", []):
            padded = case.get("refused") or (
                f"{case['parked_in_other_request']} rows parked in another request's ring"
            )
            lines.append(
                f"| {name} | {case['rows']} | {case['verify_lens']} | {padded} | "
                f"{case['unpadded_refused'] or 'accepted'} | {case['repeat_interleave']} |"
            )
    return lines + [""]


def report(paths: list[Path]) -> str:
    all_runs = [json.loads(p.read_text()) for p in paths]
    c2_runs = [r for r in all_runs if "c2" in r or "c2_build_error" in r]
    runs = [r for r in all_runs if r not in c2_runs]
    if c2_runs and not runs:
        return "\n".join(c2_report(c2_runs)) + "\n"
    lines = [
        "### Verify rows in the state ring (write plan)",
        "",
        "| sglang | tree | ratio | rows per request | planner | requests | rows planned / all | "
        "rows needed | needed rows missing | missing by row (0 = first) | rows at a wrong slot |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for c in run.get("plan", {}).get("coverage", []):
            lines.append(
                f"| {run['sglang']} | {run['state']} | c{c['ratio']} | {c['rows']} | "
                f"{c['path']} | {c['requests']} | {c['rows_planned']} / {c['rows_total']} | "
                f"{c['needed']} | {c['missing_needed']} | "
                f"{c['missing_needed_by_row']} | {c['wrong_slot']} |"
            )
    lines += [
        "",
        "### Ragged (compact) verify: mixed per-request widths, GPU planner",
        "",
        "| sglang | tree | ratio | ring | per-request ring | widths | requests | "
        "rows planned / all | rows needed | needed rows missing | missing by row | "
        "rows at a wrong slot | host loop plans the same writes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for c in run.get("plan", {}).get("compact", []):
            lines.append(
                f"| {run['sglang']} | {run['state']} | c{c['ratio']} | {c['ring']} | "
                f"{c['req_ring']} | {c['rows']} | {c['requests']} | "
                f"{c['rows_planned']} / {c['rows_total']} | {c['needed']} | "
                f"{c['missing_needed']} | {c['missing_needed_by_row']} | "
                f"{c['wrong_slot']} | {c['host_writes_equal']} |"
            )
    lines += [
        "",
        "### Host loop vs GPU planner",
        "",
        "| sglang | tree | case | ratio | ring | compress plans equal | write plans equal | "
        "writes host / GPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for a in run.get("plan", {}).get("agreement", []):
            lines.append(
                f"| {run['sglang']} | {run['state']} | {a['case']} | c{a['ratio']} | "
                f"{a['ring']} | {a['compress_equal']} | {a['write_equal']} | "
                f"{a['host_writes']} / {a['gpu_writes']} |"
            )
    by_state: dict = {}
    for run in runs:
        if "plan" in run:
            by_state.setdefault(run["sglang"], {})[run["state"]] = run["plan"]["plans"]
    lines += ["", "### Plans the patch must not change (pristine vs patched digest)", ""]
    for version, states in sorted(by_state.items()):
        if {"pristine", "patched"} <= set(states):
            a, b = states["pristine"], states["patched"]
            same = sorted(k for k in a if a[k] == b.get(k))
            differ = sorted(k for k in a if a[k] != b.get(k))
            lines.append(
                f"- sglang {version}: same: {', '.join(same) or 'none'}; "
                f"changed: {', '.join(differ) or 'none'}"
            )
    lines += ["", "### Race stress (ragged batch, GPU planner vs host loop)", ""]
    for run in runs:
        if "race" in run:
            lines.append(
                f"- sglang {run['sglang']} {run['state']}: {run['race']['mismatches']} "
                f"mismatches in {run['race']['launches']} launches"
            )
    lines += [
        "",
        "### KV-store kernels with an index of -1",
        "",
        "| sglang | tree | kernel | page size | rows (-1) | guard bytes changed | cache digest |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for s in run.get("store", []):
            lines.append(
                f"| {run['sglang']} | {run['state']} | {s['kernel']} | {s['page_size']} | "
                f"{s['tokens']} ({s['invalid_rows']}) | {s.get('guard_bytes_changed', '-')} | "
                f"{s['cache_digest']} |"
            )
    return "\n".join(lines + ([""] + c2_report(c2_runs) if c2_runs else [])) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["plan", "race", "store", "c2", "report"])
    parser.add_argument("--tree", type=Path, help="a site-packages folder holding sglang/")
    parser.add_argument("--state", default="?", help="label: pristine or patched")
    parser.add_argument("--build", type=Path, help="where compiled modules go (per tree)")
    parser.add_argument("--json", type=Path, help="write results here")
    parser.add_argument("--launches", type=int, default=200)
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="store: the cache in its own allocation (for memcheck)",
    )
    parser.add_argument(
        "--kernel",
        choices=[*STORE_KERNELS, "all"],
        default="all",
        help="store: which kernel (one per memcheck run: the first "
        "out-of-bounds write ends the process)",
    )
    parser.add_argument("inputs", nargs="*", type=Path, help="report: JSON files")
    args = parser.parse_args(argv)
    if args.command == "report":
        print(report(args.inputs), end="")
        return 0
    if args.tree is None or args.build is None:
        parser.error("--tree and --build are required")
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    tree = args.tree.resolve()
    result = {
        "sglang": sglang_version(tree),
        "state": args.state,
        "tree": str(tree),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }
    if args.command == "c2":
        if not has_c2(tree):
            sys.exit(f"{tree}: sglang {result['sglang']} has no c2.cuh (no DeepSeek-V4.1 code)")
        try:
            module = c2_module(tree, args.build)
        except Exception as err:  # nvcc refusing c2.cuh for this GPU is a result too
            result["c2_build_error"] = str(err)[-2000:]
            if args.json:
                args.json.write_text(json.dumps(result, indent=1) + "\n")
            sys.exit(f"c2.cuh does not build for {result['device']}: {str(err)[-500:]}")
        result["c2"] = check_c2(module)
    elif args.command == "plan":
        module = plan_module(tree, args.build)
        result["plan"] = check_plan(module)
        result["race"] = check_race(module, args.launches)
    elif args.command == "race":
        module = plan_module(tree, args.build)
        for batch in race_batches():
            run_plan(module, batch, 4, SPEC_RING[4], on_gpu=True)
        result["race_launches"] = 2
    else:
        kinds = list(STORE_KERNELS) if args.kernel == "all" else [args.kernel]
        result["store"] = check_store(tree, args.build, args.standalone, kinds)
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    summary = {k: v for k, v in result.items() if k not in ("plan", "c2")}
    print(json.dumps(summary))
    if "plan" in result:
        bad = [c for c in result["plan"]["coverage"] if c["missing_needed"] or c["wrong_slot"]]
        print(f"plan: {len(bad)} of {len(result['plan']['coverage'])} coverage cases miss rows")
    if "c2" in result:
        bad = [c for c in result["c2"]["uniform"] if c.get("missing_needed", 1)]
        print(f"c2: {len(bad)} of {len(result['c2']['uniform'])} static verifies lose a partner")
    return 0


if __name__ == "__main__":
    sys.exit(main())
