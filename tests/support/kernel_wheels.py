"""The real sglang-kernel wheels of both tracks and arches, and CUDA's tools, for the kernels tier.

scripts/test runs `python3 -m tests.support.kernel_wheels --download` once
(standard library only: the system Python runs it): the four wheels from
PyPI, each checked against its pinned sha256, into $SM12X_CACHE/kernels/, and
cuobjdump/nvdisasm (nvidia-cuda-* at TEST_CUDA_TOOLS_VERSION, versions.env)
into $SM12X_CACHE/kernels/cuda. The tests read only that cache: a wheel that
is missing is one error naming this command.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# sglang's own pins (Requires-Dist sglang-kernel==...): 0.5.17 -> 0.4.5,
# 0.5.23 -> 0.4.10 (tests/kernels/test_check_kernels.py proves it from the
# sglang wheels). The sha256 PyPI lists for each file.
WHEELS = {
    ("0.4.5", "x86_64"): "5927a14dfff92ced8b1f7c7d5844144bc574ec58e604d4fd53e6f53c709003a8",
    ("0.4.5", "aarch64"): "108eef77fdfccf5e4dd0b30f3e1d5361587e65463564d67352a9b2a330167ab1",
    ("0.4.10", "x86_64"): "043cbe4a10e7887ea1b25599b729ff1ce115a0d5217b2c177aff9f9ae5327724",
    ("0.4.10", "aarch64"): "2c48d45eb3d6399000fb1d71e792128911f0d906f0dc61724348e96c2aac0429",
}
TOOLS = ("nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm")
# The JIT kernels' compiler (tools/jit_kernels.py and the tier's one compile):
# nvcc, its front end, NVVM and the runtime headers at TEST_CUDA_TOOLS_VERSION,
# CCCL at its own number, and tvm-ffi's headers at sglang 0.5.17's pin.
COMPILER = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-runtime")
DOWNLOAD = "python3 -m tests.support.kernel_wheels --download"


def cache() -> Path:
    return Path(os.environ.get("SM12X_CACHE") or REPO / ".cache") / "kernels"


def filename(version: str, arch: str) -> str:
    return f"sglang_kernel-{version}-cp310-abi3-manylinux2014_{arch}.whl"


def pin(key: str) -> str:
    for line in (REPO / "versions.env").read_text().splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1].strip()
    raise SystemExit(f"versions.env has no {key}")


def tools_version() -> str:
    return pin("TEST_CUDA_TOOLS_VERSION")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pip(*args: str) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            *args,
            "--quiet",
            "--no-deps",
            "--timeout",
            "120",
            "--retries",
            "3",
            "--only-binary=:all:",
            "--disable-pip-version-check",
        ],
        check=True,
        timeout=1800,
    )


def download() -> None:
    root = cache()
    root.mkdir(parents=True, exist_ok=True)
    for (version, arch), digest in WHEELS.items():
        path = root / filename(version, arch)
        if path.is_file() and sha256(path) == digest:
            continue
        requirement = root / f"req-{version}-{arch}.txt"
        requirement.write_text(f"sglang-kernel=={version} --hash=sha256:{digest}\n")
        pip(
            "download",
            "-d",
            str(root),
            "--platform",
            f"manylinux2014_{arch}",
            "--python-version",
            "3.10",
            "--require-hashes",
            "-r",
            str(requirement),
        )
        print(f"ok: {path.name}")
    bin_dir = tool_dir()
    # One install: --target --upgrade replaces the nvidia/ tree it shares.
    if not all((bin_dir / t).is_file() for t in ("cuobjdump", "nvdisasm", "nvcc", "ptxas")):
        pip(
            "install",
            "--target",
            str(root / "cuda"),
            "--upgrade",
            *(f"{t}=={tools_version()}" for t in TOOLS + COMPILER),
            f"nvidia-cuda-cccl=={pin('TEST_CUDA_CCCL_VERSION')}",
            f"apache-tvm-ffi=={pin('TEST_TVM_FFI_VERSION')}",
        )
    print(f"ok: cuobjdump, nvdisasm, nvcc {tools_version()} in {bin_dir}")


def tool_dir() -> Path:
    return cache() / "cuda" / "nvidia" / "cu13" / "bin"


def unpacked(version: str, arch: str) -> Path:
    """The wheel unpacked (a site-packages layout, dist-info included), once."""
    wheel = cache() / filename(version, arch)
    if not wheel.is_file():
        raise FileNotFoundError(f"{wheel} is missing: run `{DOWNLOAD}`")
    return unpack_once(wheel, WHEELS[(version, arch)], cache() / "unpacked" / f"{version}-{arch}")


def unpack_once(wheel: Path, digest: str, target: Path) -> Path:
    """`wheel` (sha256 `digest`) unzipped at `target`, once across processes: the
    kernels tier's modules (check_kernels, resources, jit_decode) ask for the same
    trees from several xdist workers at once. Under a lock, into a staging folder
    renamed into place, so a reader never sees half a tree; a tree stamped with
    another digest (a new pin) is unzipped again."""
    done = target / ".complete"
    if done.is_file() and done.read_text() == digest:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file() and done.read_text() == digest:
            return target
        if sha256(wheel) != digest:
            raise FileNotFoundError(f"{wheel} is not the pinned file: remove it, run `{DOWNLOAD}`")
        staging = target.parent / f".{target.name}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(staging)
            (staging / ".complete").write_text(digest)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


if __name__ == "__main__":
    if sys.argv[1:] != ["--download"]:
        raise SystemExit(f"usage: {DOWNLOAD}")
    download()
