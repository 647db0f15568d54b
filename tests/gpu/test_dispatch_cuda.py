"""The patched dispatch on a CUDA GPU: real Triton kernels, CUDA-graph capture and replay.

An H200 cannot run flashinfer's sm_120 CUTLASS kernels, so the kernel
emulator (sm12x.selftest.kernels) still stands in for them: in "reference"
mode with sglang's PyTorch attention, in "triton" mode with sglang's Triton
sparse-decode kernel on the very (padded) arguments the CUTLASS kernel would
get, which CUDA graphs can capture. Everything else runs for real on the GPU:
the patched `_flash_mla_flashinfer`, the 128 -> 64 page split kernel,
flashinfer's Python dispatch and the Triton fallback.

Skipped without a CUDA GPU and an importable sglang (CI has neither); run on
the device machine as docs/benchmarks.md shows.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from sm12x.selftest.env import flashinfer_package, stub_torchvision  # noqa: E402

stub_torchvision()
pytest.importorskip("sglang")

from sglang.kernels.ops.attention import flash_mla_sm120 as module  # noqa: E402

from sm12x.selftest import numerics as n  # noqa: E402
from sm12x.selftest.kernels import Emulator, Rules  # noqa: E402

DEV = "cuda"
PAGES, PAGE = 16, 128  # 128-token SWA pages, as sglang's DSV4 pool has them
C4 = (512, 300, 64)  # target C4 layer: extra topk 512 on 64-entry pages


@pytest.fixture(scope="module")
def rules():
    assert hasattr(module, "_sm12x_route"), "sglang is not patched: run scripts/apply-patches"
    return Rules.from_flashinfer(flashinfer_package())


@pytest.mark.parametrize(
    "tokens, with_topk_length",
    [
        (5, True),
        (20, True),
        (64, True),
        (80, True),
        (320, True),
        (5, False),
        (80, False),  # no topk_length: the patch fills the original width
    ],
)
def test_padded_draft_call_equals_unpadded_reference(rules, tokens, with_topk_length):
    call = n.make_call(
        tokens,
        64,
        192,
        192 if not with_topk_length else 133,
        PAGES,
        PAGE,
        DEV,
        seed=tokens,
        with_topk_length=with_topk_length,
    )
    expected, _ = n.reference(call)
    with Emulator(rules, compute="reference") as emulator:
        got = n.patched(call)
    (seen,) = emulator.calls
    assert seen.topk == 512
    assert seen.kernel == ("cutlass-decode" if tokens <= 64 else "cutlass-prefill")
    assert seen.topk_length is not None and seen.topk_length.shape == (tokens,)
    diff = n.Diff.of("patched", got, expected)
    assert diff.close and diff.nonfinite == 0, diff


def test_real_triton_kernel_matches_reference_and_ignores_padding(rules):
    call = n.make_call(16, 64, 192, 133, PAGES, PAGE, DEV, seed=2)
    expected, expected_lse = n.reference(call)
    out, lse = n.triton_direct(call)
    assert n.Diff.of("triton", out, expected).close
    assert n.Diff.of("lse", lse, expected_lse).max_abs < 1e-3  # inf if either has a NaN
    padded, _ = n.triton_direct(n.padded(call, 512))
    # Autotune may tile widths 192 and 512 differently: equal up to rounding ...
    assert n.Diff.of("padded", padded, out).close
    # ... and bitwise once both run one configuration.
    configs = n.trim_triton_autotune()
    try:
        one, _ = n.triton_direct(call)
        one_padded, _ = n.triton_direct(n.padded(call, 512))
    finally:
        n.restore_triton_autotune(configs)
    assert n.Diff.of("padded, one config", one_padded, one).exact


def test_unservable_shape_falls_back_to_real_triton_unpadded(rules):
    call = n.make_call(8, 24, 192, 133, PAGES, PAGE, DEV, seed=3)  # no kernel has 24 heads
    with Emulator(rules, compute="triton") as emulator:
        got = n.patched(call)
    (seen,) = emulator.calls
    assert (seen.kernel, seen.topk) == ("triton", 192)
    assert seen.indices.data_ptr() == call["indices"].data_ptr()
    assert n.Diff.of("fallback", got, n.triton_direct(call)[0]).exact


def test_patched_path_never_syncs_the_host(rules):
    call = n.make_call(20, 64, 192, 133, PAGES, PAGE, DEV, seed=4)
    with Emulator(rules, compute="triton"):
        n.patched(call)  # warm-up: autotune and buffer allocation may sync
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            n.patched(call)
        finally:
            torch.cuda.set_sync_debug_mode("default")


def _capture_and_replay(rules, make, enabled=True):
    """Capture one call on static buffers, refill them, replay; return (graph, eager) outputs."""
    static = make(11)
    with n.dispatch_patch(enabled), Emulator(rules, compute="triton") as emulator:
        n.patched(static)  # warm-up outside the graph
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = n.patched(static)
        fresh = make(12)
        for key in (
            "q",
            "k_cache",
            "indices",
            "topk_length",
            "attn_sink",
            "extra_k_cache",
            "extra_indices",
            "extra_topk_length",
        ):
            if static[key] is not None:
                static[key].copy_(fresh[key])
        graph.replay()
        torch.cuda.synchronize()
        eager = n.patched(fresh)
        routes = [(c.kernel, c.topk) for c in emulator.calls]
    return captured.clone(), eager, routes, fresh


@pytest.mark.parametrize("tokens", [5, 64, 80])  # decode and prefill-sized draft captures
def test_draft_call_captures_and_replays_in_a_cuda_graph(rules, tokens):
    def make(seed):
        return n.make_call(tokens, 64, 192, 133, PAGES, PAGE, DEV, seed=seed)

    replayed, eager, routes, fresh = _capture_and_replay(rules, make)
    assert {width for _, width in routes} == {512}
    assert n.Diff.of("replay vs eager", replayed, eager).exact
    assert n.Diff.of("replay vs reference", replayed, n.reference(fresh)[0]).close


@pytest.mark.parametrize("tokens", [6, 96])  # target-verify, instantiated: must be unchanged
def test_instantiated_verify_call_is_untouched_and_replays(rules, tokens):
    def make(seed):
        return n.make_call(tokens, 64, 128, 128, PAGES, PAGE, DEV, seed=seed, extra=C4)

    patched, _, routes, fresh = _capture_and_replay(rules, make, enabled=True)
    upstream, _, upstream_routes, _ = _capture_and_replay(rules, make, enabled=False)
    assert routes == upstream_routes and {width for _, width in routes} == {128}
    assert n.Diff.of("patched vs upstream graph", patched, upstream).exact
    assert n.Diff.of("replay vs reference", patched, n.reference(fresh)[0]).close
