"""Boot mode with a stand-in server command and recorded sglang boot logs."""

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sm12x.mock.server import free_port
from tests.support import http_client
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
    # scripts/test exports SM12X_DOCKER for the image tests; here the docker a
    # boot uses must come from the flags or the .env a test names, and the
    # environment outranks .env, so it is dropped.
    env = {k: v for k, v in os.environ.items() if k != "SM12X_DOCKER"}
    return subprocess.run(
        [PY, "-m", "verify", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("log", sorted(CRASHES))
def test_known_failure_in_the_log_stops_the_boot_early(log, tmp_path):
    # The process keeps running after the failure (as a wedged sglang does):
    # verify must not wait for the deadline, and --down must stop it.
    marker = tmp_path / "still-running"
    command = f"cat {LOGS / log}; sleep 60; touch {marker}"
    start = time.monotonic()
    done = verify(
        "--boot",
        "--boot-command",
        command,
        "--boot-timeout",
        "60",
        "--down",
        "--base-url",
        f"http://127.0.0.1:{free_port()}",
        "--no-files",
    )
    assert time.monotonic() - start < 30
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    assert "boot failed" in out and CRASHES[log] in out
    assert "Traceback (most recent call last)" not in out.replace(
        "Scheduler hit an exception: Traceback (most recent call last)", ""
    )
    time.sleep(0.5)
    assert not marker.exists()


def test_crashing_process_is_reported(tmp_path):
    port = free_port()
    command = f"{PY} -m sm12x.mock --port {port} --boot-log {LOGS / 'healthy.log'} --crash"
    done = verify(
        "--boot",
        "--boot-command",
        command,
        "--boot-timeout",
        "60",
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--no-files",
    )
    assert done.returncode == 3
    assert "exited (code 1) before it was healthy" in done.stdout


def test_healthy_boot_runs_the_checks_and_tears_down(tmp_path):
    port = free_port()
    command = f"{PY} -m sm12x.mock --port {port} --boot-log {LOGS / 'healthy.log'}"
    done = verify(
        "--boot",
        "--boot-command",
        command,
        "--boot-timeout",
        "60",
        "--down",
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--only",
        "health,models,one-token,spec",
        "--boot-log",
        str(tmp_path / "boot.log"),
        "--no-files",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "healthy after" in done.stdout
    assert "fired up" in (tmp_path / "boot.log").read_text()
    with pytest.raises(httpx.HTTPError):
        http_client.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_boot_deadline():
    done = verify(
        "--boot",
        "--boot-command",
        "sleep 30",
        "--boot-timeout",
        "2",
        "--down",
        "--base-url",
        f"http://127.0.0.1:{free_port()}",
        "--no-files",
    )
    assert done.returncode == 3 and "not healthy within 2 s" in done.stdout


def test_scan_ignores_healthy_lines():
    assert all(scan(line) is None for line in (LOGS / "healthy.log").read_text().splitlines())


def fake_docker(tmp_path: Path, log: str) -> tuple[Path, Path]:
    """A `docker` that records each call: `compose ... up -d` returns at once,
    `compose ... logs -f` prints a recorded boot log, `down` returns."""
    calls = tmp_path / "calls.jsonl"
    script = tmp_path / "docker"
    script.write_text(
        f"#!{PY}\nimport json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"if 'logs' in sys.argv:\n    sys.stdout.write(open({str(LOGS / log)!r}).read())\n"
    )
    script.chmod(0o755)
    return script, calls


def test_boot_starts_the_recipes_compose_service_through_the_launcher(tmp_path):
    # verify.boot knows no compose: sm12x.deploy.compose gives it the commands,
    # with the head node's profile for a pair, the settings' docker and .env.
    import json

    # The docker comes from .env here (verify() drops scripts/test's SM12X_DOCKER).
    docker, calls = fake_docker(tmp_path, "nccl.log")
    env_file = tmp_path / "site.env"
    env_file.write_text(f"SM12X_DOCKER={docker}\n")
    done = verify(
        "--boot",
        "--recipe",
        "dgx-spark-tp2",
        "--env-file",
        str(env_file),
        "--boot-timeout",
        "30",
        "--down",
        "--base-url",
        f"http://127.0.0.1:{free_port()}",
        "--no-files",
    )
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    ran = [json.loads(line) for line in calls.read_text().splitlines()]
    base = ["compose", "--env-file", str(env_file), "--profile", "dgx-spark-tp2-node0"]
    assert ran[0] == [*base, "up", "-d"]
    assert [*base, "logs", "-f", "--no-color"] in ran and ran[-1] == [*base, "down"]
    assert "start dgx-spark-tp2-node1 on the other node" in out
    # Said in words, with no rich markup printed as text.
    assert "boot failed: NCCL error" in out and "log tail:" in out
    assert "[/]" not in out and "[dim]" not in out and "[bold" not in out


def test_boot_without_a_recipe_starts_the_auto_service(tmp_path):
    import json

    docker, calls = fake_docker(tmp_path, "cuda-oom.log")
    done = verify(
        "--boot",
        "--docker",
        str(docker),
        "--boot-timeout",
        "30",
        "--base-url",
        f"http://127.0.0.1:{free_port()}",
        "--no-files",
    )
    assert done.returncode == 3, done.stdout + done.stderr
    first = json.loads(calls.read_text().splitlines()[0])
    assert first[0] == "compose" and first[-4:] == ["--profile", "auto", "up", "-d"]


def test_the_log_as_of_healthy_holds_every_line_written_before(tmp_path):
    """/health can answer between a line's write and the follower's read of it:
    settle() waits for the follower to reach the file's end as of now, so what
    boot returns with holds every line the server wrote before it answered."""
    from verify.boot import Server

    marker = tmp_path / "written"
    lines = [f"line {n}" for n in range(200)]
    server = Server.command(
        f"printf '%s\\n' {' '.join(repr(x) for x in lines)}; touch {marker}; sleep 30"
    )
    server.start()
    try:
        until = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < until:
            time.sleep(0.01)
        assert marker.exists()
        assert server.settle() == lines  # nothing taken yet: all of it, in order
        assert server.settle() == []
    finally:
        server.stop()
