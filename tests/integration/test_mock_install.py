"""`pip install -e '.[mock]'` in a clean virtualenv, as README says, pulls no CUDA
wheel (issue 29: 5.9 GB, CUDA torch and 3.2 GB of nvidia-* libraries for a CPU
stand-in), has what the mock needs (issue 30: it then said "needs triton"), and
the mock server it installs starts.

pip uses this machine's configured indexes (on CI the local wheel folder holds
the CPU torch, as PyTorch's CPU index does for users); the sglang wheel the
mock unpacks comes from the suite's wheel cache (SM12X_OFFLINE=1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sm12x.mock.server import free_port
from sm12x.versions import load_versions
from tests.support.calibrate import scaled

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mock-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    done = subprocess.run(
        [str(folder / "bin" / "pip"), "install", "-q", "-e", f"{ROOT}[mock]"],
        capture_output=True,
        text=True,
        timeout=scaled(900),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


def installed(venv: Path) -> dict[str, str]:
    out = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


def test_the_mock_extra_pulls_no_cuda_wheel(venv):
    found = installed(venv)
    pins = load_versions()
    assert not [name for name in found if name.startswith("nvidia-")], sorted(found)
    assert found["torch"] == f"{pins['TEST_TORCH_VERSION']}+cpu", found["torch"]
    assert found["triton"] == pins["TEST_TRITON_VERSION"]
    assert "torchvision" not in found  # the mock stubs it; it would pull its own torch


def test_the_installed_mock_server_starts(venv, tmp_path):
    port = free_port()
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "SM12X_ENV_FILE": os.devnull,
        "SM12X_OFFLINE": "1",
        # The suite's wheel cache: the sglang wheel the mock unpacks.
        **({"SM12X_CACHE": os.environ["SM12X_CACHE"]} if "SM12X_CACHE" in os.environ else {}),
    }
    log = tmp_path / "mock.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(venv / "bin" / "sm12x"), "mock-server", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + scaled(240)
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        assert "listening on" in log.read_text()
    finally:
        proc.kill()
        proc.wait(timeout=30)
