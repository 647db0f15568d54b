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
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.cli import ROOT

SCRIPT = ROOT / "scripts" / "image-build"
request_cleanup: list[Path] = []


@pytest.fixture(autouse=True, scope="module")
def _cleanup():
    yield
    for path in request_cleanup:
        shutil.rmtree(path, ignore_errors=True)


def load_module():
    loader = importlib.machinery.SourceFileLoader("image_build", str(SCRIPT))
    spec = importlib.util.spec_from_loader("image_build", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def dist(
    site: Path,
    name: str,
    version: str,
    *,
    package: str | None = None,
    requires: tuple[str, ...] = (),
    wheel_tag: str | None = None,
) -> None:
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
    return subprocess.run(
        [sys.executable, "-S", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=site,
    )


def test_check_base_accepts_the_pinned_sglang(tmp_path):
    dist(tmp_path, "sglang", "0.5.16", package="sglang")
    proc = run(tmp_path, "check-base", "--sglang", "0.5.16")
    assert proc.returncode == 0, proc.stderr
    assert "sglang 0.5.16 at" in proc.stdout


def test_check_base_names_both_versions_when_they_differ(tmp_path):
    dist(tmp_path, "sglang", "0.5.17", package="sglang")
    proc = run(tmp_path, "check-base", "--sglang", "0.5.16")
    assert proc.returncode == 1
    assert (
        "image-build: error: the base has sglang 0.5.17, versions.env pins SGLANG_VERSION=0.5.16"
    ) in proc.stderr


def test_check_base_refuses_a_base_without_sglang(tmp_path):
    proc = run(tmp_path, "check-base", "--sglang", "0.5.16")
    assert proc.returncode == 1 and "the base has no sglang" in proc.stderr


def test_check_patches_refuses_a_label_that_would_lie(tmp_path):
    dist(tmp_path, "sglang", "0.5.16", package="sglang")
    record = {"sglang": "0.5.16", "patches": [{"file": "0001-a.patch"}]}
    (tmp_path / "sglang" / ".sm12x-patches.json").write_text(json.dumps(record))
    ok = run(tmp_path, "check-patches", "--sglang", "0.5.16", "--expect", "0001-a.patch")
    assert ok.returncode == 0, ok.stderr
    lie = run(
        tmp_path, "check-patches", "--sglang", "0.5.16", "--expect", "0001-a.patch,0002-b.patch"
    )
    assert lie.returncode == 1
    assert "applied 0001-a.patch but the image is labelled" in lie.stderr
    other = run(tmp_path, "check-patches", "--sglang", "0.5.17", "--expect", "0001-a.patch")
    assert other.returncode == 1 and "patched sglang 0.5.16, not 0.5.17" in other.stderr


def test_check_patches_without_a_record(tmp_path):
    dist(tmp_path, "sglang", "0.5.16", package="sglang")
    proc = run(tmp_path, "check-patches", "--sglang", "0.5.16", "--expect", "x.patch")
    assert proc.returncode == 1 and "apply-patches did not finish" in proc.stderr


@pytest.mark.parametrize(
    "arch, amd64, arm64, expected",
    [
        ("x86_64", "", "", "0.6.15.post1+cu130"),
        ("aarch64", "", "", "0.6.15.post1+cu130"),
        ("aarch64", "", "0.6.15.post2", "0.6.15.post2+cu130"),
        ("x86_64", "0.6.15.post1+cu129", "", "0.6.15.post1+cu129"),
    ],
)
def test_jit_cache_version_per_arch(arch, amd64, arm64, expected):
    module = load_module()
    args = module.argparse.Namespace(
        jit_cache_version="0.6.15.post1",
        cuda="13.0",
        jit_cache_version_amd64=amd64,
        jit_cache_version_arm64=arm64,
    )
    assert module.jit_cache_version(args, arch) == expected


def test_targetarch_maps_to_the_wheel_machine_and_refuses_others():
    module = load_module()
    assert module.machine("amd64") == "x86_64" and module.machine("arm64") == "aarch64"
    with pytest.raises(module.BuildError, match="amd64 and arm64 only"):
        module.machine("ppc64le")


# Loads the script as module `mod` in a subprocess (whose sys.path is the fake site).
LOAD = (
    "import importlib.machinery as m, importlib.util as u; "
    f"loader = m.SourceFileLoader('b', {str(SCRIPT)!r}); "
    "mod = u.module_from_spec(u.spec_from_loader('b', loader)); loader.exec_module(mod)\n"
)


def check_flashinfer_in(site: Path, prebuilt: bool, arch: str = "x86_64") -> str:
    code = (
        LOAD + "import argparse; "
        "args = argparse.Namespace(version='0.6.15.post1', cubin_version='0.6.15.post1', "
        "jit_cache_version='0.6.15.post1', jit_cache_version_amd64='', "
        "jit_cache_version_arm64='', cuda='13.0')\n"
        f"try:\n    mod.check_flashinfer(args, {arch!r}, {prebuilt})\n"
        "except mod.BuildError as e:\n    print('ERROR', e)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_check_flashinfer_prebuilt_wants_all_three_at_one_version_for_this_arch(tmp_path):
    dist(tmp_path, "flashinfer-python", "0.6.15.post1", requires=("torch",))
    dist(tmp_path, "flashinfer-cubin", "0.6.15.post1")
    dist(
        tmp_path,
        "flashinfer-jit-cache",
        "0.6.15.post1+cu130",
        wheel_tag="cp39-abi3-manylinux_2_28_x86_64",
    )
    out = check_flashinfer_in(tmp_path, True)
    assert "ERROR" not in out, out
    assert "requires torch, not installed" in out  # --no-deps leftovers are reported
    wrong_arch = check_flashinfer_in(tmp_path, True, arch="aarch64")
    assert "ERROR flashinfer-jit-cache 0.6.15.post1+cu130 is built for" in wrong_arch


def test_check_flashinfer_catches_a_stale_cubin(tmp_path):
    dist(tmp_path, "flashinfer-python", "0.6.15.post1")
    dist(tmp_path, "flashinfer-cubin", "0.6.14")
    assert "ERROR flashinfer-cubin is 0.6.14, not 0.6.15.post1" in check_flashinfer_in(
        tmp_path, True
    )
    assert "ERROR FLASHINFER_PREBUILT=0 but flashinfer-cubin" in check_flashinfer_in(
        tmp_path, False
    )


def test_sglang_exact_pins_become_constraints_for_what_is_missing(tmp_path):
    dist(
        tmp_path,
        "sglang",
        "0.5.16",
        package="sglang",
        requires=(
            "openai==2.6.1",
            "flashinfer_python[cu13]==0.6.14",
            "numpy",
            "pytest==8.0; extra == 'test'",
            "uvloop==0.21.0; sys_platform == 'win32'",
        ),
    )
    code = LOAD + "print(sorted(mod.sglang_exact_pins().values()))"
    # Without -S: the pins are read with pip's vendored packaging.
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['flashinfer-python==0.6.14', 'openai==2.6.1']"


def sparse_mla_in(site: Path, bindir: Path, required: bool) -> subprocess.CompletedProcess[str]:
    code = (
        LOAD + f"mod.CUDA_BIN = mod.Path({str(bindir / 'no-cuda')!r})\n"
        f"try:\n    mod.sparse_mla(required={required})\n"
        "except mod.BuildError as e:\n    print('ERROR', e)\n"
    )
    return subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(site), "PATH": str(bindir)},
    )


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
    fake_tool(
        bindir,
        "cuobjdump",
        "ELF file    1: sparse_mla_sm120.1.sm_120a.cubin\n"
        "ELF file    2: sparse_mla_sm120.2.sm_121a.cubin",
    )
    proc = sparse_mla_in(site, bindir, required=True)
    assert proc.returncode == 0, proc.stderr
    assert "sparse_mla_sm120: prebuilt in flashinfer-jit-cache (sm_120a, sm_121a)" in proc.stdout
    assert "nvcc absent" in proc.stdout


def dist_info(site: Path, name: str, version: str, files: list[str], requires=()) -> None:
    """An installed distribution as pip leaves one: METADATA and RECORD."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("Metadata-Version: 2.1\n" + "\n".join(lines) + "\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))


def jit_cache_shim(site: Path) -> None:
    """flashinfer 0.7's flashinfer-jit-cache: a package with no kernels that
    requires its per-arch provider (flashinfer-jit-cache-sm120f)."""
    (site / "flashinfer_jit_cache").mkdir(parents=True)
    (site / "flashinfer_jit_cache" / "__init__.py").write_text("")
    dist_info(
        site,
        "flashinfer-jit-cache",
        "0.7.2+cu130",
        ["flashinfer_jit_cache/__init__.py"],
        requires=["flashinfer-jit-cache-sm120f==0.7.2+cu130"],
    )


def test_sparse_mla_found_in_flashinfer_0_7_s_provider(tmp_path):
    # 0.7: flashinfer-jit-cache is a shim; the kernels live in the per-arch
    # provider it requires (flashinfer-jit-cache-sm120f), under its own package.
    site, bindir = tmp_path / "site", tmp_path / "bin"
    jit_cache_shim(site)
    library = "flashinfer_jit_cache_sm120f/sparse_mla_sm120/sparse_mla_sm120.so"
    (site / library).parent.mkdir(parents=True)
    (site / library).write_bytes(b"\x7fELF")
    dist_info(site, "flashinfer-jit-cache-sm120f", "0.7.2+cu130", [library])
    fake_tool(bindir, "cuobjdump", "ELF file    1: sparse_mla_sm120.1.sm_120f.cubin")
    proc = sparse_mla_in(site, bindir, required=True)
    assert proc.returncode == 0, proc.stderr
    assert "ERROR" not in proc.stdout, proc.stdout
    assert "sparse_mla_sm120: prebuilt in flashinfer-jit-cache (sm_120f)" in proc.stdout


def test_sparse_mla_in_a_shim_without_its_provider_is_not_prebuilt(tmp_path):
    site, bindir = tmp_path / "site", tmp_path / "bin"
    jit_cache_shim(site)
    fake_tool(bindir, "cuobjdump")
    assert "ERROR sparse_mla_sm120 is neither in flashinfer-jit-cache nor compilable" in (
        sparse_mla_in(site, bindir, required=True).stdout
    )


def test_sparse_mla_compiled_at_first_use_when_only_nvcc_is_there(tmp_path):
    bindir = tmp_path / "bin"
    fake_tool(bindir, "nvcc")
    proc = sparse_mla_in(tmp_path, bindir, required=True)
    assert "not prebuilt; compiled by" in proc.stdout and "ERROR" not in proc.stdout


def test_sparse_mla_with_neither_fails_a_real_build_only(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    assert (
        "ERROR sparse_mla_sm120 is neither in flashinfer-jit-cache nor compilable"
        in sparse_mla_in(tmp_path, bindir, required=True).stdout
    )
    assert (
        "acceptable only for a stand-in build"
        in sparse_mla_in(tmp_path, bindir, required=False).stdout
    )


def test_only_versions_pip_accepts_become_constraints():
    module = load_module()
    assert module.pep440("2.11.0+cu130") and module.pep440("4.3.0.dev0")
    assert not module.pep440("main-20260101") and not module.pep440("")


# --- check-kernels: the GPU code of every kernel library, for the target's GPUs ----------

FAKE_CUOBJDUMP = ROOT / "tests" / "support" / "fake_cuobjdump"


def kernel_site(site: Path, dist_name: str, package: str, elf: str, ptx: str = "") -> Path:
    """A kernel distribution whose one .so stands for the given device code."""
    dist(site, dist_name, "0.4.5", package=package)
    library = site / package / "common_ops.abi3.so"
    library.write_bytes(
        b"\x7fELF\0host code\n" + f"SM12X-FAKE-DEVICE-CODE elf={elf} ptx={ptx}\n".encode()
    )
    record = next(site.glob(f"{dist_name.replace('-', '_')}-*.dist-info")) / "RECORD"
    record.write_text(record.read_text() + f"{package}/common_ops.abi3.so,,\n")
    return library


def check_kernels_in(
    site: Path, tmp_path: Path, targetarch: str, required: str = "1"
) -> subprocess.CompletedProcess[str]:
    bindir = tmp_path / "cuda-bin"
    bindir.mkdir(exist_ok=True)
    if not (bindir / "cuobjdump").exists():
        (bindir / "cuobjdump").symlink_to(FAKE_CUOBJDUMP)
    env = {**os.environ, "PYTHONPATH": str(site), "PATH": f"{bindir}:{os.environ['PATH']}"}
    return subprocess.run(
        [
            sys.executable,
            "-S",
            str(SCRIPT),
            "check-kernels",
            "--targetarch",
            targetarch,
            "--required",
            required,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_gpu_arch_per_image_arch_is_what_the_recipes_run_on():
    from sm12x.recipe import load_all

    module = load_module()
    wanted: dict[str, set[tuple[int, int]]] = {}
    for recipe in load_all():
        major, minor = recipe.hardware.compute_capability.split(".")
        wanted.setdefault(recipe.hardware.cpu_arch, set()).add((int(major), int(minor)))
    assert {arch: {cc} for arch, cc in module.GPU_ARCH.items()} == wanted


@pytest.mark.parametrize(
    "kind, code, target, runs",
    [
        ("elf", "sm_121a", (12, 1), True),
        ("elf", "sm_120a", (12, 1), False),
        ("elf", "sm_120f", (12, 1), True),
        ("elf", "sm_120", (12, 1), True),
        ("elf", "sm_121", (12, 0), False),
        ("elf", "sm_100a", (12, 0), False),
        ("elf", "sm_90", (12, 0), False),
        ("ptx", "sm_90", (12, 1), True),
        ("ptx", "sm_90a", (12, 1), False),
        ("elf", "sm_120a", (12, 0), True),
    ],
)
def test_cuda_compatibility_rules(kind, code, target, runs):
    module = load_module()
    assert module.runs_on(kind, *module.parse_code(code), target) is runs


def test_arm64_refuses_a_kernel_library_without_sm_121_code_and_names_it(tmp_path):
    site = tmp_path / "site"
    kernel_site(site, "sglang-kernel", "sgl_kernel", "sm_90a,sm_100a,sm_120a")
    proc = check_kernels_in(site, tmp_path, "arm64")
    assert proc.returncode == 1
    assert (
        "image-build: error: kernel libraries without sm_121 code (aarch64 images run on "
        "sm_121 GPUs"
    ) in proc.stderr, proc.stderr
    assert "sglang-kernel 0.4.5: common_ops.abi3.so has sm_90a, sm_100a, sm_120a" in proc.stderr
    # The same library serves the x86_64 image's sm_120 cards.
    amd64 = check_kernels_in(site, tmp_path, "amd64")
    assert amd64.returncode == 0, amd64.stderr
    assert "common_ops.abi3.so: sm_120a runs on sm_120" in amd64.stdout


def test_arm64_accepts_sm_121a_or_the_sm_120f_family(tmp_path):
    for code in ("sm_90a,sm_121a", "sm_120f"):
        site = tmp_path / code.replace(",", "-")
        kernel_site(site, "sglang-kernel", "sgl_kernel", code)
        proc = check_kernels_in(site, tmp_path, "arm64")
        assert proc.returncode == 0, proc.stderr
        assert "every library the sm_12x path loads carries sm_121-compatible code" in proc.stdout


def test_a_kernel_library_with_no_gpu_code_at_all_is_named(tmp_path):
    site = tmp_path / "site"
    library = kernel_site(site, "sglang-kernel", "sgl_kernel", "")
    library.write_bytes(b"\x7fELF\0host only\n")
    proc = check_kernels_in(site, tmp_path, "amd64")
    assert proc.returncode == 1
    assert "sglang-kernel 0.4.5: no GPU code in any of its 1 shared objects" in proc.stderr


def test_the_base_s_sglang_kernel_must_be_the_one_its_sglang_requires(tmp_path):
    site = tmp_path / "site"
    kernel_site(site, "sglang-kernel", "sgl_kernel", "sm_120a")
    dist(site, "sglang", "0.5.23", package="sglang", requires=("sglang-kernel==0.4.10",))
    proc = check_kernels_in(site, tmp_path, "amd64")
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "image-build: error: sglang 0.5.23 requires sglang-kernel==0.4.10, the base has "
        "0.4.5: use the base built for this sglang"
    )
    right = tmp_path / "right"
    kernel_site(right, "sglang-kernel", "sgl_kernel", "sm_120a")
    dist(
        right,
        "sglang",
        "0.5.17",
        package="sglang",
        requires=("torch==2.11.0", "sglang-kernel==0.4.5"),
    )
    proc = check_kernels_in(right, tmp_path, "amd64")
    assert proc.returncode == 0, proc.stderr
    assert "kernels: sglang-kernel 0.4.5, the version sglang 0.5.17 requires" in proc.stdout


def test_a_base_without_sglang_kernel_is_said_not_failed(tmp_path):
    """The stand-in bases carry no sglang-kernel (the image tests build on them
    with and without prebuilt flashinfer); a wrong version fails (the test
    above), none at all is a warning line."""
    site = tmp_path / "site"
    dist(site, "sglang", "0.5.17", package="sglang", requires=("sglang-kernel==0.4.5",))
    for required in ("1", "0"):
        proc = check_kernels_in(site, tmp_path, "amd64", required=required)
        said = "requires sglang-kernel==0.4.5, the base has none (a stand-in base"
        assert said in proc.stdout, proc.stdout + proc.stderr
        assert "the base has none" not in proc.stderr


def test_check_kernels_on_a_stand_in_with_no_kernel_library(tmp_path):
    (tmp_path / "site").mkdir()
    relaxed = check_kernels_in(tmp_path / "site", tmp_path, "arm64", required="0")
    assert relaxed.returncode == 0 and "no kernel library installed" in relaxed.stdout
    real = check_kernels_in(tmp_path / "site", tmp_path, "arm64", required="1")
    assert real.returncode == 1 and "is not an sglang CUDA image" in real.stderr


# --- flashinfer-jit-cache 0.7: the shim and its providers -----------------------------------


def check_providers_in(site: Path) -> str:
    code = LOAD + (
        "try:\n    mod.check_providers('0.7.2+cu130')\n"
        "except mod.BuildError as e:\n    print('ERROR', e)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_jit_cache_shim_without_its_providers_fails(tmp_path):
    dist(
        tmp_path,
        "flashinfer-jit-cache",
        "0.7.2+cu130",
        requires=(
            "flashinfer-jit-cache-sm120f==0.7.2+cu130; platform_machine == 'x86_64' or "
            "platform_machine == 'aarch64'",
            "flashinfer-jit-cache-sm90a==0.7.2+cu130; extra == 'all'",
        ),
    )
    out = check_providers_in(tmp_path)
    assert (
        "ERROR flashinfer-jit-cache 0.7.2+cu130 is a shim without its kernel providers: "
        "flashinfer-jit-cache-sm120f==0.7.2+cu130 (not installed)"
    ) in out
    assert "FLASHINFER_PREBUILT=0" in out and "sm90a" not in out  # an extra is not required
    dist(tmp_path, "flashinfer-jit-cache-sm120f", "0.7.2+cu129")
    assert "(installed: 0.7.2+cu129)" in check_providers_in(tmp_path)


def test_a_jit_cache_shim_with_its_providers_passes(tmp_path):
    dist(
        tmp_path,
        "flashinfer-jit-cache",
        "0.7.2+cu130",
        requires=("flashinfer-jit-cache-sm120f==0.7.2+cu130",),
    )
    dist(tmp_path, "flashinfer-jit-cache-sm120f", "0.7.2+cu130")
    out = check_providers_in(tmp_path)
    assert "ERROR" not in out
    assert "providers flashinfer-jit-cache-sm120f 0.7.2+cu130" in out


# --- compile-bytecode, the router, the runtime caches ---------------------------------------


def test_bytecode_is_compiled_and_a_later_change_is_caught(tmp_path):
    dist(tmp_path, "sglang", "0.5.17", package="sglang")
    module = tmp_path / "sglang" / "kernels.py"
    module.write_text("X = 1\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    made = subprocess.run(
        [sys.executable, "-S", str(SCRIPT), "compile-bytecode"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert made.returncode == 0, made.stderr
    assert "bytecode: 2 modules of sglang" in made.stdout
    module.write_text("X = 22\n")  # a patch after compileall: size (and mtime) differ
    stale = subprocess.run(
        [sys.executable, "-S", str(SCRIPT), "compile-bytecode", "--check-only"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert stale.returncode == 1
    assert "1 of sglang's modules have no fresh bytecode" in stale.stderr
    assert "sglang/kernels.py" in stale.stderr


@pytest.mark.parametrize(
    "base, line",
    [
        (None, "the base has none; installed 0.3.2 from PyPI"),
        ("0.3.1", "the base's own 0.3.1 replaced by PyPI's 0.3.2"),
        ("0.3.2", "the base's own 0.3.2 replaced by PyPI's 0.3.2 (same version, reinstalled"),
    ],
)
def test_the_router_s_fate_is_said_and_kept(tmp_path, capsys, base, line):
    module = load_module()
    module.ROUTER_NOTE = tmp_path / "router.txt"
    module.say_router(base, "0.3.2")
    assert line in capsys.readouterr().out
    assert line in module.ROUTER_NOTE.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to the runtime uid needs root")
def test_runtime_caches_names_one_the_runtime_user_cannot_write():
    # Not under pytest's tmp_path: its parents are root's alone (0700).
    tmp_path = Path(tempfile.mkdtemp(prefix="sm12x-caches-"))
    request_cleanup.append(tmp_path)
    caches = {name: tmp_path / name.lower() for name in load_module().CACHE_ENV}
    for path in caches.values():
        path.mkdir()
        path.chmod(0o777)
    tmp_path.chmod(0o755)
    caches["TRITON_CACHE_DIR"].chmod(0o555)
    env = {**os.environ, **{k: str(v) for k, v in caches.items()}}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "runtime-caches", "--uid", "10001"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 1
    assert (
        "the runtime user (uid 10001, gid 0) cannot write "
        f"TRITON_CACHE_DIR={caches['TRITON_CACHE_DIR']} (Permission denied)"
    ) in proc.stderr
    caches["TRITON_CACHE_DIR"].chmod(0o777)
    ok = subprocess.run(
        [sys.executable, str(SCRIPT), "runtime-caches", "--uid", "10001"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr


def test_kernel_libraries_are_0_7_s_providers_not_its_shim(tmp_path):
    """flashinfer 0.7's jit-cache shim carries no kernels of its own: the kernel
    check reads its providers instead (else every 0.7 build with its providers
    failed as 'no GPU code in any of its 0 shared objects')."""
    site = tmp_path / "site"
    jit_cache_shim(site)
    dist_info(site, "flashinfer-jit-cache-sm120f", "0.7.2+cu130", [])
    code = LOAD + "print(mod.kernel_dists())\n"
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['flashinfer-jit-cache-sm120f']"


def test_install_flashinfer_s_kernels_part_names_what_it_lacks(tmp_path):
    # The Dockerfile runs install-flashinfer in two steps (--part python, whose
    # layer only FLASHINFER_VERSION keys, then --part kernels); the second,
    # called without the kernels' arguments, says which before running pip.
    result = run(tmp_path, "install-flashinfer", "--part", "kernels", "--version", "0.6.15.post1")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "image-build: error: install-flashinfer --part kernels needs --cubin-version, "
        "--jit-cache-version, --cubin-index, --jit-cache-index, --cuda"
    )


def test_the_dockerfile_installs_flashinfer_python_before_the_kernel_arguments_exist():
    # BuildKit keys a RUN by the build arguments in scope: flashinfer-python's
    # step must see FLASHINFER_VERSION and no argument of the prebuilt kernels,
    # or a build that changes only those would reinstall it.
    text = (ROOT / "Dockerfile").read_text()
    stack = text.split("FROM base AS stack", 1)[1].split("FROM stack AS patched", 1)[0]
    first, rest = stack.split("install-flashinfer --part python", 1)
    declared = [line.split()[1] for line in first.splitlines() if line.startswith("ARG ")]
    assert declared == ["FLASHINFER_VERSION", "TARGETARCH"]
    assert "install-flashinfer --part kernels" in rest
