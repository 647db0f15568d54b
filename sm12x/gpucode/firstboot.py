"""Which JIT kernels the first boot will compile, said before sglang starts.

No PyPI wheel carries SASS for the DeepSeek-V4 sm_12x kernels (flashinfer's
sm120 sparse MLA, sglang's DSV4 compressor, top-k and fp8 GEMM): both packages
compile them at first use, into their JIT caches, and the server is silent
meanwhile. `sm12x launch` calls announce() before it hands the process to
sglang: one line per module not yet in a cache for this GPU, with the compile
time measured by tools/jit_kernels (jit_times.json, written by its --write):
the module's units' compile times summed, what one CPU core spends, on the
machine each entry names; a rig's ninja runs the units side by side.

The caches, as the wheels' own code places them (read from their sources):
- flashinfer: $FLASHINFER_WORKSPACE_BASE (else $HOME)/.cache/flashinfer/
  <version>/<arch: 120f on CC 12.0 with CUDA >= 12.9, 121a>/cached_ops/<name>/<name>.so
  (jit/env.py), or an AOT copy in the flashinfer-jit-cache package;
- sglang 0.5.17: $TVM_FFI_CACHE_DIR (else ~/.cache/tvm-ffi)/
  sgl_kernel_jit_<name>...__arch_<12.0f>__tvmffi_<v>/ (kernels/jit/utils/compile.py);
- sglang 0.5.23: $SGLANG_JIT_CACHE_DIR (else ~/.cache/sglang/jit)/<sm120f>/
  sgl_kernel_jit_<name>.../build-*/deps-*/ (kernels/jit/utils/compile/cache.py).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path

TIMES = Path(__file__).with_name("jit_times.json")
# The line boot waits match (verify.boot COMPILING): keep the two together.
PREFIX = "sm12x: first boot compiles JIT module"


def arch(capability: str) -> str:
    """The arch both packages compile for on this CC with CUDA 13 (12.0 -> 120f)."""
    major, minor = capability.split(".")
    return f"{major}{minor}{'f' if minor == '0' else 'a'}"


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or Path.home())


def _any(root: Path, pattern: str) -> bool:
    return root.is_dir() and any(root.glob(pattern))


def cached(owner: str, name: str, capability: str, environ: Mapping[str, str]) -> bool:
    """Whether `name` is already compiled for this CC in the cache its package reads."""
    tag = arch(capability)
    if owner == "flashinfer":
        version = _version("flashinfer-python") or _version("flashinfer_python")
        base = Path(environ.get("FLASHINFER_WORKSPACE_BASE") or _home(environ))
        ops = base / ".cache" / "flashinfer" / str(version) / tag / "cached_ops"
        if (ops / name / f"{name}.so").is_file():
            return True
        spec = importlib.util.find_spec("flashinfer_jit_cache")
        aot = Path(spec.origin).parent if spec and spec.origin else None
        return aot is not None and _any(aot, f"**/{name}/{name}.so")
    dotted = f"{tag[:-2]}.{tag[-2:]}"  # 120f -> 12.0f
    tvm = Path(environ.get("TVM_FFI_CACHE_DIR") or _home(environ) / ".cache" / "tvm-ffi")
    if _any(tvm, f"sgl_kernel_jit_{name}*__arch_{dotted}__*/*.so"):
        return True
    jit = Path(environ.get("SGLANG_JIT_CACHE_DIR") or _home(environ) / ".cache/sglang/jit")
    return _any(jit / f"sm{tag}", f"sgl_kernel_jit_{name}*/build-*/deps-*/*.so")


def missing(
    sglang: str, capability: str, environ: Mapping[str, str], times: Mapping | None = None
) -> list[tuple[str, str, int]]:
    """(owner, module, measured seconds) of each module the first boot compiles."""
    return [(o, n, s) for o, n, s, _ in _missing(sglang, capability, environ, times)]


def _missing(
    sglang: str, capability: str, environ: Mapping[str, str], times: Mapping | None = None
) -> list[tuple[str, str, int, str]]:
    table = json.loads(TIMES.read_text()) if times is None else times
    measured = table.get(sglang, {}).get(f"sm_{arch(capability)}", {})
    return [
        (entry["owner"], name, entry["seconds"], entry.get("machine", "2 CPU cores"))
        for name, entry in sorted(measured.items())
        if not cached(entry["owner"], name, capability, environ)
    ]


def announce(capability: str, environ: Mapping[str, str], say) -> None:
    """Say, one line each, the JIT modules this boot will compile for the GPU."""
    sglang = _version("sglang")
    if sglang is None or not TIMES.is_file():
        return
    for owner, name, seconds, machine in _missing(sglang, capability, environ):
        say(
            f"{PREFIX} {owner} {name} for sm_{arch(capability)}: not in its JIT cache, "
            f"about {seconds} s of one CPU core's compile ({machine}; tools/jit_kernels)"
        )
