"""Start `sm12x mock-server` from this Python's own install on every track's sglang.

The documented-commands test runs this in the reader's virtualenv right after
its `pip install -e '.[mock]'` (tests/unit/test_doc_commands.py), because the
test environment holds far more than the extra does: an import the extra
misses (sglang 0.5.23's serving code needed six more packages than 0.5.17's)
shows only in a clean install. Each start is a real server process with the
suite's settings (SM12X_CACHE, SM12X_OFFLINE=1: an offline start from the
cache, as docs/verify.md describes), until it answers a chat completion; then
Ctrl-C, which must end it with 130. The current track starts in tune's
profiling mode (`--sps-profile`, docs/tune.md), the pinned one plain.
Then, per track, sglang's own benchmark client as `sm12x bench` runs it from
this install against the mock (sm12x.mock.wheel_python, the patched tree the
server just built) parses its arguments: its imports (aiohttp, datasets, the
runtime utilities) are what the extra must carry for bench.
Exit 0 when every start served and every client started, else the log.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from sm12x.versions import load_versions, tracks

START_S = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return bool(json.loads(response.read())["choices"][0]["message"]["content"])
    except OSError:
        return False


def start(args: list[str], log: Path) -> str | None:
    """None when the server served and stopped on Ctrl-C with 130, else why not."""
    port = free_port()
    sm12x = Path(sys.executable).with_name("sm12x")
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(sm12x), "mock-server", "--port", str(port), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + START_S
            while not answers(port):
                if proc.poll() is not None:
                    return f"exited {proc.returncode} before serving"
                if time.monotonic() > deadline:
                    return f"not serving after {START_S} s"
                time.sleep(1)
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=60)
            return None if code == 130 else f"Ctrl-C ended it with {code}, not 130"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


def client_starts(version: str) -> str | None:
    """None when the wheel's benchmark client answers --help here, else its output."""
    done = subprocess.run(
        [sys.executable, "-m", "sm12x.mock.wheel_python", version, "--patched", "-m",
         "sglang.benchmark.serving", "--help"],
        capture_output=True, text=True, timeout=START_S, check=False,
    )  # fmt: skip
    if done.returncode == 0 and "--max-concurrency" in done.stdout:
        return None
    return f"exit {done.returncode}: {(done.stdout + done.stderr)[-4000:]}"


def main() -> int:
    failed = 0
    folder = Path(tempfile.mkdtemp(prefix="mock-starts-"))
    for track in tracks():
        version = load_versions(track)["SGLANG_VERSION"]
        if track == "current":
            args = ["--sps-profile", "rtx-pro-6000-tp4-throughput"]
        else:
            args = ["--sglang-version", version]
        log = folder / f"{track}.log"
        why = start(args, log)
        if why:
            failed += 1
            print(f"mock-server {' '.join(args)} (sglang {version}): {why}", file=sys.stderr)
            print(log.read_text()[-4000:], file=sys.stderr)
        elif why := client_starts(version):
            failed += 1
            print(f"sglang {version}'s benchmark client from its wheel: {why}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
