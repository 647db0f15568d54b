"""Numerical equivalence of the patched dispatch, on CPU or on a CUDA GPU.

Builds a DeepSeek-V4 FP8 KV cache in sglang's real page layout (128-token SWA
pages: 576 data bytes a token, then 8 scale bytes a token), then compares:

- the unpadded reference: sglang's PyTorch sparse-MLA (`_sm120_sparse_decode_fwd`)
  on the original 128-token pages and the original indices;
- the patched call: `_flash_mla_flashinfer` with the page split run for real
  (a Triton kernel), the indices padded by the patch, and the reference
  arithmetic standing in for the CUTLASS kernel (kernels.Emulator, compute mode);
- the Triton fallback: sglang's Triton sparse-decode kernel, for real.

On CPU, TRITON_INTERPRET=1 must be set before triton is imported; the Triton
decode kernel's autotune list is cut to one config (autotuning needs a driver).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

NOPE, ROPE, SCALES = 448, 64, 7
DATA_BYTES, SCALE_BYTES = 576, 8


def make_kv_cache(pages: int, page: int, device, seed: int = 0) -> torch.Tensor:
    """A [pages, page, 1, 584] uint8 view over rows laid out as sglang stores them."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    row = -(-page * (DATA_BYTES + SCALE_BYTES) // DATA_BYTES) * DATA_BYTES  # 576-aligned
    buf = torch.zeros(pages, row, dtype=torch.uint8)
    data = buf[:, : page * DATA_BYTES].view(pages, page, DATA_BYTES)
    nope = (torch.randn(pages, page, NOPE, generator=gen) * 0.5).to(torch.float8_e4m3fn)
    data[:, :, :NOPE] = nope.view(torch.uint8)
    rope = torch.randn(pages, page, ROPE, generator=gen).to(torch.bfloat16)
    data[:, :, NOPE:] = rope.view(torch.uint8).view(pages, page, 2 * ROPE)
    scales = buf[:, page * DATA_BYTES : page * (DATA_BYTES + SCALE_BYTES)].view(pages, page, 8)
    # UE8M0 exponents around 2^0, as a quantizer of unit-scale activations writes.
    scales[:, :, :SCALES] = torch.randint(
        124, 130, (pages, page, SCALES), generator=gen, dtype=torch.uint8
    )
    buf = buf.to(device)
    return buf.as_strided(
        (pages, page, 1, DATA_BYTES + SCALE_BYTES),
        (row, DATA_BYTES + SCALE_BYTES, DATA_BYTES + SCALE_BYTES, 1),
    )


def _indices(gen, tokens: int, width: int, valid: int, slots: int):
    """`valid` or fewer distinct real slots a token, then -1 up to `width`."""
    indices = torch.full((tokens, 1, width), -1, dtype=torch.int32)
    lengths = torch.randint(
        max(1, valid // 2), valid + 1, (tokens,), generator=gen, dtype=torch.int32
    )
    for t in range(tokens):
        indices[t, 0, : lengths[t]] = torch.randperm(slots, generator=gen)[: lengths[t]].to(
            torch.int32
        )
    return indices, lengths


def make_call(
    tokens: int,
    heads: int,
    width: int,
    valid: int,
    pages: int,
    page: int,
    device,
    seed: int = 1,
    with_topk_length: bool = True,
    extra: tuple[int, int, int] | None = None,
) -> dict:
    """A DSpark-draft-like call: `valid` real slots then -1 up to `width`.

    extra=(width, valid, page) adds a compressed (C4/C128-like) extra cache.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    indices, lengths = _indices(gen, tokens, width, valid, pages * page)
    extra_args: dict[str, torch.Tensor | None] = dict(
        extra_k_cache=None, extra_indices=None, extra_topk_length=None
    )
    if extra is not None:
        e_width, e_valid, e_page = extra
        e_pages = max(2, -(-e_valid // e_page) * 2)
        e_indices, e_lengths = _indices(gen, tokens, e_width, e_valid, e_pages * e_page)
        extra_args = dict(
            extra_k_cache=make_kv_cache(e_pages, e_page, device, seed + 100),
            extra_indices=e_indices.to(device),
            extra_topk_length=e_lengths.to(device),
        )
    return dict(
        q=(torch.randn(tokens, 1, heads, 512, generator=gen) * 0.5).to(torch.bfloat16).to(device),
        k_cache=make_kv_cache(pages, page, device, seed),
        indices=indices.to(device),
        topk_length=lengths.to(device) if with_topk_length else None,
        attn_sink=torch.randn(heads, generator=gen).to(device),
        head_dim_v=512,
        softmax_scale=512**-0.5,
        **extra_args,
    )


def reference(call: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpadded reference output [T, H, 512] and sink-folded LSE [T, H]."""
    from sm12x.selftest.kernels import reference_attention

    return reference_attention(
        call["q"].squeeze(1),
        call["k_cache"],
        call["indices"],
        call["topk_length"],
        call["attn_sink"],
        call["softmax_scale"],
        call["extra_k_cache"],
        call["extra_indices"],
        call["extra_topk_length"],
    )


def triton_direct(call: dict) -> tuple[torch.Tensor, torch.Tensor]:
    from sglang.kernels.ops.attention.flash_mla_sm120_triton import flash_mla_sparse_decode_triton

    out, lse = flash_mla_sparse_decode_triton(
        call["q"],
        call["k_cache"],
        call["indices"],
        call["topk_length"],
        call["attn_sink"],
        call["head_dim_v"],
        call["softmax_scale"],
        call["extra_k_cache"],
        call["extra_indices"],
        call["extra_topk_length"],
    )
    return out.squeeze(1), lse.reshape(out.shape[0], out.shape[2])


def patched(call: dict) -> torch.Tensor:
    from sglang.kernels.ops.attention.flash_mla_sm120 import _flash_mla_flashinfer

    out, _ = _flash_mla_flashinfer(
        call["q"],
        call["k_cache"],
        call["indices"],
        call["topk_length"],
        call["attn_sink"],
        call["head_dim_v"],
        call["softmax_scale"],
        call["extra_k_cache"],
        call["extra_indices"],
        call["extra_topk_length"],
    )
    return out.squeeze(1)


@contextlib.contextmanager
def dispatch_patch(on: bool):
    """Turn the patch on or off in the live module, as SGLANG_SM120_FLASHMLA_TOPK_PAD
    does for a fresh process."""
    from sglang.kernels.ops.attention import flash_mla_sm120 as module

    saved = module._SM12X_TOPK_PAD
    module._SM12X_TOPK_PAD = on
    try:
        yield
    finally:
        module._SM12X_TOPK_PAD = saved


def padded(call: dict, width: int) -> dict:
    """The same call with indices right-padded with -1 to `width`."""
    extra = width - call["indices"].shape[-1]
    return {**call, "indices": torch.nn.functional.pad(call["indices"], (0, extra), value=-1)}


def trim_triton_autotune() -> list:
    """One config for the Triton decode kernel (autotuning benchmarks on a driver,
    and one config makes runs of different widths tile alike). Returns the old list."""
    from sglang.kernels.ops.attention import flash_mla_sm120_triton as tri

    kernel = tri._tiled_sparse_decode_kernel
    previous = kernel.configs
    kernel.configs = previous[:1]
    kernel.cache.clear()
    return previous


def restore_triton_autotune(configs: list) -> None:
    from sglang.kernels.ops.attention import flash_mla_sm120_triton as tri

    tri._tiled_sparse_decode_kernel.configs = configs
    tri._tiled_sparse_decode_kernel.cache.clear()


# bf16 results: two units in the last place (2 x 2^-7), plus a floor near zero.
BF16_RTOL, BF16_ATOL = 1.6e-2, 1e-2


@dataclass
class Diff:
    """How far two results are apart. Non-finite values are never skipped: a NaN in
    either, or an infinity the other does not have at the same place, makes
    max_abs infinite and close/exact false (an all-NaN output must not pass a
    comparison with its reference)."""

    name: str
    max_abs: float  # inf when non-finite values disagree
    exact: bool  # bitwise equal, infinities included
    close: bool  # within BF16_RTOL/BF16_ATOL everywhere, no NaN
    nonfinite: int = 0  # places where either is NaN, or the infinities differ

    @classmethod
    def of(cls, name: str, a: torch.Tensor, b: torch.Tensor) -> Diff:
        a, b = a.float().cpu(), b.float().cpu()
        if a.shape != b.shape:
            raise ValueError(f"{name}: shapes differ, {tuple(a.shape)} vs {tuple(b.shape)}")
        finite = torch.isfinite(a) & torch.isfinite(b)
        same_infinity = torch.isinf(a) & (a == b)
        nonfinite = int((~finite & ~same_infinity).sum())
        diff = (a - b).abs()[finite]
        max_abs = float(diff.max()) if diff.numel() else 0.0
        return cls(
            name,
            float("inf") if nonfinite else max_abs,
            bool(torch.equal(a, b)),
            bool(torch.allclose(a, b, rtol=BF16_RTOL, atol=BF16_ATOL, equal_nan=False)),
            nonfinite,
        )
