"""Boot mode with a stand-in server command and recorded sglang boot logs."""

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.fake_sglang.server import free_port
from verify.boot import scan

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "boot"
PY = sys.executable

CRASHES = {
    "num-tokens-64.log": "num_tokens > 64",
    "unsupported-prefill.log": "Unsupported sparse-MLA prefill configuration",
    "cuda-oom.log": "CUDA out of memory",
    "nccl.log": "NCCL error",
}


def verify(*args, timeout=120):
    return subprocess.run([PY, "-m", "verify", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("log", sorted(CRASHES))
def test_known_failure_in_the_log_stops_the_boot_early(log, tmp_path):
    # The process keeps running after the failure (as a wedged sglang does):
    # verify must not wait for the deadline, and --down must stop it.
    marker = tmp_path / "still-running"
    command = f"cat {LOGS / log}; sleep 60; touch {marker}"
    start = time.monotonic()
    done = verify("--boot", "--boot-command", command, "--boot-timeout", "60", "--down",
                  "--base-url", f"http://127.0.0.1:{free_port()}", "--no-files")
    assert time.monotonic() - start < 30
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    assert "boot failed" in out and CRASHES[log] in out
    assert "Traceback (most recent call last)" not in out.replace(
        "Scheduler hit an exception: Traceback (most recent call last)", "")
    time.sleep(0.5)
    assert not marker.exists()


def test_crashing_process_is_reported(tmp_path):
    port = free_port()
    command = (f"{PY} -m tests.support.fake_sglang --port {port} "
               f"--boot-log {LOGS / 'healthy.log'} --crash")
    done = verify("--boot", "--boot-command", command, "--boot-timeout", "60",
                  "--base-url", f"http://127.0.0.1:{port}", "--no-files")
    assert done.returncode == 3
    assert "exited (code 1) before it was healthy" in done.stdout


def test_healthy_boot_runs_the_checks_and_tears_down(tmp_path):
    port = free_port()
    command = (f"{PY} -m tests.support.fake_sglang --port {port} "
               f"--boot-log {LOGS / 'healthy.log'}")
    done = verify("--boot", "--boot-command", command, "--boot-timeout", "60", "--down",
                  "--base-url", f"http://127.0.0.1:{port}", "--only", "health,models,one-token,spec",
                  "--boot-log", str(tmp_path / "boot.log"), "--no-files")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "healthy after" in done.stdout
    assert "fired up" in (tmp_path / "boot.log").read_text()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_boot_deadline():
    done = verify("--boot", "--boot-command", "sleep 30", "--boot-timeout", "2", "--down",
                  "--base-url", f"http://127.0.0.1:{free_port()}", "--no-files")
    assert done.returncode == 3 and "not healthy within 2 s" in done.stdout


def test_scan_ignores_healthy_lines():
    assert all(scan(line) is None for line in (LOGS / "healthy.log").read_text().splitlines())
