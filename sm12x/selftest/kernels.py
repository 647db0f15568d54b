"""Emulators for the kernels a CPU cannot run, enforcing the real launchers' rules.

Everything above the kernels stays real: sglang's patched `_flash_mla_flashinfer`
and flashinfer's Python dispatch (`_sparse_mla_sm120_paged_attention`, its
`_decode_dsv4_dispatchable` routing and scratch checks). Replaced are only:

- the compiled prefill orchestrator (`SparseMlaSm120PagedAttention`, reached
  through `gen_sparse_mla_sm120_module`): its input ICHECKs, the
  `num_tokens > 64` check and `sparse_mla_prefill_dispatch`'s table, parsed
  from the installed wheel's csrc/sparse_mla_sm120_prefill.cu;
- the DSV4 decode launcher (`sparse_mla_sm120_decode_dsv4`): its (heads, topk)
  instantiations parsed from csrc/sparse_mla_sm120_decode_dsv4.cu, page block
  64, and the split-K scratch it writes;
- sglang's Triton sparse-decode kernel (`flash_mla_sparse_decode_triton`),
  recorded, or run for real under TRITON_INTERPRET=1 in compute mode;
- in record mode only, the two Triton kernels of sglang's 128 -> 64 page split
  (`_page_split_kernel`, and `_page_mark_kernel` where sglang >= 0.5.17 copies
  only the pages the indices touch): torch copies with the kernels' launch
  rules, so the real `_split_kv_pages_to_64` around them runs on any CPU
  (tests/patch/numerics_probe.py proves them byte-equal to the real kernels
  under TRITON_INTERPRET=1). In compute mode the real kernels run.

A rule the real code enforces with TVM_FFI_ICHECK aborts the server process;
here it raises KernelAbort carrying the same message.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sm12x.selftest import csrc

BYTES_PER_TOKEN_DSV4 = 584  # 448 fp8 nope + 64 bf16 rope + 8 scale bytes
D_QK_DSV4 = 512
BI = 64  # candidates per split-K partition


class KernelAbort(RuntimeError):
    """A check that aborts the real server (TVM_FFI_ICHECK), with its message."""


@dataclass
class Call:
    """One kernel launch as the emulator saw it."""

    kernel: str  # "cutlass-decode" | "cutlass-prefill" | "triton"
    num_tokens: int
    num_heads: int
    topk: int
    extra_topk: int
    extra_pbs: int
    indices: torch.Tensor
    topk_length: torch.Tensor | None
    scratch_splits: int | None = None
    kv_cache: torch.Tensor | None = None  # the main cache the kernel got (after any split)


@dataclass
class Rules:
    """What the installed flashinfer's compiled code accepts (from its csrc)."""

    prefill: csrc.PrefillTable
    decode_pairs: frozenset[tuple[int, int]]
    decode_page_block: int
    prefill_min_tokens: int  # the orchestrator requires num_tokens > this

    @classmethod
    def from_flashinfer(cls, package_dir: Path) -> Rules:
        src = csrc.csrc_dir(package_dir)
        decode_cu = src / "sparse_mla_sm120_decode_dsv4.cu"
        return cls(
            prefill=csrc.parse_prefill(src / "sparse_mla_sm120_prefill.cu"),
            decode_pairs=csrc.parse_decode_dsv4(decode_cu),
            decode_page_block=csrc.decode_page_block_size(decode_cu),
            prefill_min_tokens=csrc.decode_orchestrator_min_tokens(src / "sparse_mla_sm120.cu"),
        )


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise KernelAbort(message)


def page_block_size(kv: torch.Tensor, name: str) -> int:
    """parse_paged_kv_layout of sparse_mla_sm120.cu for DSV4 (584 bytes a token)."""
    if kv.ndim == 2:
        _check(kv.shape[1] % BYTES_PER_TOKEN_DSV4 == 0, f"{name} 2D block width not divisible")
        return kv.shape[1] // BYTES_PER_TOKEN_DSV4
    _check(kv.shape[-1] == BYTES_PER_TOKEN_DSV4, f"{name} last dim must be bytes_per_token=584")
    if kv.ndim == 3:
        return kv.shape[1]
    _check(kv.ndim == 4, f"{name} must be 2D, 3D, HND or NHD")
    if kv.shape[1] == 1:
        return kv.shape[2]
    _check(kv.shape[2] == 1, f"{name} 4D form must have singleton KV-head axis")
    return kv.shape[1]


def _dense_indices(idx: torch.Tensor, name: str, num_tokens: int) -> int:
    """check_dense_indices_2d_or_s_q_3d of sparse_mla_sm120.cu."""
    _check(idx.dtype == torch.int32, f"{name} must be int32")
    _check(idx.ndim in (2, 3), f"{name} must be [num_tokens, topk] or [num_tokens, 1, topk]")
    width = idx.shape[-1]
    _check(idx.shape[0] == num_tokens, f"{name} leading dimension must match num_tokens")
    if idx.ndim == 3:
        _check(idx.shape[1] == 1, f"{name} middle dimension must be singleton")
    _check(idx.stride(-1) == 1, f"{name} last dimension must be contiguous")
    _check(idx.stride(0) == width, f"{name} must be dense row-major over the token dimension")
    return width


def _common_inputs(q, indices, output, out_lse, topk_length, attn_sink) -> tuple[int, int, int]:
    _check(
        q.dtype == torch.bfloat16 and q.ndim == 3, "q must be [num_tokens, num_heads, d_qk] bf16"
    )
    num_tokens, num_heads, d_qk = q.shape
    _check(d_qk == D_QK_DSV4, f"Unsupported d_qk={d_qk} for DSV4")
    topk = _dense_indices(indices, "indices", num_tokens)
    _check(0 < num_heads <= 128, "num_heads must be in (0, 128]")
    _check(
        tuple(output.shape) == (num_tokens, num_heads, 512) and output.dtype == torch.bfloat16,
        "output must be [num_tokens, num_heads, 512] bf16",
    )
    _check(
        tuple(out_lse.shape) == (num_tokens, num_heads) and out_lse.dtype == torch.float32,
        "out_lse must be [num_tokens, num_heads] f32",
    )
    if topk_length is not None:
        _check(
            topk_length.dtype == torch.int32 and tuple(topk_length.shape) == (num_tokens,),
            "topk_length must be [num_tokens] int32",
        )
    if attn_sink is not None:
        _check(
            attn_sink.dtype == torch.float32 and tuple(attn_sink.shape) == (num_heads,),
            "attn_sink must be [num_heads] f32",
        )
    return num_tokens, num_heads, topk


def reference_attention(
    q,
    kv,
    indices,
    topk_length,
    attn_sink,
    scale,
    extra_kv=None,
    extra_indices=None,
    extra_topk_length=None,
):
    """sglang's own PyTorch sparse-MLA reference (`_sm120_sparse_decode_fwd`).

    Stands in for the CUTLASS kernels' arithmetic: output [T, H, 512] bf16 and
    the flashinfer-convention LSE [T, H] (sink folded in, log(e^lse + e^sink)).
    """
    from sglang.kernels.ops.attention.flash_mla_sm120 import _sm120_sparse_decode_fwd

    def as_3d(x):
        return None if x is None else (x if x.ndim == 3 else x.unsqueeze(1))

    out, lse = _sm120_sparse_decode_fwd(
        q.unsqueeze(1),
        kv,
        as_3d(indices),
        topk_length,
        attn_sink,
        512,
        scale,
        extra_kv,
        as_3d(extra_indices),
        extra_topk_length,
    )
    lse = lse.reshape(q.shape[0], q.shape[1])
    if attn_sink is not None:
        lse = torch.logaddexp(lse, attn_sink.view(1, -1).expand_as(lse))
    return out.squeeze(1), lse


class _Launch:
    """What `kernel[grid](*args)` needs: indexing by the grid, then a call."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __getitem__(self, grid):
        return lambda *args: self.fn(grid, *args)


@dataclass
class Emulator:
    """Installs the emulated kernels into the live flashinfer/sglang modules."""

    rules: Rules
    # What stands in for the CUTLASS arithmetic: "" records only; "reference"
    # runs sglang's PyTorch reference (exact, but syncs: not graph-capturable);
    # "triton" runs sglang's Triton sparse-decode kernel on the same (padded)
    # arguments, which CUDA graphs can capture. The Triton fallback itself is
    # run for real whenever this is not "".
    compute: str = ""
    calls: list[Call] = field(default_factory=list)
    _saved: list[tuple[Any, str, Any]] = field(default_factory=list)
    _real_triton: Callable | None = None
    _mark_blocked: bool = False

    # --- the compiled prefill orchestrator ---------------------------------
    def _orchestrator(
        self,
        q,
        kv_cache,
        indices,
        output,
        out_lse,
        sm_scale,
        model_type,
        topk_length,
        attn_sink,
        extra_kv_cache,
        extra_indices,
        extra_topk_length,
    ):
        num_tokens, num_heads, topk = _common_inputs(
            q, indices, output, out_lse, topk_length, attn_sink
        )
        _check(kv_cache.dtype == torch.uint8, "kv_cache must be uint8")
        pbs = page_block_size(kv_cache, "kv_cache")
        _check(
            extra_indices is None or extra_kv_cache is not None,
            "extra_indices requires extra_kv_cache",
        )
        extra_topk, extra_pbs = 0, 0
        if extra_kv_cache is not None:
            _check(extra_indices is not None, "extra_kv_cache requires extra_indices")
            _check(extra_kv_cache.dtype == torch.uint8, "extra_kv_cache must be uint8")
            extra_pbs = page_block_size(extra_kv_cache, "extra_kv_cache")
            extra_topk = _dense_indices(extra_indices, "extra_indices", num_tokens)
        _check(
            num_tokens > self.rules.prefill_min_tokens,
            f"Check failed: num_tokens > {self.rules.prefill_min_tokens} ({num_tokens} vs. "
            f"{self.rules.prefill_min_tokens}): Decode (num_tokens <= 64) must go through "
            f"sparse_mla_sm120_decode_dsv3_2 or sparse_mla_sm120_decode_dsv4; "
            f"got num_tokens={num_tokens}",
        )
        # The DSV4 prefill kernels are instantiated for a main page block of 64.
        accepted = pbs == 64 and self.rules.prefill.accepts(
            num_heads, topk, extra_pbs if extra_kv_cache is not None else None
        )
        _check(
            accepted,
            "Unsupported sparse-MLA prefill configuration: model=DSV4 "
            f"num_heads={num_heads} topk={topk} page_block_size={pbs} "
            f"topk_extra={extra_topk} extra_page_block_size={extra_pbs}",
        )
        self.calls.append(
            Call(
                "cutlass-prefill",
                num_tokens,
                num_heads,
                topk,
                extra_topk,
                extra_pbs,
                indices,
                topk_length,
                kv_cache=kv_cache,
            )
        )
        self._stand_in(
            q,
            kv_cache,
            indices,
            output,
            out_lse,
            sm_scale,
            topk_length,
            attn_sink,
            extra_kv_cache,
            extra_indices,
            extra_topk_length,
        )

    # --- the DSV4 decode launcher -------------------------------------------
    def _decode(
        self,
        q,
        kv_cache,
        indices,
        mid_out,
        mid_lse,
        output,
        out_lse,
        sm_scale,
        *,
        topk_length=None,
        attn_sink=None,
        extra_kv_cache=None,
        extra_indices=None,
        extra_topk_length=None,
        chunks_per_block=None,
    ):
        num_tokens, num_heads, topk = _common_inputs(
            q, indices, output, out_lse, topk_length, attn_sink
        )
        pbs = page_block_size(kv_cache, "kv_cache")
        _check(
            pbs == self.rules.decode_page_block,
            f"decode-dsv4 needs page_block_size {self.rules.decode_page_block}, got {pbs}",
        )
        _check(
            (num_heads, topk) in self.rules.decode_pairs,
            f"decode-dsv4 has no instance for num_heads={num_heads} topk={topk}",
        )
        extra_topk, extra_pbs = 0, 0
        if extra_kv_cache is not None:
            extra_pbs = page_block_size(extra_kv_cache, "extra_kv_cache")
            extra_topk = _dense_indices(extra_indices, "extra_indices", num_tokens)
        splits = math.ceil(topk / BI) + math.ceil(extra_topk / BI)
        _check(
            tuple(mid_out.shape) == (num_tokens, num_heads, splits, 512),
            f"mid_out {tuple(mid_out.shape)} != [T, H, {splits}, 512]",
        )
        _check(
            tuple(mid_lse.shape) == (num_tokens, num_heads, splits),
            f"mid_lse {tuple(mid_lse.shape)} != [T, H, {splits}]",
        )
        self.calls.append(
            Call(
                "cutlass-decode",
                num_tokens,
                num_heads,
                topk,
                extra_topk,
                extra_pbs,
                indices,
                topk_length,
                splits,
                kv_cache=kv_cache,
            )
        )
        self._stand_in(
            q,
            kv_cache,
            indices,
            output,
            out_lse,
            sm_scale,
            topk_length,
            attn_sink,
            extra_kv_cache,
            extra_indices,
            extra_topk_length,
        )
        return output

    def _stand_in(
        self,
        q,
        kv_cache,
        indices,
        output,
        out_lse,
        sm_scale,
        topk_length,
        attn_sink,
        extra_kv_cache,
        extra_indices,
        extra_topk_length,
    ):
        """The CUTLASS kernel's arithmetic, by the configured stand-in."""
        if self.compute == "reference":
            out, lse = reference_attention(
                q,
                kv_cache,
                indices,
                topk_length,
                attn_sink,
                sm_scale,
                extra_kv_cache,
                extra_indices,
                extra_topk_length,
            )
        elif self.compute == "triton":
            out, lse = self._real_triton(
                q.unsqueeze(1),
                kv_cache,
                indices,
                topk_length,
                attn_sink,
                512,
                sm_scale,
                extra_kv_cache,
                extra_indices,
                extra_topk_length,
            )
            out, lse = out.squeeze(1), lse.reshape(output.shape[0], output.shape[1])
        else:
            return
        output.copy_(out)
        out_lse.copy_(lse)

    # --- sglang's Triton sparse-decode kernel -------------------------------
    def _triton(self, real: Callable):
        self._real_triton = real

        def triton(
            q,
            k_cache,
            indices,
            topk_length,
            attn_sink,
            head_dim_v,
            softmax_scale,
            extra_k_cache=None,
            extra_indices=None,
            extra_topk_length=None,
        ):
            # What _run_triton_sparse_decode assumes: q [B, 1, H, 512] bf16, a
            # paged cache of 584-byte tokens [pages, page, 1, 584], int32 indices.
            _check(q.ndim == 4 and q.shape[-1] == D_QK_DSV4, "Triton decode needs q [B,1,H,512]")
            _check(
                k_cache.ndim == 4 and k_cache.shape[-1] == BYTES_PER_TOKEN_DSV4,
                "Triton decode needs k_cache [pages, page, 1, 584]",
            )
            _check(indices.dtype == torch.int32, "Triton decode needs int32 indices")
            batch, _, heads, _ = q.shape
            extra_topk = extra_indices.shape[-1] if extra_indices is not None else 0
            extra_pbs = extra_k_cache.shape[1] if extra_k_cache is not None else 0
            self.calls.append(
                Call(
                    "triton",
                    batch,
                    heads,
                    indices.shape[-1],
                    extra_topk,
                    extra_pbs,
                    indices,
                    topk_length,
                    kv_cache=k_cache,
                )
            )
            if self.compute:
                return real(
                    q,
                    k_cache,
                    indices,
                    topk_length,
                    attn_sink,
                    head_dim_v,
                    softmax_scale,
                    extra_k_cache,
                    extra_indices,
                    extra_topk_length,
                )
            # Record mode: shapes matter, values do not (empty: no 512 MB memset
            # for an 8192-token prefill chunk).
            out = torch.empty(batch, 1, heads, head_dim_v, dtype=torch.bfloat16, device=q.device)
            return out, torch.empty(batch, heads, 1, device=q.device)

        return triton

    # --- sglang's 128 -> 64 page split (record mode) -------------------------
    # Launched as kernel[grid](*args); the argument lists are those of
    # _split_kv_pages_to_64 (0.5.16: no mask; >= 0.5.17: mask and HAS_MASK).
    def _page_mark(self, grid, indices, mask, n_idx, src_pbs, block):
        _check(
            indices.dtype == torch.int32 and indices.ndim == 1 and indices.is_contiguous(),
            "page mark needs flat contiguous int32 indices",
        )
        _check(n_idx == indices.numel(), f"page mark N_idx {n_idx} != {indices.numel()}")
        # Programs cover the indices one each (0.5.17) or BLOCK each (0.5.23,
        # `offs = pid * BLOCK + tl.arange(0, BLOCK)`): a short grid leaves pages unmarked.
        span = block if self._mark_blocked else 1
        _check(
            len(grid) == 1 and grid[0] == -(-n_idx // span),
            f"page mark grid {tuple(grid)} != ({-(-n_idx // span)},) for {n_idx} indices "
            f"and {span} per program",
        )
        valid = indices[indices >= 0].long()
        # The real kernel stores mask[idx // SRC_PBS] unchecked: an index past
        # the pool would be an out-of-bounds write on the GPU.
        _check(
            bool((valid < mask.numel() * src_pbs).all()),
            "page mark: an index points past the SWA pool",
        )
        mask[valid // src_pbs] = 1

    @staticmethod
    def _page_split(
        grid,
        src,
        dst,
        n_pages,
        src_stride0,
        dst_stride0,
        data_per_sub,
        scale_per_sub,
        src_scale_off,
        dst_scale_off,
        ratio,
        block,
        mask=None,
        has_mask=False,
    ):
        _check(src.dtype == dst.dtype == torch.uint8, "page split copies bytes")
        _check(
            tuple(grid) == (n_pages * ratio,),
            f"page split grid {tuple(grid)} != ({n_pages * ratio},)",
        )
        _check(
            src.shape[0] == n_pages and src.stride(0) == src_stride0,
            "page split source is not [pages, stride0]",
        )
        _check(
            dst.shape[0] >= n_pages * ratio and dst.stride(0) == dst_stride0,
            "page split output is not [pages * ratio, dst_stride0]",
        )
        pages = range(n_pages)
        if has_mask:
            pages = mask[:n_pages].nonzero().flatten().tolist()
        for page in pages:
            for sub in range(ratio):
                row = dst[page * ratio + sub]
                row[:data_per_sub] = src[page, sub * data_per_sub : (sub + 1) * data_per_sub]
                start = src_scale_off + sub * scale_per_sub
                row[dst_scale_off : dst_scale_off + scale_per_sub] = src[
                    page, start : start + scale_per_sub
                ]

    # --- installation -------------------------------------------------------
    def _swap_split_kernels(self, sg: Any) -> None:
        """The page split's Triton kernels, as torch copies under their launch rules."""
        self._swap(sg, "_page_split_kernel", _Launch(self._page_split))
        if hasattr(sg, "_page_mark_kernel"):
            source = getattr(sg._page_mark_kernel, "src", "") or ""
            self._mark_blocked = "pid * BLOCK" in source
            self._swap(sg, "_page_mark_kernel", _Launch(self._page_mark))

    def _swap(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def install(self) -> Emulator:
        from flashinfer.mla import _sparse_mla_sm120 as fi
        from sglang.kernels.ops.attention import flash_mla_sm120_triton as tri

        emulator = self

        class _Module:  # what gen_sparse_mla_sm120_module().build_and_load() returns
            def sparse_mla_sm120_paged_attention(self, *args):
                emulator._orchestrator(*args)

        class _Spec:
            def build_and_load(self):
                return _Module()

        self._swap(fi, "gen_sparse_mla_sm120_module", lambda: _Spec())
        self._swap(fi, "sparse_mla_sm120_decode_dsv4", self._decode)
        self._swap(
            tri, "flash_mla_sparse_decode_triton", self._triton(tri.flash_mla_sparse_decode_triton)
        )
        if not self.compute:
            from sglang.kernels.ops.attention import flash_mla_sm120 as sg

            self._swap_split_kernels(sg)
        fi.get_sparse_mla_sm120_module.cache_clear()
        return self

    def uninstall(self) -> None:
        from flashinfer.mla import _sparse_mla_sm120 as fi

        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)
        fi.get_sparse_mla_sm120_module.cache_clear()

    def __enter__(self) -> Emulator:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.uninstall()
