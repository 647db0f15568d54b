"""versions.env is the one place pins live; its parser is strict."""

from __future__ import annotations

import re
import subprocess
import zipfile

import pytest

from sm12x.versions import VersionsFileError, load_versions, parse_versions
from support import wheels
from support.wheels import ROOT


def test_every_pin_the_project_needs_is_there():
    pins = load_versions()
    for key in ("SM12X_VERSION", "SGLANG_VERSION", "FLASHINFER_VERSION", "FLASHINFER_CUBIN_VERSION",
                "FLASHINFER_JIT_CACHE_VERSION", "TORCH_VERSION", "CUDA_VERSION", "BASE_IMAGE",
                "SGLANG_ROUTER_VERSION", "FLASHINFER_CANARY_VERSION", "TEST_TORCH_VERSION",
                "TEST_TRITON_VERSION"):
        assert key in pins, key
    assert pins["FLASHINFER_VERSION"] == pins["FLASHINFER_CUBIN_VERSION"] == pins[
        "FLASHINFER_JIT_CACHE_VERSION"], "flashinfer python, cubin and jit-cache must be one version"


def test_bash_and_python_read_the_same_values():
    keys = sorted(load_versions())
    script = ". ./versions.env && " + " && ".join(f'printf "%s\\n" "${k}"' for k in keys)
    out = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert dict(zip(keys, out)) == load_versions()


def test_pyproject_takes_its_version_from_versions_env():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text
    assert re.search(r'path = "versions.env"', text)


@pytest.mark.parametrize("bad, message", [
    ("SGLANG_VERSION = 0.5.16", "expected KEY=value"),
    ('SGLANG_VERSION="0.5.16"', "expected KEY=value"),
    ("A=1\nA=2", "A is set twice"),
])
def test_malformed_lines_are_named(bad, message):
    with pytest.raises(VersionsFileError, match=message):
        parse_versions(bad, "versions.env")


def _requires(dist: str, version: str) -> dict[str, str]:
    """name -> exact pinned version, from a cached wheel's METADATA (markers skipped)."""
    with zipfile.ZipFile(wheels.wheel(dist, version)) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(meta).decode().splitlines()
    pins = {}
    for line in lines:
        if line.startswith("Requires-Dist:") and ";" not in line and "==" in line:
            name, _, pinned = line.split(":", 1)[1].strip().partition("==")
            pins[re.sub(r"\[.*\]", "", name).strip().replace("_", "-").lower()] = pinned.strip()
    return pins


def test_the_image_stack_is_the_pinned_sglang_s_own():
    """No override of sglang's stack: flashinfer and torch are the versions the
    pinned sglang itself requires, and the base is that sglang's runtime image."""
    pins = load_versions()
    required = _requires("sglang", pins["SGLANG_VERSION"])
    assert required["flashinfer-python"] == pins["FLASHINFER_VERSION"], (
        f"sglang {pins['SGLANG_VERSION']} pins flashinfer {required['flashinfer-python']}, "
        f"versions.env {pins['FLASHINFER_VERSION']}")
    assert required["torch"] == pins["TORCH_VERSION"]
    cuda = pins["CUDA_VERSION"].replace(".", "")
    assert pins["BASE_IMAGE"] == f"lmsysorg/sglang:v{pins['SGLANG_VERSION']}-cu{cuda}-runtime"
