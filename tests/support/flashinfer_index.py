"""A local stand-in for flashinfer's wheel index, to build with FLASHINFER_PREBUILT=1.

flashinfer.ai/whl cannot be reached from the CI machines, so the prebuilt
path of the Dockerfile (flashinfer-cubin and flashinfer-jit-cache from their
own index, at one version, the jit-cache for the build's arch) would go
untested. This serves two wheels made here with the real names, versions and
layout flashinfer's own code reads (`flashinfer_cubin.__version__`,
`get_cubin_dir()`; `flashinfer_jit_cache.__version__` = `<version>+cu130`,
`get_jit_cache_dir()`, and a `jit_cache/sparse_mla_sm120/sparse_mla_sm120.so`
file, or 0.7's shim and provider wheels) but no kernels: the .so says which
device code it stands for, and the stand-in base's fake cuobjdump lists it, from an http.server on 127.0.0.1 that the build reaches
through host networking. pip reads http.server's directory listings as a
PEP 503 simple index, and treats 127.0.0.0/8 as a secure origin.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

from tests.support.local_http import LocalServer


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(
    folder: Path,
    dist: str,
    version: str,
    tag: str,
    files: dict[str, bytes],
    requires: tuple[str, ...] = (),
) -> Path:
    """A minimal valid wheel: files + METADATA, WHEEL and RECORD."""
    stem = dist.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    contents = dict(files)
    contents[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
        "Summary: test stand-in (no kernels)\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    ).encode()
    contents[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: sm12x-tests\n"
        f"Root-Is-Purelib: {'true' if tag.startswith('py3') else 'false'}"
        f"\nTag: {tag}\n"
    ).encode()
    record = [_record_line(name, data) for name, data in contents.items()]
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in contents.items():
            archive.writestr(name, data)
    return path


# What the stand-in kernel library stands for (tests/support/fake_cuobjdump reads
# it): sparse_mla_sm120 compiled for both sm_12x GPUs, as flashinfer's AOT build does.
SM12X_CODE = "elf=sm_120a,sm_121a ptx="


def kernel_library(code: str) -> bytes:
    return f"test stand-in: not a shared object\nSM12X-FAKE-DEVICE-CODE {code}\n".encode()


def build_index(
    root: Path,
    version: str,
    cuda_tag: str,
    machine: str,
    code: str = SM12X_CODE,
    providers: tuple[str, ...] = (),
    serve_providers: bool = True,
) -> None:
    """root/flashinfer-cubin/*.whl and root/<cuda_tag>/flashinfer-jit-cache/*.whl.

    code: the device code the jit-cache's sparse_mla_sm120.so stands for.
    providers: flashinfer 0.7's layout: the jit-cache is a shim naming these
    per-arch provider distributions (each holding the kernels) in Requires-Dist;
    serve_providers=False leaves them off the index."""
    make_wheel(
        root / "flashinfer-cubin",
        "flashinfer-cubin",
        version,
        "py3-none-any",
        {
            "flashinfer_cubin/__init__.py": (
                f"import os\n__version__ = {version!r}\n\n"
                "def get_cubin_dir():\n"
                "    return os.path.join(os.path.dirname(__file__), 'cubins')\n"
            ).encode(),
            "flashinfer_cubin/cubins/README": b"test stand-in: no cubins\n",
        },
    )
    jit_version = f"{version}+{cuda_tag}"
    tag = f"cp39-abi3-manylinux_2_28_{machine}"
    shim = {
        "flashinfer_jit_cache/__init__.py": (
            f"import os\n__version__ = {jit_version!r}\n\n"
            "def get_jit_cache_dir():\n"
            "    return os.path.join(os.path.dirname(__file__), 'jit_cache')\n"
        ).encode(),
    }
    if not providers:
        shim["flashinfer_jit_cache/jit_cache/sparse_mla_sm120/sparse_mla_sm120.so"] = (
            kernel_library(code)
        )
    make_wheel(
        root / cuda_tag / "flashinfer-jit-cache",
        "flashinfer-jit-cache",
        jit_version,
        tag,
        shim,
        requires=tuple(f"{p}=={jit_version}" for p in providers),
    )
    for provider in providers if serve_providers else ():
        package = provider.replace("-", "_")
        make_wheel(
            root / cuda_tag / provider,
            provider,
            jit_version,
            tag,
            {
                f"{package}/__init__.py": b"",
                f"{package}/sparse_mla_sm120/sparse_mla_sm120.so": kernel_library(code),
            },
        )


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


# The URL is a build argument, so part of BuildKit's cache key: the same port
# every run lets a warm run reuse the build (any free port if it is taken).
PREFERRED_PORT = 38467


@contextmanager
def serving(root: Path):
    """Serve root on 127.0.0.1; yields the base URL."""
    handler = partial(_Quiet, directory=str(root))
    try:
        server = LocalServer(handler, PREFERRED_PORT)
    except OSError:
        server = LocalServer(handler)
    with server:
        yield server.url
