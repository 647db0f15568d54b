"""flashinfer >= 0.7's sm_120 sparse MLA, its compiled module emulated for a CPU.

flashinfer 0.7 replaced the fixed instantiation tables of 0.6 with a runtime
envelope: its Python planner (`_sparse_mla_sm120/_prepared.py`, `_policy.py`)
asks the compiled module which kernel variants a call's actual metadata
allows (`candidates`, `metadata_candidates`), resolves an execution plan
(`resolve_attention`) and runs it (`execute_attention`). Everything Python
stays real here; the compiled module (`_execution.get_sparse_mla_sm120_module`,
what `gen_sparse_mla_sm120_module().build_and_load()` returns) is replaced by
`CompiledModule`, which enforces the C++ rules of the wheel's own sources:

- `inspect_metadata` (csrc/sparse_mla_sm120/attention_validation.h): the
  tensor and paged-layout checks, returning the 18-field AttentionMetadata;
- `resolve_attention`, `candidates`, `metadata_candidates`
  (attention_resolve.cu): the variant legality rules, chunk capacity and
  scratch geometry. Prefill head counts per model and variant are parsed from
  `visit_prefill_heads` in execution/attention_plan.h (its `if constexpr`
  conditions evaluated per model), DecodeMaxHeads and FixedPageSize from there
  too;
- `execute_attention` (attention_binding.cu ExecuteAttentionPlan, and
  dispatch_prefill of prefill_dispatch.cu): the launch-time checks, then the
  kernel, recorded (and, in compute mode, stood in for by sglang's reference).

The checks are written out from flashinfer 0.7.2's C++, whose text this module
pins by digest (`PINNED`): a wheel whose sources differ is refused with the
file named, rather than emulated by rules it no longer has. Two things a CPU
has no counterpart for are stated, not emulated: the device (an sm_120 GPU:
SM count and opt-in shared memory, what `torch.cuda` would report, and the
"same CUDA device" checks, here "same device"), and the kernels' shared
memory footprint (template constants of the kernel headers; flashinfer builds
these kernels for sm_120a, whose 99 KiB it is sized for).

A check the real module enforces with TVM_FFI_ICHECK raises KernelAbort (a
RuntimeError, as tvm-ffi raises one into Python), with the C++ message.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sm12x.selftest import csrc
from sm12x.selftest.kernels import (
    BYTES_PER_TOKEN_DSV4,
    D_QK_DSV4,
    Call,
    Emulator,
    KernelAbort,
)

# The sources the rules below were written from (flashinfer 0.7.2), by sha256.
PINNED = {
    "csrc/sparse_mla_sm120/attention_resolve.cu": "a1d5dd6ec9181cc48163e7944bd3d6e27befcd6c60f5dc33c55e57e2f08b4aaa",
    "csrc/sparse_mla_sm120/attention_validation.h": "4bc0a6ae1f12ece146366f18a7f53170578565402cbbeee639762bf463ed1908",
    "csrc/sparse_mla_sm120/attention_binding.cu": "3dcc9ad2f2d6e40631739b0d5fa71aa57f4557894bdc3dfa478077c7f7089c53",
    "csrc/sparse_mla_sm120/prefill_dispatch.cu": "ad6826866defb9295daa16087020552ddfc4f7133c264c0c3daedf31cc6562d3",
    "include/flashinfer/attention/sparse_mla_sm120/execution/attention_plan.h": "01474226c79a31aff939c04786f519c84400a5fe8f1d118c646508ed45c45f85",
    "include/flashinfer/attention/sparse_mla_sm120/execution/prefill_launch.cuh": "84507cd548c32059608f8fcc9d605c8377caeb4bcc6a1786b06b679bb001dcdf",
    "include/flashinfer/attention/sparse_mla_sm120/model/kv_cache_traits.cuh": "61eb024bef7133e875ccc80d560acbe3f04989cc8320d300e43659fa7e33d1e2",
}
PINNED_VERSION = "0.7.2"

MODELS = ("DSV3_2", "DSV4", "GLM_NSA", "GLM53_NOPE", "DOTS3_SWA", "DSV4_1")
DSV4 = MODELS.index("DSV4")
# KVCacheTraits<ModelType::DSV4> (kv_cache_traits.cuh, pinned through the files
# above): 448 FP8 nope + 64 BF16 rope + an 8-byte UE8M0 footer per token.
DSV4_FORMAT: dict[str, Any] = {
    "query_dim": D_QK_DSV4,
    "value_dim": 512,
    "bytes_per_token": BYTES_PER_TOKEN_DSV4,
    "inline_scale": False,
    "nope_dim": 448,
    "rope_dim": 64,
    "num_scales": 7,
    "scale_bytes": 8,
    "data_bytes": 576,
    "rope_offset": 448,
    "fp4_bytes_per_token": 288,
    "min_topk": 1,
    "runtime_page": True,
    "max_heads": 128,
    "page_size": 64,
    "chunk_width": 64,
}
# The device the census stands for: an RTX PRO 6000 Blackwell (sm_120, 188 SMs, 99 KiB
# opt-in shared memory per block). The SM count only moves the split-K chunking (cpb),
# never whether a call is legal; the shared memory is the fit the kernels are built for.
DEVICE_NAME = "NVIDIA RTX PRO 6000 Blackwell (emulated)"
DEVICE_CAPS = (188, 101376)
# NumericRoute (attention_plan.h): FP8, QkBF16PvFP8, FullBF16, NVFP4.
NUMERIC = ("fp8", "hybrid", "bf16", "nvfp4")
FIELDS = (
    "model",
    "tokens",
    "heads",
    "topk",
    "extra_topk",
    "page_size",
    "extra_page_size",
    "page_stride_bytes",
    "extra_page_stride_bytes",
    "row_stride_bytes",
    "indices_stride",
    "extra_indices_stride",
    "lse_stride",
    "has_lengths",
    "has_extra_lengths",
    "has_sink",
    "extra_fp4",
    "variant",
)


def is_envelope(flashinfer_package: Path) -> bool:
    """Whether this flashinfer has 0.7's planner (a package, not one module)."""
    return (Path(flashinfer_package) / "mla" / "_sparse_mla_sm120" / "_execution.py").is_file()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cpp_condition(text: str, model: str, variant: int) -> bool:
    """An `if constexpr (...)` condition of visit_prefill_heads, for one model and variant."""
    inline = model in ("DSV3_2", "GLM_NSA", "GLM53_NOPE")
    names = {
        "sg": variant == 1,
        "mg": variant in (2, 3),
        "swap": variant == 4,
        "inline_scale": inline,
    }
    expr = re.sub(r"MT\s*==\s*ModelType::(\w+)", lambda m: str(model == m[1]), text)
    expr = re.sub(r"\b(sg|mg|swap|inline_scale)\b", lambda m: str(names[m[1]]), expr)
    expr = expr.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
    if not re.fullmatch(r"[\sA-Za-z()]*", expr) or set(re.findall(r"[A-Za-z]+", expr)) - {
        "True",
        "False",
        "and",
        "or",
        "not",
    }:
        raise csrc.CsrcFormatError(f"visit_prefill_heads: cannot read condition {text!r}")
    return bool(eval(expr, {"__builtins__": {}}))  # noqa: S307 (booleans only, checked above)


@dataclass(frozen=True)
class EnvelopeRules:
    """What flashinfer 0.7's compiled module accepts, read from its sources."""

    version: str
    decode_max_heads: int
    fixed_page_size: int
    runtime_page_models: frozenset[str]
    # (model, variant) -> head counts visit_prefill_heads serves
    prefill_heads: dict[tuple[str, int], frozenset[int]] = field(default_factory=dict)

    @classmethod
    def from_flashinfer(cls, package_dir: Path, version: str) -> EnvelopeRules:
        data = Path(package_dir) / "data"
        for relative, digest in PINNED.items():
            path = data / relative
            if not path.is_file():
                raise csrc.CsrcFormatError(f"{relative} is missing")
            if _digest(path) != digest:
                raise csrc.CsrcFormatError(
                    f"{relative} is not flashinfer {PINNED_VERSION}'s: the emulated rules of "
                    "sm12x/selftest/envelope.py were written from that release; review them "
                    "against this one and update PINNED"
                )
        plan = (
            data / "include/flashinfer/attention/sparse_mla_sm120/execution/attention_plan.h"
        ).read_text(encoding="utf-8")
        max_heads = re.search(r"constexpr int DecodeMaxHeads = (\d+);", plan)
        page = re.search(r"constexpr int FixedPageSize = (\d+);", plan)
        runtime = re.search(
            r"constexpr bool runtime_page\(ModelType model\) \{\s*return ([^;]+);", plan
        )
        if not (max_heads and page and runtime):
            raise csrc.CsrcFormatError(
                "attention_plan.h: DecodeMaxHeads, FixedPageSize or runtime_page not found"
            )
        body = csrc._function_body(plan, "visit_prefill_heads")
        blocks = re.findall(r"if constexpr \((.*?)\)\s*\{\s*((?:HEAD\(\d+\)\s*)+)\}", body, re.S)
        if not blocks:
            raise csrc.CsrcFormatError("visit_prefill_heads: no `if constexpr` head blocks")
        heads: dict[tuple[str, int], frozenset[int]] = {}
        for model in MODELS:
            for variant in (1, 2, 3, 4):
                found = set()
                for condition, listed in blocks:
                    if _cpp_condition(" ".join(condition.split()), model, variant):
                        found |= {int(h) for h in re.findall(r"HEAD\((\d+)\)", listed)}
                heads[model, variant] = frozenset(found)
        return cls(
            version,
            int(max_heads[1]),
            int(page[1]),
            frozenset(re.findall(r"ModelType::(\w+)", runtime[1])),
            heads,
        )

    def main_page_supported(self, model: str, page: int) -> bool:
        return page > 0 if model in self.runtime_page_models else page == self.fixed_page_size

    def has_prefill_heads(self, model: str, variant: int, heads: int) -> bool:
        # has_prefill_heads: variant 1 -> SG, 4 -> swapAB, anything else -> the MG list.
        key = variant if variant in (1, 4) else 2
        return heads in self.prefill_heads[model, key]


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise KernelAbort(message)


def decode_scratch_heads(heads: int) -> int:
    return 8 if heads == 8 else (heads + 15) // 16 * 16


@dataclass
class Metadata:
    """execution::AttentionMetadata, one field per entry of the 18-int ABI."""

    values: dict[str, int]

    @classmethod
    def unpack(cls, packed) -> Metadata:
        items = list(packed)
        _check(len(items) == 18, "attention metadata ABI mismatch")
        _check(all(int(v) >= 0 for v in items), "negative attention metadata")
        return cls(dict(zip(FIELDS, (int(v) for v in items))))

    def __getattr__(self, name: str) -> int:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def with_variant(self, variant: int) -> Metadata:
        return Metadata({**self.values, "variant": variant})

    def pack(self) -> tuple[int, ...]:
        return tuple(self.values[name] for name in FIELDS)


class Plan:
    """What resolve_attention returns (a tvm-ffi Module with workspace/inspect)."""

    def __init__(self, metadata: Metadata, facts: dict[str, Any]):
        self.metadata = metadata
        self.facts = facts

    def workspace(self):
        m, f = self.metadata, self.facts
        return [
            [[f["partial_bytes"] // 2], "bfloat16", f["partial_bytes"], 16],
            [[f["lse_bytes"] // 4], "float32", f["lse_bytes"], 16],
            [[m.tokens, m.heads], "float32", m.tokens * m.heads * 4, 4],
        ]

    def inspect(self) -> dict[str, Any]:
        return dict(self.facts)


class CompiledModule:
    """The functions of flashinfer 0.7's compiled sm_120 sparse-MLA module the
    Python planner calls, for DeepSeek-V4's cache format."""

    def __init__(self, rules: EnvelopeRules, emulator: EnvelopeEmulator):
        self.rules = rules
        self.emulator = emulator

    # The DeepSeek-V4.1 cache quantizers the module also exports (get_sparse_mla_sm120_module
    # binds them): no DeepSeek-V4 call reaches them.
    def _not_v4(self, *args, **kwargs):
        raise NotImplementedError("DeepSeek-V4.1 cache ops are not emulated")

    sparse_mla_sm120_dsv41_fp4_quantize_pack = _not_v4
    sparse_mla_sm120_dsv41_fp4_quantize_append = _not_v4
    sparse_mla_sm120_dsv41_fp8_quantize_pack = _not_v4
    sparse_mla_sm120_dsv41_fp8_quantize_append = _not_v4

    # --- formats ---------------------------------------------------------------------
    def resolve_format(self, query_dim: int, scale: str) -> int:
        # DSV3_2 (576) is the only earlier model; GLM53_NOPE (512) needs arbitrary_fp32.
        if query_dim == D_QK_DSV4 and scale == "auto":
            return DSV4
        raise ValueError(
            f"unsupported d_qk={query_dim} with kv_scale_format={scale} "
            "(the emulator models DeepSeek-V4's format only)"
        )

    def _model(self, model: int) -> str:
        _check(0 <= model < len(MODELS), "unknown cache format")
        if model != DSV4:
            raise NotImplementedError(f"model {MODELS[model]}: the emulator models DSV4 only")
        return MODELS[model]

    def format_info(self, model: int) -> dict[str, Any]:
        self._model(model)
        return dict(DSV4_FORMAT)

    def main_page_sizes(self, model: int) -> list[int]:
        name = self._model(model)
        return [] if name in self.rules.runtime_page_models else [self.rules.fixed_page_size]

    def decode_scratch_heads(self, heads: int) -> int:
        return decode_scratch_heads(heads)

    # --- inspect_attention_metadata<false> (attention_validation.h) --------------------
    @staticmethod
    def _same_device(q: torch.Tensor, tensor: torch.Tensor, name: str) -> None:
        # check_attention_device: the same CUDA device as q (here: the same device).
        _check(tensor.device == q.device, f"{name} must be on the same CUDA device as q")

    def _vector(self, q, tensor, count, dtype, name) -> None:
        if tensor is None:
            return
        self._same_device(q, tensor, name)
        _check(tensor.dtype == dtype, f"{name} has incorrect dtype")
        _check(
            tensor.ndim == 1 and tensor.shape[0] == count and tensor.is_contiguous(),
            f"{name} must be a contiguous vector of length {count}",
        )

    @staticmethod
    def paged_layout(
        kv: torch.Tensor, bpt: int, inline_scale: bool, name: str
    ) -> tuple[int, int, int]:
        """parse_paged_kv_layout: (page_block_size, block stride, row stride)."""
        _check(kv.dtype == torch.uint8, f"{name} must be uint8")
        _check(2 <= kv.ndim <= 4, f"{name} must be 2D, 3D or 4D")
        _check(kv.stride(-1) == 1, f"{name} last dim must be contiguous")
        _check(kv.data_ptr() % 16 == 0, f"{name} data pointer must be 16B-aligned")
        page_stride = kv.stride(0)
        _check(page_stride % 16 == 0, f"{name} block stride must be 16B-aligned")
        if kv.ndim == 2:
            _check(
                kv.shape[1] % bpt == 0, f"{name} block width must be divisible by bytes_per_token"
            )
            _check(kv.shape[1] > 0, f"{name} page capacity must be positive")
            _check(
                page_stride >= kv.shape[1],
                f"{name} block stride is smaller than packed block width",
            )
            return kv.shape[1] // bpt, page_stride, bpt
        axis = 1
        if kv.ndim == 4:
            _check(kv.shape[1] == 1 or kv.shape[2] == 1, f"{name} requires singleton KV-head axis")
            axis = 2 if kv.shape[1] == 1 else 1
        rows, width, advance = kv.shape[axis], kv.shape[-1], kv.stride(axis)
        _check(rows > 0, f"{name} page capacity must be positive")
        _check(width >= bpt, f"{name} row width is smaller than bytes_per_token")
        _check(advance >= width, f"{name} token-axis stride is smaller than row width")
        if inline_scale:
            _check(advance % 16 == 0, f"{name} token-axis stride must be 16B-aligned")
        else:
            _check(advance == bpt, f"{name} footer-scale rows must stay tightly packed")
        _check(page_stride >= rows * advance, f"{name} block stride is smaller than page capacity")
        return rows, page_stride, advance

    def _indices(self, q, ix, t, name="indices") -> None:
        self._same_device(q, ix, name)
        _check(ix.dtype == torch.int32, f"{name} must be int32")
        _check(
            (ix.ndim == 2 or (ix.ndim == 3 and ix.shape[1] == 1))
            and ix.shape[0] == t
            and ix.shape[-1] > 0
            and ix.stride(-1) == 1
            and ix.stride(0) >= ix.shape[-1],
            "indices shape/stride mismatch",
        )

    def inspect_metadata(
        self,
        q,
        cache,
        indices,
        output,
        lengths,
        sink,
        extra,
        extra_indices,
        extra_lengths,
        lse,
        mid,
        mlse,
        model,
        extra_fp4,
        value_dim,
    ):
        _check(0 <= model < len(MODELS), "unknown cache format")
        fmt = self.format_info(model)
        _check(q.dtype == torch.bfloat16 and q.ndim == 3, "q must be [T, H, D] bf16")
        _check(output.dtype == torch.bfloat16, "output must be bf16")
        t, h = q.shape[0], q.shape[1]
        _check(t > 0 and 0 < h <= self.rules.decode_max_heads, "unsupported tokens/heads")
        _check(
            q.shape[2] == fmt["query_dim"] and value_dim in (0, fmt["value_dim"]),
            "query/d_v geometry mismatch",
        )
        _check(
            output.ndim == 3 and tuple(output.shape) == (t, h, fmt["value_dim"]),
            "output shape mismatch",
        )
        _check(
            (extra is None) == (extra_indices is None),
            "extra cache and indices must be provided together",
        )
        _check(extra_lengths is None or extra is not None, "extra lengths require cache")
        _check((mid is None) == (mlse is None), "scratch must be passed together")
        self._same_device(q, output, "output")
        self._vector(q, lengths, t, torch.int32, "topk_length")
        self._vector(q, extra_lengths, t, torch.int32, "extra_topk_length")
        self._vector(q, sink, h, torch.float32, "attn_sink")
        self._indices(q, indices, t)
        lse_stride = h
        if lse is not None:
            self._same_device(q, lse, "out_lse")
            _check(lse.dtype == torch.float32, "out_lse must be float32")
            _check(
                lse.ndim == 2
                and lse.shape[0] >= t
                and lse.shape[1] >= h
                and lse.stride(1) == 1
                and lse.stride(0) >= h,
                "out_lse capacity/stride mismatch",
            )
            lse_stride = lse.stride(0)
        for value, dtype in ((mid, torch.bfloat16), (mlse, torch.float32)):
            if value is None:
                continue
            self._same_device(q, value, "scratch")
            _check(value.dtype == dtype and value.is_contiguous(), "scratch layout mismatch")
            _check(value.data_ptr() % 16 == 0, "scratch must be 16B-aligned")
        main = self.paged_layout(cache, fmt["bytes_per_token"], fmt["inline_scale"], "kv_cache")
        ex = (0, 0, 0)
        if extra is not None:
            self._indices(q, extra_indices, t)
            bpt = fmt["fp4_bytes_per_token"] if extra_fp4 else fmt["bytes_per_token"]
            ex = self.paged_layout(extra, bpt, fmt["inline_scale"], "kv_cache")
        return [
            model,
            t,
            h,
            indices.shape[-1],
            extra_indices.shape[-1] if extra_indices is not None else 0,
            main[0],
            ex[0],
            main[1],
            ex[1],
            main[2],
            indices.stride(0),
            extra_indices.stride(0) if extra_indices is not None else 0,
            lse_stride,
            int(lengths is not None),
            int(extra_lengths is not None),
            int(sink is not None),
            int(bool(extra_fp4)),
            0,
        ]

    # --- resolve_attention (attention_resolve.cu) ---------------------------------------
    def resolve(
        self, m: Metadata, numeric: int, requested_cpb: int, caps: tuple[int, int]
    ) -> dict[str, Any]:
        rules = self.rules
        _check(
            0 <= m.model <= 5
            and m.tokens > 0
            and 0 < m.heads <= rules.decode_max_heads
            and m.topk > 0,
            "unsupported sparse-MLA attention metadata",
        )
        _check(
            m.extra_topk >= 0
            and m.topk <= 2**31 - 1 - 64 - m.extra_topk
            and m.tokens <= (2**31 - 1) // 8
            and (not m.has_extra_lengths or m.extra_topk > 0),
            "invalid attention capacity/length metadata",
        )
        _check(caps[0] > 0, "SM count must be positive")
        name = self._model(m.model)
        fmt = DSV4_FORMAT
        inline, dual, bpt = fmt["inline_scale"], m.extra_topk > 0, fmt["bytes_per_token"]
        _check(
            rules.main_page_supported(name, m.page_size), "unsupported sparse-MLA main page size"
        )
        _check(
            m.row_stride_bytes >= bpt
            and (m.row_stride_bytes % 16 == 0 if inline else m.row_stride_bytes == bpt),
            "invalid row stride",
        )
        _check(
            m.page_stride_bytes >= m.page_size * m.row_stride_bytes
            and m.page_stride_bytes % 16 == 0,
            "invalid main page stride",
        )
        _check(m.indices_stride >= m.topk and m.lse_stride >= m.heads, "invalid indices/LSE stride")
        _check(
            not m.extra_fp4 or (name == "DSV4_1" and dual), "extra FP4 requires DSV41 dual cache"
        )
        _check(not dual or name in ("DSV4", "DSV4_1"), "sparse-MLA has no dual-cache form")
        _check(
            not dual
            or (
                rules.main_page_supported(name, m.extra_page_size)
                and m.extra_indices_stride >= m.extra_topk
                and m.extra_page_stride_bytes >= m.extra_page_size * bpt
                and m.extra_page_stride_bytes % 16 == 0
            ),
            "invalid extra page layout",
        )
        _check(numeric != 3, "wrong module for NVFP4")
        _check(
            numeric != 2
            or (name == "DSV4_1" and ((m.variant == 0 and m.tokens <= 64) or m.variant == 1)),
            "full BF16 requires DSV41 decode or SG prefill",
        )
        tile = fmt["chunk_width"]
        facts: dict[str, Any] = {
            "numeric_route": NUMERIC[2 if numeric == 2 else 0],
            "variant": m.variant,
            "tokens": m.tokens,
            "row_stride_bytes": m.row_stride_bytes,
            "partial_bytes": 0,
            "lse_bytes": 0,
            "scratch_heads": 0,
            "scratch_split_stride": 0,
        }
        if m.variant == 0:
            chunks = math.ceil(m.topk / tile) + math.ceil(m.extra_topk / tile)
            head_blocks = math.ceil(m.heads / 16)
            cpb = self._wave_cpb(m.tokens, head_blocks, chunks, requested_cpb, caps[0])
            scratch_heads = decode_scratch_heads(m.heads)
            slots = m.tokens * scratch_heads * chunks
            facts.update(
                implementation="ordinary",
                merge="general",
                cpb=cpb,
                active_splits=math.ceil(chunks / cpb),
                chunk_capacity=chunks,
                scratch_split_stride=chunks,
                scratch_heads=scratch_heads,
                partial_bytes=slots * fmt["value_dim"] * 2,
                lse_bytes=slots * 4,
            )
        else:
            _check(
                1 <= m.variant <= 4 and m.topk % 64 == 0 and m.indices_stride == m.topk,
                "invalid sparse-MLA prefill variant/topk/indices",
            )
            _check(
                not dual or m.extra_indices_stride == m.extra_topk,
                "prefill extra indices must be dense",
            )
            _check(
                not inline or m.page_stride_bytes == m.page_size * m.row_stride_bytes,
                "inline prefill requires contiguous pages",
            )
            _check(
                rules.has_prefill_heads(name, m.variant, m.heads),
                "unsupported sparse-MLA prefill heads",
            )
            if m.variant == 1:
                _check(not dual or name == "DSV4_1", "unsupported SG dual cache")
                implementation = "sg"
            elif m.variant == 4:
                _check(not dual, "unsupported sparse-MLA swapAB metadata")
                implementation = "swapab"
            else:
                _check(
                    (name == "DSV4" and dual) if m.variant == 3 else not dual,
                    "sparse-MLA MG dual metadata mismatch",
                )
                full_tile = (
                    dual
                    and not m.has_lengths
                    and not m.has_extra_lengths
                    and m.extra_topk % 64 == 0
                )
                implementation = "fulltile" if full_tile else "mg"
                if name == "DSV4" and (dual or m.topk <= 256):
                    facts["numeric_route"] = NUMERIC[1]
                _check(
                    numeric != 0 or facts["numeric_route"] == NUMERIC[0],
                    "explicit FP8 forbids hybrid numerical route",
                )
            chunks = math.ceil(m.topk / 64) + math.ceil(m.extra_topk / 64)
            facts.update(
                implementation=implementation,
                merge="direct",
                cpb=1,
                active_splits=1,
                chunk_capacity=chunks,
            )
        # The kernels' shared memory (template constants) is not emulated: they are
        # built for sm_120a and sized for its opt-in shared memory (see the module doc).
        return facts

    @staticmethod
    def _wave_cpb(tokens: int, head_blocks: int, chunks: int, requested: int, sms: int) -> int:
        """resolve_wave_cpb: the requested chunks per block, or the best wave fit."""
        if 1 <= requested <= chunks:
            return requested
        _check(sms > 0, "SM count must be positive")
        cpb, best = 1, 2.0
        for candidate in range(1, chunks + 1):
            active = tokens * head_blocks * math.ceil(chunks / candidate)
            ceil_w = math.ceil(active / sms)
            if ceil_w > 3:
                continue
            gap = ceil_w - active / sms
            if gap < best - 1e-6 or (gap < best + 1e-6 and candidate > cpb):
                best, cpb = gap, candidate
        return cpb

    def resolve_attention(self, packed, numeric: int, cpb: int, sm_count: int, max_shared: int):
        m = Metadata.unpack(packed)
        _check(
            0 <= numeric <= 2 and cpb >= 0 and sm_count > 0 and max_shared > 0,
            "invalid resolver capabilities/route",
        )
        return Plan(m, self.resolve(m, numeric, cpb, (sm_count, max_shared)))

    def candidates(self, model, heads, topk, page, dual, extra_page, precision) -> list[int]:
        if not (
            0 <= model <= 5
            and 1 <= heads <= self.rules.decode_max_heads
            and topk >= 1
            and page >= 1
            and extra_page >= 0
        ):
            return []
        if precision != "default" and model != MODELS.index("DSV4_1"):
            return []
        numeric = {"bf16": 2, "fp8": 0}.get(precision, 1)
        bpt = DSV4_FORMAT["bytes_per_token"]
        base = Metadata(
            dict(
                zip(
                    FIELDS,
                    (
                        model,
                        1,
                        heads,
                        topk,
                        64 if dual else 0,
                        page,
                        extra_page if dual else 0,
                        (page * bpt + 15) // 16 * 16,
                        (extra_page * bpt + 15) // 16 * 16 if dual else 0,
                        bpt,
                        topk,
                        64 if dual else 0,
                        heads,
                        0,
                        0,
                        0,
                        0,
                        0,
                    ),
                )
            )
        )
        found = []
        for variant in range(5):
            try:
                self.resolve(base.with_variant(variant), numeric, 1, (1, 2**63))
                found.append(variant)
            except KernelAbort:
                pass
        return found

    def metadata_candidates(self, packed, numeric: int, sm_count: int, max_shared: int):
        _check(
            0 <= numeric <= 2 and sm_count > 0 and max_shared > 0,
            "invalid candidate capabilities/route",
        )
        m = Metadata.unpack(packed)
        result = {}
        for variant in range(5):
            if variant == 0 and m.tokens > 64:
                continue
            try:
                facts = self.resolve(m.with_variant(variant), numeric, 1, (sm_count, max_shared))
                result[variant] = facts["chunk_capacity"]
            except KernelAbort:
                pass
        return result

    # --- ExecuteAttentionPlan (attention_binding.cu) -------------------------------------
    def execute_attention(
        self,
        plan: Plan,
        q,
        cache,
        indices,
        mid,
        mlse,
        output,
        lse,
        scale,
        lengths,
        sink,
        extra,
        extra_indices,
        extra_lengths,
        lse_scale,
    ):
        m, facts = plan.metadata, plan.facts
        fmt = DSV4_FORMAT
        q_alignment = 2 if facts["numeric_route"] == NUMERIC[1] else 16
        self._decode_tensors(
            q, cache, indices, mid, mlse, output, lse, facts["chunk_capacity"], q_alignment
        )
        _check(
            q.shape[0] == m.tokens
            and q.shape[1] == m.heads
            and indices.shape[-1] == m.topk
            and indices.stride(0) == m.indices_stride
            and lse.stride(0) == m.lse_stride,
            "execution plan tensor metadata mismatch",
        )
        _check(q.shape[2] == fmt["query_dim"], "execution plan query width mismatch")
        layout = self.paged_layout(cache, fmt["bytes_per_token"], fmt["inline_scale"], "kv_cache")
        _check(
            layout == (m.page_size, m.page_stride_bytes, m.row_stride_bytes),
            "execution plan cache metadata mismatch",
        )
        _check(
            (lengths is not None) == bool(m.has_lengths)
            and (sink is not None) == bool(m.has_sink)
            and (extra_lengths is not None) == bool(m.has_extra_lengths)
            and (extra is not None) == (m.extra_topk > 0)
            and (extra_indices is not None) == (extra is not None),
            "execution plan optional metadata mismatch",
        )
        self._vector(q, lengths, m.tokens, torch.int32, "topk_length")
        self._vector(q, sink, m.heads, torch.float32, "attn_sink")
        self._vector(q, extra_lengths, m.tokens, torch.int32, "extra_topk_length")
        extra_pbs = 0
        if extra is not None:
            self._same_device(q, extra, "extra_kv_cache")
            self._same_device(q, extra_indices, "extra_indices")
            _check(extra_indices.dtype == torch.int32, "extra_indices must be int32")
            _check(
                extra_indices.ndim == 2
                and extra_indices.shape[0] == m.tokens
                and extra_indices.shape[1] == m.extra_topk
                and extra_indices.stride(0) == m.extra_indices_stride
                and extra_indices.stride(1) == 1,
                "execution plan extra indices mismatch",
            )
            ex = self.paged_layout(extra, fmt["bytes_per_token"], False, "extra_kv_cache")
            _check(
                ex[0] == m.extra_page_size and ex[1] == m.extra_page_stride_bytes,
                "execution plan extra cache mismatch",
            )
            extra_pbs = ex[0]
        if m.variant == 0:
            self._scratch_capacity(q, mid, mlse, facts["chunk_capacity"])
            kernel = "cutlass-decode"
        else:
            _check(
                indices.is_contiguous()
                and (extra_indices is None or extra_indices.is_contiguous()),
                "prefill execution indices must be contiguous",
            )
            # dispatch_prefill: DSV4 runs MG (single) or MG dual (any extra page block:
            # 2, or the runtime-page instance); a head count outside the table is not
            # launched ("prefill execution plan route mismatch").
            _check(
                self.rules.has_prefill_heads("DSV4", m.variant, m.heads)
                and facts["implementation"] in ("mg", "fulltile"),
                "prefill execution plan route mismatch",
            )
            kernel = "cutlass-prefill"
        self.emulator.calls.append(
            Call(
                kernel,
                m.tokens,
                m.heads,
                m.topk,
                m.extra_topk,
                extra_pbs,
                indices,
                lengths,
                facts["chunk_capacity"] if m.variant == 0 else None,
                kv_cache=cache,
            )
        )
        self.emulator._stand_in(
            q,
            cache,
            indices,
            output,
            lse,
            scale,
            lengths,
            sink,
            extra,
            extra_indices,
            extra_lengths,
        )

    def _decode_tensors(self, q, cache, indices, mid, mlse, output, lse, splits, q_alignment):
        """check_decode_tensors (attention_validation.h)."""
        _check(q.data_ptr() % q_alignment == 0, f"q must be {q_alignment}B-aligned")
        _check(output.data_ptr() % 16 == 0, "output must be 16B-aligned")
        _check(q.dtype == torch.bfloat16 and q.ndim == 3, "q must be [T, H, D] bf16")
        tokens, heads = q.shape[0], q.shape[1]
        _check(
            tokens > 0 and 0 < heads <= self.rules.decode_max_heads and splits > 0,
            "decode requires positive tokens/splits and heads <= 128",
        )
        for tensor, name in (
            (cache, "kv_cache"),
            (indices, "indices"),
            (mid, "mid_out"),
            (mlse, "mid_lse"),
            (output, "output"),
            (lse, "out_lse"),
        ):
            self._same_device(q, tensor, name)
        _check(cache.dtype == torch.uint8, "kv_cache must be uint8")
        _check(
            output.dtype == torch.bfloat16
            and mid.dtype == torch.bfloat16
            and mlse.dtype == torch.float32,
            "output/mid_out bf16, mid_lse f32",
        )
        _check(mid.data_ptr() % 16 == 0, "mid_out must be 16B-aligned")
        _check(mlse.data_ptr() % 16 == 0, "mid_lse must be 16B-aligned")
        _check(
            indices.dtype == torch.int32 and lse.dtype == torch.float32,
            "indices int32, out_lse f32",
        )
        _check(
            output.ndim == 3 and tuple(output.shape) == (tokens, heads, 512),
            "output shape mismatch",
        )
        _check(
            lse.ndim == 2
            and tuple(lse.shape) == (tokens, heads)
            and lse.stride(1) == 1
            and lse.stride(0) >= heads,
            "out_lse shape/stride mismatch",
        )
        _check(
            indices.ndim == 2 or (indices.ndim == 3 and indices.shape[1] == 1),
            "indices must be [T, K] or [T, 1, K]",
        )
        _check(indices.shape[0] == tokens, "indices leading dimension must match num_tokens")
        _check(
            indices.shape[-1] > 0
            and indices.stride(-1) == 1
            and indices.stride(0) >= indices.shape[-1],
            "indices shape/stride mismatch",
        )

    @staticmethod
    def _scratch_capacity(q, mid, mlse, splits) -> None:
        """check_decode_scratch_capacity."""
        tokens, heads = q.shape[0], q.shape[1]
        scratch = decode_scratch_heads(heads)
        _check(
            mid.numel() >= tokens * scratch * splits * 512,
            "mid_out scratch capacity must cover padded heads and allocated splits",
        )
        _check(
            mlse.numel() >= tokens * scratch * splits,
            "mid_lse scratch capacity must cover padded heads and allocated splits",
        )


@dataclass
class EnvelopeEmulator(Emulator):
    """Emulator for flashinfer >= 0.7: the compiled module and the device queries
    replaced, the Python planner and sglang's code real (the Triton fallback and the
    page split as in kernels.Emulator)."""

    envelope: EnvelopeRules | None = None

    def install(self) -> EnvelopeEmulator:
        from flashinfer.mla._sparse_mla_sm120 import _api, _calibration, _execution, _prepared
        from sglang.kernels.ops.attention import flash_mla_sm120_triton as tri

        assert self.envelope is not None, "EnvelopeEmulator needs envelope= (its rules)"
        module = CompiledModule(self.envelope, self)
        loader = lambda: module  # noqa: E731 (what build_and_load() returned, cached)
        self._swap(_execution, "get_sparse_mla_sm120_module", loader)
        self._swap(_prepared, "get_sparse_mla_sm120_module", loader)
        self._swap(_api, "_get_sparse_mla_sm120_decode_module", loader)
        # The device: what torch.cuda would report for the GPU the census stands for,
        # serving eagerly (no CUDA graph being captured; graph replays run no Python).
        self._swap(_prepared, "device_caps", lambda device: DEVICE_CAPS)
        self._swap(_calibration, "_device_key", lambda device: f"0:{DEVICE_NAME}")
        self._swap(_calibration, "_target_capturing", lambda device: False)
        self._swap(torch.cuda, "is_current_stream_capturing", lambda: False)
        self._swap(
            tri, "flash_mla_sparse_decode_triton", self._triton(tri.flash_mla_sparse_decode_triton)
        )
        if not self.compute:
            from sglang.kernels.ops.attention import flash_mla_sm120 as sg

            self._swap_split_kernels(sg)
        self._forget_plans()
        return self

    def uninstall(self) -> None:
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)
        self._forget_plans()

    @staticmethod
    def _forget_plans() -> None:
        """The planner memoises what the compiled module answered: start clean."""
        from flashinfer.mla._sparse_mla_sm120 import _execution, _policy, _prepared

        for cached in (
            _execution.resolve_model_type,
            _execution.format_info,
            _execution.main_page_sizes,
            _execution.metadata_candidates,
            _policy._candidates,
            _policy._decode_scratch_heads,
        ):
            cached.cache_clear()
        _prepared._functional_plans.clear()
