"""Can verify's soak client outrun the fastest rig? Its CPU per output token.

Starts the mock sglang server (`sm12x mock-server`, no token pacing) in
a process of its own, runs `python -m verify` with only the soak (and the
checks it needs) against it, and reports verify's own CPU time per output
token from the kernel's accounting of that child process. Both processes share
the machine's cores, as they would not against a real server.

    python benchmarks/verify_headroom.py [--concurrency 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, deadline_s: float = 30) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the mock server at {url} did not become healthy in {deadline_s} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sm12x.mock",
            "--port",
            str(port),
            "--token-delay",
            "0",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(url)
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.monotonic()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "verify",
                    "--base-url",
                    url,
                    "--only",
                    "health,models,one-token,soak",
                    "--soak-concurrency",
                    str(args.concurrency),
                    "--soak-rounds",
                    str(args.rounds),
                    "--json",
                    str(report),
                    "--junit",
                    str(Path(tmp) / "junit.xml"),
                ],
                cwd=ROOT,
                check=True,
                timeout=600,
                stdout=subprocess.DEVNULL,
            )
            wall = time.monotonic() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            soak = next(c for c in json.loads(report.read_text())["checks"] if c["name"] == "soak")
    finally:
        server.terminate()
        server.wait(timeout=30)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tokens = soak["metrics"]["output_tokens"]
    print(
        f"| {os.cpu_count()} cores | {args.concurrency} x {args.rounds} | "
        f"{soak['metrics']['requests']} | {tokens} | {wall:.1f} s | {cpu:.1f} s | "
        f"{tokens / cpu:,.0f} | {soak['metrics']['output_tokens_per_s']:,.0f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
