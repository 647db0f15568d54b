"""scripts/image-build's checks, on fake installed distributions (no Docker, no pip).

Each case puts a few `.dist-info` folders (and packages) on PYTHONPATH, runs a
step and reads its one-line verdict; the image build runs the same steps on
the real thing (tests/integration/test_image.py).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.wheels import ROOT

SCRIPT = ROOT / "scripts" / "image-build"


def load_module():
    loader = importlib.machinery.SourceFileLoader("image_build", str(SCRIPT))
    spec = importlib.util.spec_from_loader("image_build", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def dist(site: Path, name: str, version: str, *, package: str | None = None,
         requires: tuple[str, ...] = (), wheel_tag: str | None = None) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    files = [f"{info.name}/METADATA,,"]
    if wheel_tag:
        (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {wheel_tag}\n")
        files.append(f"{info.name}/WHEEL,,")
    (info / "RECORD").write_text("\n".join(files) + "\n")
    if package:
        (site / package).mkdir(exist_ok=True)
        (site / package / "__init__.py").write_text("")


def run(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -S: only the fake site (and the standard library) is importable.
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-S", str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=site)


def test_check_base_accepts_the_pinned_sglang(tmp_path):
    dist(tmp_path, "sglang", "0.5.16", package="sglang")
    proc = run(tmp_path, "check-base", "--sglang", "0.5.16")
    assert proc.returncode == 0, proc.stderr
    assert "sglang 0.5.16 at" in proc.stdout


def test_check_base_names_both_versions_when_they_differ(tmp_path):
    dist(tmp_path, "sglang", "0.5.17", package="sglang")
    proc = run(tmp_path, "check-base", "--sglang", "0.5.16")
    assert proc.returncode == 1
    assert ("image-build: error: the base has sglang 0.5.17, versions.env pins "
            "SGLANG_VERSION=0.5.16") in proc.stderr


def test_check_base_refuses_a_base_without_sglang(tmp_path):
    proc = run(tmp_path, "check-base", "--sglang", "0.5.16")
    assert proc.returncode == 1 and "the base has no sglang" in proc.stderr


def test_check_patches_refuses_a_label_that_would_lie(tmp_path):
    dist(tmp_path, "sglang", "0.5.16", package="sglang")
    record = {"sglang": "0.5.16", "patches": [{"file": "0001-a.patch"}]}
    (tmp_path / "sglang" / ".sm12x-patches.json").write_text(json.dumps(record))
    ok = run(tmp_path, "check-patches", "--sglang", "0.5.16", "--expect", "0001-a.patch")
    assert ok.returncode == 0, ok.stderr
    lie = run(tmp_path, "check-patches", "--sglang", "0.5.16",
              "--expect", "0001-a.patch,0002-b.patch")
    assert lie.returncode == 1
    assert "applied 0001-a.patch but the image is labelled" in lie.stderr
    other = run(tmp_path, "check-patches", "--sglang", "0.5.17", "--expect", "0001-a.patch")
    assert other.returncode == 1 and "patched sglang 0.5.16, not 0.5.17" in other.stderr


def test_check_patches_without_a_record(tmp_path):
    dist(tmp_path, "sglang", "0.5.16", package="sglang")
    proc = run(tmp_path, "check-patches", "--sglang", "0.5.16", "--expect", "x.patch")
    assert proc.returncode == 1 and "apply-patches did not finish" in proc.stderr


@pytest.mark.parametrize("arch, amd64, arm64, expected", [
    ("x86_64", "", "", "0.6.15.post1+cu130"),
    ("aarch64", "", "", "0.6.15.post1+cu130"),
    ("aarch64", "", "0.6.15.post2", "0.6.15.post2+cu130"),
    ("x86_64", "0.6.15.post1+cu129", "", "0.6.15.post1+cu129"),
])
def test_jit_cache_version_per_arch(arch, amd64, arm64, expected):
    module = load_module()
    args = module.argparse.Namespace(jit_cache_version="0.6.15.post1", cuda="13.0",
                                     jit_cache_version_amd64=amd64, jit_cache_version_arm64=arm64)
    assert module.jit_cache_version(args, arch) == expected


def test_targetarch_maps_to_the_wheel_machine_and_refuses_others():
    module = load_module()
    assert module.machine("amd64") == "x86_64" and module.machine("arm64") == "aarch64"
    with pytest.raises(module.BuildError, match="amd64 and arm64 only"):
        module.machine("ppc64le")


# Loads the script as module `mod` in a subprocess (whose sys.path is the fake site).
LOAD = ("import importlib.machinery as m, importlib.util as u; "
        f"loader = m.SourceFileLoader('b', {str(SCRIPT)!r}); "
        "mod = u.module_from_spec(u.spec_from_loader('b', loader)); loader.exec_module(mod)\n")


def check_flashinfer_in(site: Path, prebuilt: bool, arch: str = "x86_64") -> str:
    code = (LOAD + "import argparse; "
            "args = argparse.Namespace(version='0.6.15.post1', cubin_version='0.6.15.post1', "
            "jit_cache_version='0.6.15.post1', jit_cache_version_amd64='', "
            "jit_cache_version_arm64='', cuda='13.0')\n"
            f"try:\n    mod.check_flashinfer(args, {arch!r}, {prebuilt})\n"
            "except mod.BuildError as e:\n    print('ERROR', e)\n")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(site)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_check_flashinfer_prebuilt_wants_all_three_at_one_version_for_this_arch(tmp_path):
    dist(tmp_path, "flashinfer-python", "0.6.15.post1", requires=("torch",))
    dist(tmp_path, "flashinfer-cubin", "0.6.15.post1")
    dist(tmp_path, "flashinfer-jit-cache", "0.6.15.post1+cu130",
         wheel_tag="cp39-abi3-manylinux_2_28_x86_64")
    out = check_flashinfer_in(tmp_path, True)
    assert "ERROR" not in out, out
    assert "requires torch, not installed" in out  # --no-deps leftovers are reported
    wrong_arch = check_flashinfer_in(tmp_path, True, arch="aarch64")
    assert "ERROR flashinfer-jit-cache 0.6.15.post1+cu130 is built for" in wrong_arch


def test_check_flashinfer_catches_a_stale_cubin(tmp_path):
    dist(tmp_path, "flashinfer-python", "0.6.15.post1")
    dist(tmp_path, "flashinfer-cubin", "0.6.14")
    assert "ERROR flashinfer-cubin is 0.6.14, not 0.6.15.post1" in check_flashinfer_in(tmp_path,
                                                                                      True)
    assert "ERROR FLASHINFER_PREBUILT=0 but flashinfer-cubin" in check_flashinfer_in(tmp_path,
                                                                                    False)


def test_sglang_exact_pins_become_constraints_for_what_is_missing(tmp_path):
    dist(tmp_path, "sglang", "0.5.16", package="sglang", requires=(
        "openai==2.6.1", "flashinfer_python[cu13]==0.6.14", "numpy", "pytest==8.0; extra == 'test'",
        "uvloop==0.21.0; sys_platform == 'win32'"))
    code = LOAD + "print(sorted(mod.sglang_exact_pins().values()))"
    # Without -S: the pins are read with pip's vendored packaging.
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['flashinfer-python==0.6.14', 'openai==2.6.1']"


def sparse_mla_in(site: Path, bindir: Path, required: bool) -> subprocess.CompletedProcess[str]:
    code = (LOAD + f"mod.CUDA_BIN = mod.Path({str(bindir / 'no-cuda')!r})\n"
            f"try:\n    mod.sparse_mla(required={required})\n"
            "except mod.BuildError as e:\n    print('ERROR', e)\n")
    return subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(site),
                                           "PATH": str(bindir)})


def fake_tool(bindir: Path, name: str, output: str = "") -> None:
    bindir.mkdir(exist_ok=True)
    path = bindir / name
    # PATH holds only bindir: a shell builtin, not cat.
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' '{output}'\n")
    path.chmod(0o755)


def test_sparse_mla_report_names_the_prebuilt_archs(tmp_path):
    site, bindir = tmp_path / "site", tmp_path / "bin"
    module = site / "flashinfer_jit_cache" / "jit_cache" / "sparse_mla_sm120"
    module.mkdir(parents=True)
    (site / "flashinfer_jit_cache" / "__init__.py").write_text("")
    (module / "sparse_mla_sm120.so").write_bytes(b"\x7fELF")
    fake_tool(bindir, "cuobjdump", "ELF file    1: sparse_mla_sm120.1.sm_120a.cubin\n"
                                   "ELF file    2: sparse_mla_sm120.2.sm_121a.cubin")
    proc = sparse_mla_in(site, bindir, required=True)
    assert proc.returncode == 0, proc.stderr
    assert "sparse_mla_sm120: prebuilt in flashinfer-jit-cache (sm_120a, sm_121a)" in proc.stdout
    assert "nvcc absent" in proc.stdout


def test_sparse_mla_compiled_at_first_use_when_only_nvcc_is_there(tmp_path):
    bindir = tmp_path / "bin"
    fake_tool(bindir, "nvcc")
    proc = sparse_mla_in(tmp_path, bindir, required=True)
    assert "not prebuilt; compiled by" in proc.stdout and "ERROR" not in proc.stdout


def test_sparse_mla_with_neither_fails_a_real_build_only(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    assert "ERROR sparse_mla_sm120 is neither in flashinfer-jit-cache nor compilable" in \
        sparse_mla_in(tmp_path, bindir, required=True).stdout
    assert "acceptable only for a stand-in build" in sparse_mla_in(tmp_path, bindir,
                                                                  required=False).stdout


def test_only_versions_pip_accepts_become_constraints():
    module = load_module()
    assert module.pep440("2.11.0+cu130") and module.pep440("4.3.0.dev0")
    assert not module.pep440("main-20260101") and not module.pep440("")
