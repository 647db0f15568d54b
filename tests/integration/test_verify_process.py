"""The mock server (`sm12x mock-server`) as a separate process (as sglang-router and boot mode see
it), verify as a process, bad input, and a server dying mid-run."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from sm12x.mock.server import free_port
from tests.support import http_client

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def start_fake(*args: str, api_key: str | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [PY, "-m", "sm12x.mock", "--port", str(port), *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **({"SM12X_API_KEY": api_key} if api_key else {})},
    )
    url = f"http://127.0.0.1:{port}"
    # it imports sglang's serving code and DeepSeek-V4's tokenizer (and builds
    # the sglang tree on a fresh cache) before it listens
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if http_client.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the mock server did not start")


def verify(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "verify", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_server_dies_mid_run(tmp_path):
    proc, url = start_fake("--die-after", "6")
    try:
        done = verify(
            "--base-url",
            url,
            "--soak-concurrency",
            "8",
            "--soak-rounds",
            "1",
            "--json",
            str(tmp_path / "r.json"),
            "--junit",
            str(tmp_path / "j.xml"),
        )
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 1, done.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    failed = [c for c in report["checks"] if c["verdict"] == "fail"]
    assert failed and any(
        "cannot connect" in (c["problem"] or "") or "broke" in (c["problem"] or "") for c in failed
    )
    assert "Traceback" not in done.stdout + done.stderr


def test_bad_input_one_clear_error():
    for args, text in [
        (["--base-url", "not a url"], "--base-url"),
        (["--base-url", f"http://127.0.0.1:{free_port()}"], "cannot reach"),
        (["--skip", "nonsense"], "unknown check"),
        (["--timeout", "-1"], "must be positive"),
        (["--timeout", "nan"], "finite"),
        (["--timeout", "inf"], "finite"),
        (["--stall-timeout", "nan"], "finite"),
        (["--soak-rounds", "0"], "at least 1"),
        (["--json", "/dev/null/report.json"], "--json: cannot write"),
        (["--json", "/tmp/sm12x-same.xml", "--junit", "/tmp/sm12x-same.xml"], "same file"),
        (["--only", "soak", "--skip", "models"], "--only soak needs models"),
        (["--frobnicate"], "unrecognized arguments"),
    ]:
        done = verify(*args, timeout=60)
        out = done.stdout + done.stderr
        assert done.returncode == 2, (args, out)
        assert text in out and "Traceback" not in out, (args, out)


def test_cli_writes_reports_and_exits_zero_when_healthy(tmp_path):
    proc, url = start_fake()
    try:
        done = verify(
            "--base-url",
            url + "/v1",
            "--soak-concurrency",
            "8",
            "--soak-rounds",
            "1",
            "--json",
            str(tmp_path / "r.json"),
            "--junit",
            str(tmp_path / "j.xml"),
        )
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 0, done.stdout
    assert "PASS" in done.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["passed"] is True and report["verify"]["model"].startswith("deepseek-ai/")
    junit = (tmp_path / "j.xml").read_text()
    assert 'name="soak"' in junit and "<failure" not in junit


def test_only_soak_runs_the_soak_and_what_it_needs(tmp_path):
    proc, url = start_fake()
    try:
        done = verify(
            "--base-url",
            url,
            "--only",
            "soak",
            "--soak-concurrency",
            "4",
            "--soak-rounds",
            "1",
            "--json",
            str(tmp_path / "r.json"),
            "--junit",
            str(tmp_path / "j.xml"),
        )
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 0, done.stdout
    checks = {c["name"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    assert checks["soak"]["verdict"] == "pass" and checks["soak"]["metrics"]["requests"] == 4
    assert {n for n, c in checks.items() if c["verdict"] == "pass"} == {
        "health",
        "models",
        "one-token",
        "soak",
    }
    assert "run because --only soak needs it" in checks["health"]["evidence"][0]


def test_credentials_never_reach_the_reports(tmp_path):
    proc, url = start_fake()
    secret_url = url.replace("http://", "http://alice:hunter2-pass@")
    try:
        done = verify(
            "--base-url",
            secret_url,
            "--only",
            "health,models",
            "--json",
            str(tmp_path / "r.json"),
            "--junit",
            str(tmp_path / "j.xml"),
        )
    finally:
        proc.kill()
        proc.wait()
    written = (tmp_path / "r.json").read_text() + (tmp_path / "j.xml").read_text()
    for text in (written, done.stdout + done.stderr):
        assert "hunter2-pass" not in text and "alice" not in text
    assert json.loads((tmp_path / "r.json").read_text())["verify"]["base_url"].startswith(
        "http://***@127.0.0.1:"
    )


def test_no_server_still_writes_the_reports(tmp_path):
    done = verify(
        "--base-url",
        f"http://127.0.0.1:{free_port()}",
        "--json",
        str(tmp_path / "r.json"),
        "--junit",
        str(tmp_path / "j.xml"),
        timeout=60,
    )
    assert done.returncode == 2
    report = json.loads((tmp_path / "r.json").read_text())
    health = report["checks"][0]
    assert health["verdict"] == "fail" and "cannot reach" in health["problem"]
    assert "nothing listens" in health["cause"]
    assert "<failure" in (tmp_path / "j.xml").read_text()


# --- the settings every command reads (sm12x.settings) ---------------------------


def sm12x_verify(*args: str, cwd: Path, env: dict[str, str] | None = None):
    import os

    # Discovery as a user has it: .env in the current folder, nothing named.
    base = {**os.environ, "PYTHONPATH": str(ROOT), "SM12X_ENV_FILE": ""}
    base.pop("SM12X_API_KEY", None)
    return subprocess.run(
        [PY, "-m", "sm12x.cli", "verify", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **(env or {})},
    )


def test_verify_sends_the_key_and_asks_the_port_set_in_dotenv(tmp_path):
    # The bug this settles: the key in .env, and verify got HTTP 401 and advised
    # setting the variable that was set.
    proc, url = start_fake(api_key="sk-dotenv")
    port = url.rsplit(":", 1)[1]
    try:
        (tmp_path / ".env").write_text(f"SM12X_API_KEY=sk-dotenv\nSM12X_PORT={port}\n")
        done = sm12x_verify("--only", "health,models,one-token", "--no-files", cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "sk-dotenv" not in done.stdout + done.stderr
        # Without the key: the 401 is named, with the one variable to set.
        (tmp_path / ".env").write_text(f"SM12X_PORT={port}\n")
        done = sm12x_verify("--only", "health,models", "--no-files", cwd=tmp_path)
        assert done.returncode == 1
        assert "SM12X_API_KEY" in done.stdout and "OPENAI_API_KEY" not in done.stdout
    finally:
        proc.kill()
        proc.wait()


def test_verify_explain_says_where_the_server_and_key_come_from(tmp_path):
    (tmp_path / ".env").write_text("SM12X_API_KEY=sk-x\nSM12X_BIND=0.0.0.0\n")
    done = sm12x_verify("--explain", "--port", "31000", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "# SM12X_API_KEY=(set)" in out and "sk-x" not in out
    assert "# SM12X_PORT=31000" in out and "flag --port" in out
    assert "# base URL: http://127.0.0.1:31000" in out


def test_unpatched_sglang_fails_naming_the_symptom(tmp_path):
    """The stand-in serving sglang without sm12x's streaming patches
    (--sglang-patches none): DSPARK's multi-token chunks cut the text before a
    tool call, and verify fails saying so; the same stand-in on the patched
    code passes (test_verify_faults.py's healthy case)."""
    proc, url = start_fake("--sglang-patches", "none")
    try:
        done = verify(
            "--base-url",
            url,
            "--soak-concurrency",
            "16",
            "--soak-rounds",
            "2",
            "--json",
            str(tmp_path / "r.json"),
            "--junit",
            str(tmp_path / "j.xml"),
            timeout=300,
        )
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 1, done.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    failed = {c["name"]: c for c in report["checks"] if c["verdict"] == "fail"}
    assert failed and set(failed) <= {"tools-stream", "tools-parallel", "tool-choice", "soak"}
    assert {c["verdict"] for c in report["checks"]} <= {"pass", "fail", "skip"}
    said = " ".join(f"{c['problem']} {c['cause']} {c['fix']}" for c in failed.values())
    assert "text before a tool call lost" in said and "sm12x image" in said
