"""What sglang-router adds: time to first token and throughput, through the
router versus straight to the same server.

One mock sglang server (`sm12x mock-server`, its own process) and one
sglang-router in front of it, started by `sm12x router` with the production
settings (as the compose `router` service runs it, per-request logging at
info level included). The same streamed chat load is run direct and through
the router, alternating, at each concurrency; each pair of runs uses fresh
prompts. Reported per run: TTFT p50/p90 (first generated text), end-to-end
request latency p50, and output tokens per second (completion tokens from
usage / wall time).

Two pacings of the fake server:
- paced (--token-delay 0.02 s between streamed steps of 1-4 tokens, like a
  rig decoding at ~20-40 ms per step): the latency the router adds per request;
- unpaced (--token-delay 0): the server, the router and this client all
  compete for the CPU, so throughput there is a ceiling of the machine, and
  the difference is the router's CPU cost per token.

Run from the repository root (docs/benchmarks.md has the exact command):
    .cache/venv/bin/python benchmarks/router_overhead.py --json router-overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.router import Backend, Router, load  # noqa: E402


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(url: str, concurrency: int, requests: int, max_tokens: int, what: str) -> dict:
    started = time.monotonic()
    outcomes = load(url, concurrency, requests=requests, max_tokens=max_tokens, fresh=True)
    wall = time.monotonic() - started
    failed = [o for o in outcomes if not o.ok]
    for o in failed[:3]:
        print(f"  failed {what}: {o.detail}", flush=True)
    ok = [o for o in outcomes if o.ok]
    ttft = [o.ttft for o in ok if o.ttft is not None]
    latency = [o.end - o.start for o in ok]
    tokens = sum(o.tokens for o in ok)
    return {
        "requests": len(outcomes),
        "failed": len(failed),
        "tokens": tokens,
        "wall_s": wall,
        "ttft_p50_ms": 1000 * pct(ttft, 0.5),
        "ttft_p90_ms": 1000 * pct(ttft, 0.9),
        "latency_p50_ms": 1000 * pct(latency, 0.5),
        "tok_s": tokens / wall,
    }


def median_of(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument(
        "--requests",
        type=int,
        default=0,
        help="requests per run (default: 40 at C1, else 8 x concurrency)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="direct/router run pairs")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--token-delay", type=float, nargs="+", default=[0.02, 0.0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--log-dir", type=Path, help="keep the server and router logs here")
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.log_dir or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        for delay in args.token_delay:
            backend = Backend(args=("--token-delay", str(delay)), log=tmp / f"backend-{delay}.log")
            router = Router([backend.url], extra=(), log=tmp / f"router-{delay}.log")
            try:
                backend.start().wait_ready()
                router.start().wait_ready(1)
                load(router.url, 4, requests=20, max_tokens=32, fresh=True)  # warm both paths
                for c in args.concurrency:
                    n = args.requests or (40 if c == 1 else 8 * c)
                    direct, routed = [], []
                    for _ in range(args.repeats):
                        direct.append(run(backend.url, c, n, args.max_tokens, "direct"))
                        routed.append(run(router.url, c, n, args.max_tokens, "via the router"))
                    d, r = median_of(direct), median_of(routed)
                    results.append(
                        {
                            "token_delay_s": delay,
                            "concurrency": c,
                            "direct": d,
                            "router": r,
                            "runs": {"direct": direct, "router": routed},
                        }
                    )
                    print(
                        f"delay {delay} C{c}: TTFT p50 {d['ttft_p50_ms']:.1f} -> "
                        f"{r['ttft_p50_ms']:.1f} ms, {d['tok_s']:.0f} -> {r['tok_s']:.0f} tok/s",
                        flush=True,
                    )
            finally:
                router.stop()
                backend.stop()

    print()
    print(
        "| pacing | C | TTFT p50 direct | via router | TTFT p90 direct | via router "
        "| latency p50 direct | via router | tok/s direct | via router | change | failed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in results:
        d, r = row["direct"], row["router"]
        pacing = f"{row['token_delay_s'] * 1000:g} ms/step" if row["token_delay_s"] else "unpaced"
        print(
            f"| {pacing} | {row['concurrency']} | {d['ttft_p50_ms']:.1f} ms | "
            f"{r['ttft_p50_ms']:.1f} ms | {d['ttft_p90_ms']:.1f} ms | {r['ttft_p90_ms']:.1f} ms | "
            f"{d['latency_p50_ms']:.0f} ms | {r['latency_p50_ms']:.0f} ms | "
            f"{d['tok_s']:.0f} | {r['tok_s']:.0f} | {100 * (r['tok_s'] / d['tok_s'] - 1):+.1f}% | "
            f"{sum(x['failed'] for x in row['runs']['direct'])} / "
            f"{sum(x['failed'] for x in row['runs']['router'])} |"
        )
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sglang_router": metadata.version("sglang-router"),
    }
    print(f"\n{machine}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
