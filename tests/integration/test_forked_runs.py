"""The suite's mock servers and wheel runs, forked from a zygote (sm12x.mock.forkserver),
are what the same command run on its own is: the same answers, the same end.

Each test runs its command once on its own (the variable empty) and once served
by the session's zygote of that kind (tests/support/forkservers.py), started by
an earlier run if this is the first, and waited for.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from sm12x.mock import command, forkserver, wheel_python
from sm12x.recipe.lines import DEFAULT_LINE
from sm12x.versions import load_versions
from tests.support import http_client

ROOT = Path(__file__).resolve().parents[2]
PINNED = load_versions("pinned")["SGLANG_VERSION"]


def zygote_ready(spec: dict, env: dict[str, str]) -> None:
    """Wait until a zygote of the kind listens at this environment's key (started
    by the kind's second run: the tests run the command twice first)."""
    folder = Path(env[forkserver.ENV])
    deadline = time.monotonic() + 120
    while True:
        _, key = forkserver.keys(folder, spec, env)
        if (folder / f"{key}.sock").exists():
            return
        log = folder / f"{key}.log"
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no zygote"
        time.sleep(0.2)


def served(env: dict[str, str], pid: int) -> bool:
    """Whether the run of this pid was served (the log's line for it)."""
    log = Path(env[forkserver.ENV]) / "forkserver.log"
    return log.exists() and any(
        f" {pid} served by " in line for line in log.read_text().splitlines()
    )


def test_the_profiler_from_the_wheel_prints_the_same_served_or_not():
    env = dict(os.environ)
    assert env.get(forkserver.ENV), "the session has no zygote folder"
    argv = [sys.executable, "-m", "sm12x.mock.wheel_python", PINNED, "-m",
            "sglang.benchmark.dspark_sps_profiler", "--help"]  # fmt: skip
    alone = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                           env={**env, forkserver.ENV: ""}, check=False)  # fmt: skip
    spec = wheel_python.forkserver_spec(PINNED, False, "sglang.benchmark.dspark_sps_profiler")
    for _ in range(2):  # the second starts it, unless another test's did
        subprocess.run(argv, capture_output=True, timeout=300, env=env, check=False)
    zygote_ready(spec, env)
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, _ = run.communicate(timeout=300)
    assert served(env, run.pid)
    assert (run.returncode, out) == (alone.returncode, alone.stdout) == (0, alone.stdout)
    assert "usage" in out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mock(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sm12x.mock", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.communicate()[0]
        try:
            if http_client.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the mock never answered"
        time.sleep(0.2)


def ask(url: str) -> dict:
    body = {
        "model": "deepseek-ai/DeepSeek-V4-Flash",
        "messages": [{"role": "user", "content": "What is 2+2?"}],
        "max_tokens": 16,
        "temperature": 0,
    }
    answer = http_client.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()
    return {
        "message": answer["choices"][0]["message"],
        "finish": answer["choices"][0]["finish_reason"],
    }


def test_a_served_mock_answers_and_ends_as_one_started_alone():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    assert env.get(forkserver.ENV), "the session has no zygote folder"
    spec = command.forkserver_spec(PINNED, True, "auto", DEFAULT_LINE)
    ends = []
    answers = []
    for which in ("alone", "first", "second", "served"):
        if which == "served":
            zygote_ready(spec, env)
        proc, url = start_mock({**env, forkserver.ENV: ""} if which == "alone" else env)
        answers.append(ask(url))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        ends.append(proc.returncode)
        assert "listening on" in out, out
        if which in ("alone", "served"):  # (another test's zygote may serve the others)
            assert served(env, proc.pid) == (which == "served")
    assert all(a == answers[0] for a in answers), json.dumps(answers, indent=1)
    assert all(end == ends[0] for end in ends), ends
