"""What the dispatch patch adds per sparse-MLA call: host microseconds and GPU time.

Run on a CUDA GPU with the patched sglang and flashinfer importable (see
docs/benchmarks.md for the exact command). An sm_120 CUTLASS kernel cannot run
on other GPUs, so:

- host time is measured with flashinfer's kernels replaced by no-ops, for the
  patched and the unpatched dispatch on the same shapes, in interleaved bursts
  (unpatched, patched, patched, unpatched, ...), so the machine's drift hits
  both alike: the median of the per-round differences is what the patch's
  routing and padding cost the CPU per call (two separate runs of the same
  call measured 80 and 110 us on an H200 host, more than the effect);
- GPU time is measured inside CUDA graphs: the pad alone (what the patch adds
  on the GPU for a 192-wide draft call), sglang's Triton sparse-decode kernel
  at widths 192 and 512 (the attention a padded call would otherwise pay for,
  and what the fallback costs), and an instantiated target-verify call captured
  with and without the patch (target: no change at all).

Prints a Markdown table and writes the raw figures as JSON (--json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import time

import torch

from sm12x.selftest.env import flashinfer_package, installed_versions, stub_torchvision

stub_torchvision()

from flashinfer.mla import _sparse_mla_sm120 as fi  # noqa: E402
from sglang.kernels.ops.attention import flash_mla_sm120 as module  # noqa: E402

from sm12x.selftest import numerics as n  # noqa: E402
from sm12x.selftest.kernels import Emulator, Rules  # noqa: E402

DEV = "cuda"
PAGES, PAGE = 64, 128
C4 = (512, 300, 64)


@contextlib.contextmanager
def noop_kernels():
    """flashinfer's compiled kernels replaced by no-ops: only Python remains."""

    class _Module:
        def sparse_mla_sm120_paged_attention(self, *args):
            return None

    class _Spec:
        def build_and_load(self):
            return _Module()

    saved = fi.gen_sparse_mla_sm120_module, fi.sparse_mla_sm120_decode_dsv4
    fi.gen_sparse_mla_sm120_module = lambda: _Spec()
    fi.sparse_mla_sm120_decode_dsv4 = lambda *args, **kwargs: args[5]
    fi.get_sparse_mla_sm120_module.cache_clear()
    try:
        yield
    finally:
        fi.gen_sparse_mla_sm120_module, fi.sparse_mla_sm120_decode_dsv4 = saved
        fi.get_sparse_mla_sm120_module.cache_clear()


def _burst_us(fn, calls: int) -> float:
    """Host microseconds per call over one burst that starts with an idle GPU queue,
    so the CPU never waits on the GPU for queue space: Python plus launches."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def host_us(fn, calls: int = 20, rounds: int = 300) -> float:
    """Median host microseconds of one fn(), timed in short bursts."""
    fn()
    samples = [_burst_us(fn, calls) for _ in range(rounds)]
    torch.cuda.synchronize()
    return statistics.median(samples)


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q1, q2, q3


def host_ab_us(fn, calls: int = 20, rounds: int = 300) -> dict:
    """The same call without and with the patch, interleaved burst by burst.

    Each round times one burst of each, in ABBA order (unpatched first in even
    rounds, patched first in odd ones), so slow drift of the host (clocks,
    caches, other load) lands on both; the patch's cost is the median of the
    per-round differences, with its quartiles to show the noise left.
    """
    for on in (False, True):  # warm both paths: memoised routes, allocator, launches
        with n.dispatch_patch(on):
            fn()
    samples: dict[bool, list[float]] = {False: [], True: []}
    for round_ in range(rounds):
        for on in (False, True) if round_ % 2 == 0 else (True, False):
            with n.dispatch_patch(on):
                samples[on].append(_burst_us(fn, calls))
    torch.cuda.synchronize()
    diffs = [p - u for u, p in zip(samples[False], samples[True])]
    d1, d2, d3 = quartiles(diffs)
    return {
        "unpatched_us": statistics.median(samples[False]),
        "patched_us": statistics.median(samples[True]),
        "added_us": d2,
        "added_q1_us": d1,
        "added_q3_us": d3,
        "unpatched_q1_q3_us": quartiles(samples[False])[::2],
        "rounds": rounds,
        "calls_per_burst": calls,
    }


def graph_us(fn, reps: int = 100, replays: int = 50) -> float:
    """GPU microseconds of one fn() inside a CUDA graph of `reps` copies."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (replays * reps)


def kernels_per_call(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the raw figures here")
    args = parser.parse_args()
    rules = Rules.from_flashinfer(flashinfer_package())
    results: dict = {
        "gpu": torch.cuda.get_device_name(),
        "versions": {
            **installed_versions(),
            "triton": __import__("triton").__version__,
            "python": platform.python_version(),
        },
        "host": [],
        "pad": [],
        "attention": [],
        "instantiated": [],
    }

    # 1. Host microseconds per call, patched vs unpatched, kernels as no-ops.
    shapes = {
        "draft, 20 tokens, topk 192 (padded to 512)": n.make_call(
            20, 64, 192, 133, PAGES, PAGE, DEV
        ),
        "target-verify C4, 24 tokens, topk 128 + 512 (instantiated)": n.make_call(
            24, 64, 128, 128, PAGES, PAGE, DEV, extra=C4
        ),
    }
    with noop_kernels():
        for name, call in shapes.items():
            ab = host_ab_us(lambda: n.patched(call))
            # The patch's own host work, alone: the memoised route lookup, and
            # the pad launch where the route pads.
            plan_args = (
                call["q"],
                call["indices"],
                512,
                call["extra_k_cache"],
                call["extra_indices"],
            )
            _, width = module._sm12x_plan(*plan_args)
            lookup = host_us(lambda: module._sm12x_plan(*plan_args), calls=200)
            pad = (
                host_us(
                    lambda: module._sm12x_pad_indices(call["indices"], call["topk_length"], width)
                )
                if width != call["indices"].shape[-1]
                else 0.0
            )
            results["host"].append(
                {"shape": name, **ab, "route_lookup_us": lookup, "pad_launch_us": pad}
            )

    # 2. The pad alone inside a CUDA graph (the draft passes topk_length, so only
    #    F.pad runs; without it a torch.full is added).
    for tokens in (5, 20, 64, 320):
        call = n.make_call(tokens, 64, 192, 133, PAGES, PAGE, DEV, seed=tokens)
        idx, lengths = call["indices"], call["topk_length"]
        results["pad"].append(
            {
                "tokens": tokens,
                "pad_us": graph_us(lambda: module._sm12x_pad_indices(idx, lengths, 512)),
                "pad_and_fill_us": graph_us(lambda: module._sm12x_pad_indices(idx, None, 512)),
            }
        )

    # 3. The attention the pad sits next to: sglang's Triton decode kernel at the
    #    padded width (a stand-in for the CUTLASS kernel's cost, which an H200
    #    cannot measure) and at the original width (what the fallback costs).
    for tokens in (5, 20, 64, 320):
        call = n.make_call(tokens, 64, 192, 133, PAGES, PAGE, DEV, seed=tokens)
        wide = n.padded(call, 512)
        results["attention"].append(
            {
                "tokens": tokens,
                "triton_192_us": graph_us(lambda: n.triton_direct(call), reps=20),
                "triton_512_us": graph_us(lambda: n.triton_direct(wide), reps=20),
            }
        )

    # 4. An instantiated target-verify call, whole (page split, dispatch, Triton
    #    stand-in), captured with and without the patch.
    with Emulator(rules, compute="triton"):
        for tokens in (6, 96):
            call = n.make_call(tokens, 64, 128, 128, PAGES, PAGE, DEV, seed=tokens, extra=C4)
            row = {"tokens": tokens}
            for label, on in (("unpatched", False), ("patched", True)):
                with n.dispatch_patch(on):
                    row[f"{label}_us"] = graph_us(lambda: n.patched(call), reps=20)
                    row[f"{label}_kernels"] = kernels_per_call(lambda: n.patched(call))
            results["instantiated"].append(row)

    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    print(render(results))


def render(r: dict) -> str:
    v = r["versions"]
    lines = [
        f"GPU: {r['gpu']}; sglang {v['sglang']}, flashinfer {v['flashinfer-python']}, "
        f"torch {v['torch']}, triton {v['triton']}, Python {v['python']}",
        "",
        "| host time per call (kernels as no-ops, interleaved bursts) | unpatched | "
        "patched | added (median of paired rounds, quartiles) | route lookup alone | "
        "pad launch alone |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {h['shape']} | {h['unpatched_us']:.1f} us | {h['patched_us']:.1f} us | "
        f"{h['added_us']:+.1f} us ({h['added_q1_us']:+.1f} to {h['added_q3_us']:+.1f}) | "
        f"{h['route_lookup_us']:.2f} us | {h['pad_launch_us']:.1f} us |"
        for h in r["host"]
    ]
    lines += [
        "",
        "| draft tokens | pad 192 -> 512, in a CUDA graph | pad + topk_length fill | "
        "Triton decode, width 192 | Triton decode, width 512 | pad / Triton 512 |",
        "|---|---|---|---|---|---|",
    ]
    for pad, att in zip(r["pad"], r["attention"]):
        lines.append(
            f"| {pad['tokens']} | {pad['pad_us']:.1f} us | {pad['pad_and_fill_us']:.1f} us"
            f" | {att['triton_192_us']:.0f} us | {att['triton_512_us']:.0f} us | "
            f"{pad['pad_us'] / att['triton_512_us']:.1%} |"
        )
    lines += [
        "",
        "| target-verify C4 tokens (instantiated) | unpatched, in a CUDA graph | "
        "patched | kernels per call (unpatched / patched) |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {i['tokens']} | {i['unpatched_us']:.0f} us | {i['patched_us']:.0f} us | "
        f"{i['unpatched_kernels']} / {i['patched_kernels']} |"
        for i in r["instantiated"]
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
