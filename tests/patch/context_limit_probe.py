"""Run in a subprocess by test_context_limit.py, one sglang tree first on sys.path.

Compact ragged verify near the context limit, at the index level: what the
DeepSeek-V4 backend's verify metadata makes its SWA-index and page-table kernels
read when a request without a padding slot after it sits on the pool's last
req_to_token row.

sglang's own code, from the tree: the layout (`RaggedVerifyLayout`), the graph
runner's token buckets and slot count (`_build_ragged_verify_token_buckets`,
`_ragged_capture_slots`), the backend's `_resolve_verify_layout`,
`init_forward_metadata_target_verify`, `make_forward_metadata_from_raw_verify`
and `_expand_prefill_casually_vectorized` (compiled from the backend's source: the
module imports the serving stack), then the metadata kernels the backend's
`make_core_attn_metadata` calls on its plain causal branch (`BuildPageTablePositions`,
`BuildCausalSwaPageIndices`, and the compression metadata kernel that gives the c4
indexer its lengths), each routed to its Triton kernel under TRITON_INTERPRET=1.
Only `make_core_attn_metadata` itself is stood in (it calls those three with the
arguments it passes; its other branches are for request windows and draft blocks).

The pools: req_to_token is a view of the first rows of a larger buffer, so the rows
after the pool's last one are a guard region holding GUARD_LOC; full_to_swa is
likewise a view with a guard region after the pool mapping to GUARD. Past each
request's allocated slots its row holds FREED_LOC (a freed page), whose SWA index
is FREED. A clean run writes neither poison (zeros, as a fresh pool).

argv[1]: JSON {"cases": [...], "clean": bool} (clean: each case once more unpoisoned).
Prints one JSON list: per case, what each row of the verify read.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import types
from dataclasses import dataclass
from typing import Any

# SM12X_PROBE_DEVICE=cuda (benchmarks/dsv4_context_limit_gpu.sh): the same chain on a
# GPU, the kernels compiled by Triton, exact allocations (no guard region: memcheck is
# the guard). Otherwise the CPU under the Triton interpreter.
DEVICE = os.environ.get("SM12X_PROBE_DEVICE", "cpu")
assert DEVICE == "cuda" or os.environ.get("TRITON_INTERPRET") == "1", (
    "set TRITON_INTERPRET=1 first (or SM12X_PROBE_DEVICE=cuda on a GPU)"
)
os.environ["SGLANG_RAGGED_VERIFY_MODE"] = "compact"

from sm12x.selftest.env import stub_torchvision  # noqa: E402

stub_torchvision()

import torch  # noqa: E402
from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.speculative import ragged_verify as rv  # noqa: E402

try:  # 0.5.23
    from sglang.kernels.ops.attention.dsv4 import attn_metadata_kernels as amk
except ImportError:  # 0.5.17
    from sglang.kernels.ops.attention import dsv4_attn_metadata_kernels as amk
from sglang.kernels.ops.attention.dsv4.metadata_kernel import (  # noqa: E402
    init_compression_metadata,
)

if DEVICE == "cuda":
    torch.set_default_device("cuda")
else:
    # The kernels pick Triton for CUDA inputs; here the interpreter runs them on the CPU.
    amk._inputs_on_cuda = lambda *args, **kwargs: True
GUARD_ROWS = 0 if DEVICE == "cuda" else 2

ROOT = os.path.dirname(os.path.dirname(sys.modules["sglang"].__file__))
BACKEND = "sglang/srt/layers/attention/deepseek_v4_backend.py"
RUNNER = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
DRAFT_TOKENS = 8  # the throughput recipes' DSPARK depth 7
PAGE = 256  # sglang's DeepSeek-V4 pool requires 256-token pages on CUDA
GUARD_LOC, GUARD = 1 << 20, -777
FREED_LOC, FREED = 3, -555


def compiled(rel: str, names: list[str], namespace: dict) -> dict:
    """The named functions, classes and module constants of a tree's source file."""
    with open(os.path.join(ROOT, rel)) as source:
        module = ast.parse(source.read())
    nodes = [
        node
        for node in module.body
        if (isinstance(node, ast.ClassDef) and node.name in names)
        or (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id in names for t in node.targets)
        )
    ]
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            nodes.append(node)
    body = [ast.ImportFrom("__future__", [ast.alias("annotations")], 0), *nodes]
    exec(compile(ast.fix_missing_locations(ast.Module(body, [])), rel, "exec"), namespace)
    missing = [n for n in names if n not in namespace]
    assert not missing, f"{rel}: no {missing}"
    return namespace


def chain() -> dict:
    ns: dict[str, Any] = {
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
        "ExpandPrefillCausally": amk.ExpandPrefillCausally,
        "get_parallel": lambda: types.SimpleNamespace(attn_cp_size=1),
        "create_paged_compressor_data": lambda compress_ratio, **kw: kw,
        "DSV4Metadata": lambda core, *args, **kw: core,
        "functools": __import__("functools"),
    }
    compiled(
        BACKEND,
        [
            "SWA_WINDOW",
            "PAGE_INDEX_ALIGNED_SIZE",
            "DSV4RawVerifyMetadata",
            "_resolve_verify_layout",
            "init_forward_metadata_target_verify",
            "make_forward_metadata_from_raw_verify",
            "_expand_prefill_casually_vectorized",
            "_make_target_verify_c128_metadata",
        ],
        ns,
    )
    compiled(RUNNER, ["_ragged_capture_slots", "_build_ragged_verify_token_buckets"], ns)
    return ns


def core_attn_metadata(backend, ns):
    """make_core_attn_metadata's plain causal branch: the three kernels it calls."""

    def make(
        *, req_to_token, req_pool_indices_repeated, seq_lens_casual, max_seq_len, out_loc, **_
    ):
        prep = amk.BuildPageTablePositions.execute(
            req_to_token=req_to_token,
            req_pool_indices_repeated=req_pool_indices_repeated,
            seq_lens_casual=seq_lens_casual,
            max_seq_len=max_seq_len,
            page_size=PAGE,
            swa_window=ns["SWA_WINDOW"],
        )
        swa = amk.BuildCausalSwaPageIndices.execute(
            req_to_token=req_to_token,
            full_to_swa_mapping=backend.full_to_swa,
            req_pool_indices_repeated=req_pool_indices_repeated,
            seq_lens_casual=prep.seq_lens_casual,
            swa_window=ns["SWA_WINDOW"],
            page_index_aligned_size=ns["PAGE_INDEX_ALIGNED_SIZE"],
        )
        c4_lengths = init_compression_metadata(
            prep.seq_lens_casual, prep.positions_casual, out_loc, prep.page_table, PAGE, True
        )[2]
        return types.SimpleNamespace(
            seq_lens_casual=prep.seq_lens_casual,
            page_table=prep.page_table,
            swa_page_indices=swa,
            c4_lengths=c4_lengths,
            low_ratios=(),
        )

    return make


def run_case(ns, case: dict, clean: bool) -> dict:
    """One verify: case = {path, max_bs, tier, widths, seq_lens, ctx}."""
    n, D = len(case["widths"]), DRAFT_TOKENS
    width = case["ctx"] + 4 + D  # ReqToTokenPool rows: context + 4 + draft tokens
    rows = n + 1  # row 0 is the padding row; the last request holds the pool's last row
    buf = torch.zeros((rows + GUARD_ROWS, width), dtype=torch.int32)
    pool = rows * width + PAGE
    f2s_buf = torch.zeros(pool + (GUARD_LOC + 1 if GUARD_ROWS else 0), dtype=torch.int64)
    f2s = f2s_buf[:pool]
    if not clean:
        buf[rows:] = GUARD_LOC
        f2s_buf[pool:] = GUARD
        f2s[FREED_LOC] = FREED
    f2s_buf[PAGE:pool] = torch.arange(PAGE, pool)  # a location's SWA slot (page 0: padding)
    r2t = buf[:rows]
    for i, seq in enumerate(case["seq_lens"]):
        live = seq + D  # DSPARK allocates every draft slot before the verify
        assert live <= width, "a request holds no more than its row"
        r2t[i + 1, :live] = PAGE + (i + 1) * width + torch.arange(live, dtype=torch.int32)
        if not clean:
            r2t[i + 1, live:] = FREED_LOC
    runner = types.SimpleNamespace(
        max_bs=case["max_bs"], captured_req_width=D, capture_bs=case["capture_bs"]
    )
    buckets = ns["_build_ragged_verify_token_buckets"](runner)
    tier = case["tier"]
    assert tier in buckets, (tier, buckets)
    # Graph replay pads to the tier's slots; eager verify to the batch (bs = len(seq_lens)).
    bs = ns["_ragged_capture_slots"](runner, tier) if case["path"] == "graph" else n
    layout = rv.RaggedVerifyLayout.from_verify_lens_device(
        verify_lens=torch.tensor(case["widths"], dtype=torch.int32), graph_num_tokens=tier
    )
    backend = types.SimpleNamespace(
        online_c128_mtp=types.SimpleNamespace(enabled=lambda: False),
        has_c4=True,
        has_c128=False,
        needs_cpu_seq_lens=False,
        speculative_num_draft_tokens=D,
        extend_seq_lens_buffer=torch.zeros(max(bs, n), dtype=torch.int32),
        extend_start_loc_buffer=torch.zeros(max(bs, n), dtype=torch.int32),
        req_to_token=r2t,
        full_to_swa=f2s,
        token_to_kv_pool=None,
        MAX_SEQ_LEN_FOR_CAPTURE=width,
        init_forward_metadata_indexer=lambda *a, **kw: None,
    )
    for name in ("_make_target_verify_c128_metadata", "_expand_prefill_casually_vectorized"):
        setattr(backend, name, types.MethodType(ns[name], backend))
    backend.make_core_attn_metadata = core_attn_metadata(backend, ns)
    batch = types.SimpleNamespace(spec_info=types.SimpleNamespace(ragged_verify_layout=layout))
    padded = ns["_resolve_verify_layout"](backend, batch, bs=bs)
    slot_rows = list(range(1, n + 1)) + [0] * (bs - n)
    slot_seqs = case["seq_lens"] + [1] * (bs - n)
    raw = ns["init_forward_metadata_target_verify"](
        backend,
        max_seq_len=width,
        req_pool_indices=torch.tensor(slot_rows, dtype=torch.int64),
        seq_lens=torch.tensor(slot_seqs, dtype=torch.int64),
        out_cache_loc=torch.zeros(tier, dtype=torch.int64),
        ragged_layout=padded,
    )
    core = ns["make_forward_metadata_from_raw_verify"](backend, raw)
    extends = [int(x) for x in raw.extend_seq_lens.tolist()]
    owner, real = [], []
    for slot, e in enumerate(extends):
        owner += [slot] * e
        real += [j < (case["widths"][slot] if slot < n else 0) for j in range(e)]
    c4_cols = -(-core.c4_lengths.to(torch.int64) // (PAGE // 4))
    return {
        "case": case,
        "row_width": width,
        "slots": bs,
        "extends": extends,
        "owner": owner,
        "real": real,
        "seq_lens_casual": [int(x) for x in core.seq_lens_casual.tolist()],
        "swa": core.swa_page_indices.tolist(),
        "page_table": core.page_table.tolist(),
        "page_table_columns": int(core.page_table.shape[1]),
        "c4_columns": [int(x) for x in c4_cols.tolist()],
    }


def imported_files() -> list[str]:
    """The tree's files this process loaded (benchmarks/dsv4_context_limit_gpu.sh
    copies only these, and the sources compiled above, to the GPU machine)."""
    out = {BACKEND, RUNNER}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None) or ""
        if path.startswith(ROOT + os.sep):
            out.add(os.path.relpath(path, ROOT))
    return sorted(out)


def main() -> None:
    spec = json.loads(sys.argv[1])
    ns = chain()
    if spec.get("imports"):
        json.dump(imported_files(), sys.stdout)
        return
    cleans = (False, True) if spec.get("clean") else (False,)
    out = [
        {**run_case(ns, case, clean), "clean": clean} for case in spec["cases"] for clean in cleans
    ]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
