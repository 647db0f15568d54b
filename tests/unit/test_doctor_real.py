"""doctor as a process on this machine, and its facts checked against the wheels."""

from __future__ import annotations

import ast
import json
import re
import shutil
import zipfile

import pytest

from sm12x.doctor.model_dir import ARCHITECTURE
from sm12x.mock import wheels
from tests.support import compose
from tests.support.cli import run_sm12x


def test_doctor_process_on_a_machine_without_gpus(tmp_path):
    """The CI machine has no NVIDIA driver: doctor says so, as JSON, exit 1, no traceback."""
    result = run_sm12x("doctor", "--json", "--timeout", "10", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    checks = {c["id"]: c for c in data["checks"]}
    assert data["passed"] is False
    assert checks["gpus"]["verdict"] == "fail" and checks["gpus"]["fix"]
    assert checks["model-dir"]["verdict"] == "fail"  # no .env in an empty folder
    assert checks["shm"]["verdict"] in ("ok", "warn", "fail")


def test_doctor_table_process(tmp_path):
    result = run_sm12x("doctor", "--timeout", "10", cwd=tmp_path)
    assert result.returncode == 1
    assert "not ready" in result.stdout and "GPUs" in result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17", "0.5.18"])
def test_architecture_is_sglangs_deepseek_v4_entry_class(version):
    with zipfile.ZipFile(wheels.wheel("sglang", version)) as archive:
        tree = ast.parse(archive.read("sglang/srt/models/deepseek_v4.py").decode())
    entry = next(
        n
        for n in tree.body
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in n.targets)
    )
    assert ARCHITECTURE in [e.id for e in entry.value.elts]


@pytest.mark.skipif(
    shutil.which("docker", path="/usr/bin:/bin") is None,
    reason="no docker CLI on this machine (scripts/test installs docker.io)",
)
def test_compose_is_checked_by_the_real_cli_without_a_daemon(tmp_path):
    """The docker CLI with the real Compose v2 binary as its plugin, and no daemon
    (DOCKER_HOST points at nothing): Compose is still checked, not skipped."""
    plugins = tmp_path / "docker-config" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-compose").symlink_to(compose.binary())
    env = {
        "DOCKER_CONFIG": str(tmp_path / "docker-config"),
        "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock",
    }
    result = run_sm12x("doctor", "--json", "--timeout", "20", env=env, cwd=tmp_path)
    checks = {c["id"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["docker"]["verdict"] == "fail"
    assert checks["compose"]["verdict"] == "ok", checks["compose"]
    assert checks["compose"]["detail"] == f"Compose {compose_version()}"
    # The same CLI without the plugin: a failure that names the package to install.
    (plugins / "docker-compose").unlink()
    result = run_sm12x("doctor", "--json", "--timeout", "20", env=env, cwd=tmp_path)
    check = {c["id"]: c for c in json.loads(result.stdout)["checks"]}["compose"]
    assert check["verdict"] == "fail" and "unknown shorthand flag: 'd'" in check["detail"]
    assert re.search(
        r"docker-compose-plugin|docker-compose-v2|sudo apt-get install "
        r"docker-compose",
        check["fix"],
    ), check["fix"]


def compose_version() -> str:
    import subprocess

    out = subprocess.run(
        [str(compose.binary()), "version", "--short"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()
