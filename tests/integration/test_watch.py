"""`sm12x watch` against the stand-in server as its own process
(`python -m sm12x.mock`), watch itself as `python -m sm12x.cli watch`:

- under a streamed load, `--once`'s output tok/s is within 10% of the tokens
  the load received in the same window (the two readings' times are in its
  JSON);
- running and queued requests per DP rank equal what the stand-in holds:
  six streams held open on two DP ranks with four running requests at most
  (two a rank): three placed on each rank, two running and one queued;
- under `--fault low-accept` the acceptance alert shows (pending: its `for`
  is ten minutes), and the healthy stand-in shows none;
- a server that dies mid-watch gives one line, watch retries, and says when
  the server answers again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.support.router import Backend, chat_body, load, wait_until

ROOT = Path(__file__).resolve().parents[2]


def watch_once(url: str, *extra: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "sm12x.cli", "watch", url, "--once", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("SM12X_")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_once_reports_the_tokens_per_second_the_load_received(tmp_path):
    backend = Backend(log=tmp_path / "mock.log").start()
    try:
        backend.wait_ready()
        found: dict = {}
        offset = time.time() - time.monotonic()

        def during() -> None:
            time.sleep(2)  # the load at its pace first
            found.update(watch_once(backend.url, "--interval", "5"))

        outcomes = load(backend.url, concurrency=8, max_tokens=64, during=during)
    finally:
        backend.stop()
    start, end = (t - offset for t in found["read_at"])
    assert end - start >= 5
    received = sum(o.tokens for o in outcomes if o.ok and start < o.end <= end)
    delivered = received / (end - start)
    assert delivered > 100, outcomes[:3]  # a real load, not a trickle
    assert abs(found["output_tokens_per_s"] - delivered) <= 0.1 * delivered, (found, delivered)


def _hold(url: str, opened: threading.Semaphore) -> None:
    """One stream held open: the stall fault stops sending after two chunks."""
    try:
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=chat_body(0, 0, 64), timeout=60
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    opened.release()
    except httpx.HTTPError:
        pass  # the server stops under it at the end of the test


def test_running_and_queued_per_dp_rank_equal_the_servers(tmp_path):
    backend = Backend(
        args=(
            "--dp-size", "2", "--max-running-requests", "4",
            "--fault", "stall", "--stall-seconds", "60",
        ),
        log=tmp_path / "mock.log",
    ).start()  # fmt: skip
    try:
        backend.wait_ready()
        opened = threading.Semaphore(0)
        for _ in range(6):
            threading.Thread(target=_hold, args=(backend.url, opened), daemon=True).start()
        for _ in range(6):
            assert opened.acquire(timeout=60), "a stream did not start"
        found = watch_once(backend.url, "--interval", "0.5")
    finally:
        backend.stop()
    # sglang's round robin places three on each rank; each runs 4 / 2 = 2.
    assert {k: (v["running"], v["queued"]) for k, v in found["ranks"].items()} == {
        "0": (2, 1),
        "1": (2, 1),
    }
    assert all(0 < v["kv_usage"] < 1 for v in found["ranks"].values())


def test_low_acceptance_shows_the_alert_and_a_healthy_server_none(tmp_path):
    seen = {}
    for name, args in (("low", ("--fault", "low-accept")), ("healthy", ())):
        backend = Backend(args=args, log=tmp_path / f"{name}.log").start()
        try:
            backend.wait_ready()

            def during(url: str = backend.url, key: str = name) -> None:
                time.sleep(1)
                seen[key] = watch_once(url, "--interval", "2")

            load(backend.url, concurrency=2, max_tokens=16, during=during)
        finally:
            backend.stop()
    low, healthy = seen["low"], seen["healthy"]
    assert low["accept_length"] < low["min_accept_length"], low
    assert {"alert": "DsparkAcceptanceCollapse", "rank": "0", "state": "pending"} in low["alerts"]
    assert healthy["accept_length"] >= healthy["min_accept_length"], healthy
    assert healthy["alerts"] == [], healthy


def test_a_server_that_dies_mid_watch_gives_one_line_and_is_read_again(tmp_path):
    backend = Backend(log=tmp_path / "mock.log").start()
    watch = None
    try:
        backend.wait_ready()
        watch = subprocess.Popen(
            [sys.executable, "-m", "sm12x.cli", "watch", backend.url, "--interval", "0.3"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "watch.err").open("w"),
            env={k: v for k, v in os.environ.items() if not k.startswith("SM12X_")},
        )
        time.sleep(3)
        backend.stop()
        err = tmp_path / "watch.err"
        wait_until(lambda: "does not answer" in err.read_text(), 30, "watch's line")
        time.sleep(3)  # ten readings or so, each failing
        backend.start().wait_ready()
        wait_until(lambda: "answers again" in err.read_text(), 30, "watch to read it again")
        assert watch.poll() is None, "watch exited"
    finally:
        if watch is not None and watch.poll() is None:
            os.kill(watch.pid, signal.SIGINT)
            try:
                watch.wait(timeout=30)
            except subprocess.TimeoutExpired:
                # No process outlives the test (stop 60: one that ignored Ctrl-C
                # polled a dead port for an hour), and the server stops too.
                watch.kill()
                watch.wait(timeout=30)
        backend.stop()
    lines = err.read_text().splitlines()
    assert len(lines) == 2, lines
    assert "does not answer" in lines[0] and "retrying every 0.3 s" in lines[0], lines
    assert lines[1].endswith("answers again"), lines
    assert watch.returncode == 0, (
        f"watch ended {watch.returncode} (-9: Ctrl-C did not end it in 30 s)"
    )
