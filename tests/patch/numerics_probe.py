"""Run in a subprocess by test_numerics.py (TRITON_INTERPRET=1 must precede triton).

Prints one JSON object: the differences and the kernels each case reached.
Sizes are small because the Triton interpreter runs every program on the CPU.
"""

from __future__ import annotations

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 first"

from sm12x.selftest.env import flashinfer_package, stub_torchvision  # noqa: E402

stub_torchvision()

import torch  # noqa: E402

torch.set_num_threads(1)  # small tensors; OpenMP spinning on a busy machine costs 50x

from sm12x.selftest import numerics as n  # noqa: E402
from sm12x.selftest.kernels import Emulator, Rules  # noqa: E402

n.trim_triton_autotune()
out: dict = {}


def record(name, a, b):
    diff = n.Diff.of(name, a, b)
    out[name] = {
        "max_abs": diff.max_abs,
        "exact": diff.exact,
        "close": diff.close,
        "nonfinite": diff.nonfinite,
    }


def routed(emulator):
    return [[c.kernel, c.topk, c.scratch_splits] for c in emulator.calls]


PAGES, PAGE = 4, 128  # 128-token SWA pages: the real page split runs
with Emulator(Rules.from_flashinfer(flashinfer_package()), compute="reference") as emulator:
    # 1. A draft decode call (width 192, <= 133 valid slots) padded to 512.
    call = n.make_call(2, 64, 192, 133, PAGES, PAGE, "cpu")
    ref, _ = n.reference(call)
    emulator.calls.clear()
    record("decode_patched_vs_reference", n.patched(call), ref)
    out["decode_routes"] = routed(emulator)

    # 2. Without topk_length the patch fills it with the original width.
    bare = n.make_call(2, 64, 192, 192, PAGES, PAGE, "cpu", with_topk_length=False)
    emulator.calls.clear()
    record("decode_no_topk_length_vs_reference", n.patched(bare), n.reference(bare)[0])
    out["no_topk_length_lengths"] = emulator.calls[0].topk_length.tolist()

    # 3. A prefill-sized draft call (> 64 tokens) padded to 512.
    big = n.make_call(66, 64, 192, 133, PAGES, PAGE, "cpu", seed=3)
    emulator.calls.clear()
    record("prefill_patched_vs_reference", n.patched(big), n.reference(big)[0])
    out["prefill_routes"] = routed(emulator)

    # 4. -1 padding never changes a result: reference and real Triton kernel.
    small = n.make_call(1, 16, 192, 133, PAGES, PAGE, "cpu", seed=4)
    ref_o, ref_l = n.reference(small)
    pad_o, pad_l = n.reference(n.padded(small, 512))
    record("reference_padded_vs_unpadded", pad_o, ref_o)
    record("reference_lse_padded_vs_unpadded", pad_l, ref_l)
    tri_o, tri_l = n.triton_direct(small)
    tpad_o, tpad_l = n.triton_direct(n.padded(small, 512))
    record("triton_padded_vs_unpadded", tpad_o, tri_o)
    record("triton_lse_padded_vs_unpadded", tpad_l, tri_l)

    # 5. The Triton kernel agrees with the reference (what the fallback returns).
    record("triton_vs_reference", tri_o, ref_o)
    record("triton_lse_vs_reference", tri_l, ref_l)

    # 6. A shape no flashinfer kernel takes (24 heads) reaches Triton through the
    #    patch, with the original indices, and returns exactly what Triton does.
    odd = n.make_call(1, 24, 192, 133, PAGES, PAGE, "cpu", seed=5)
    emulator.calls.clear()
    via_patch = n.patched(odd)
    out["fallback_routes"] = routed(emulator)
    out["fallback_indices_unchanged"] = (
        emulator.calls[0].indices.data_ptr() == odd["indices"].data_ptr()
    )
    record("fallback_vs_triton", via_patch, n.triton_direct(odd)[0])
    record("fallback_vs_reference", via_patch, n.reference(odd)[0])


# 7. The page-split stand-in the census uses (record mode) writes exactly the
#    bytes sglang's real split kernels write (run here by the interpreter):
#    touched pages copied, from 0.5.17 untouched ones left alone.
import inspect  # noqa: E402

from sglang.kernels.ops.attention import flash_mla_sm120 as sg  # noqa: E402
from sglang.srt.runtime_context import get_resources  # noqa: E402

source = n.make_kv_cache(6, PAGE, "cpu", seed=7)
touched = torch.full((3, 192), -1, dtype=torch.int32)
touched[:, :40] = torch.cat([torch.arange(130, 150), torch.arange(520, 540)]).to(torch.int32)
masked = "touched_indices" in inspect.signature(sg._split_kv_pages_to_64).parameters


def split_bytes():
    previous = get_resources().buffers.get("flash_mla_sm120_split:cpu")
    if previous is not None:
        previous.fill_(0xA5)
    got = sg._split_kv_pages_to_64(source, PAGE, **({"touched_indices": touched} if masked else {}))
    return torch.as_strided(got, (got.shape[0], got.stride(0)), (got.stride(0), 1)).clone()


split_bytes()  # allocates sglang's persistent output buffer, which the next call poisons
real_split = split_bytes()
with Emulator(Rules.from_flashinfer(flashinfer_package())):
    emulated_split = split_bytes()
out["split_masked"] = masked
out["split_emulation_equals_kernel"] = bool(torch.equal(real_split, emulated_split))
out["split_pages_left_alone"] = int((real_split == 0xA5).all(dim=1).sum())

json.dump(out, sys.stdout)
