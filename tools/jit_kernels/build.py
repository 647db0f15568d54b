"""One unit's nvcc (or c++) line as its package's JIT writes it, run, and read back."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import types
import zipfile
from pathlib import Path

from tests.support import kernel_wheels
from tools import kernel_resources as kr
from tools.jit_kernels.spec import FI_CXX, FI_FLAGS, MOE_GEN, SG_FLAGS, TRACKS, Module


def unpacked(package: str, version: str) -> Path:
    """The sglang / flashinfer wheel's JIT sources, unpacked once under the kernels cache."""
    target = kernel_wheels.cache() / "src" / f"{package}-{version}"
    if not (target / ".complete").is_file():
        from sm12x.mock import wheels

        keep = (
            ("sglang/kernels/jit/",)
            if package == "sglang"
            else ("flashinfer/data/", "flashinfer/jit/fused_moe.py", "flashinfer/jit/gemm/cutlass/")
        )
        with zipfile.ZipFile(wheels.wheel(package, version)) as archive:
            archive.extractall(target, [n for n in archive.namelist() if n.startswith(keep)])
        (target / ".complete").write_text(version)
    return target


def fi_data(track: str) -> Path:
    return unpacked("flashinfer_python", TRACKS[track][1]) / "flashinfer" / "data"


def fused_moe_py(track: str) -> Path:
    return fi_data(track).parent / "jit" / "fused_moe.py"


def generate_moe(track: str) -> Path:
    """flashinfer's own generate_gemm_operations(out, "120;120-real"), as
    gen_cutlass_fused_moe_sm120_module calls it, with its one outside import
    (cpp_ext.is_cuda_version_at_least) answered for the pinned nvcc."""
    out = fi_data(track).parent.parent / MOE_GEN
    if (out / ".complete").is_file():
        return out
    source = fi_data(track).parent / "jit" / "gemm" / "cutlass"
    cuda = tuple(int(x) for x in kernel_wheels.tools_version().split(".")[:2])
    names = ("fi_gen", "fi_gen.jit", "fi_gen.jit.gemm", "fi_gen.jit.gemm.cutlass")
    for name in names:
        sys.modules[name] = types.ModuleType(name)
        sys.modules[name].__path__ = []  # type: ignore[attr-defined]
    cpp = sys.modules["fi_gen.jit.cpp_ext"] = types.ModuleType("fi_gen.jit.cpp_ext")
    cpp.is_cuda_version_at_least = lambda v: cuda >= tuple(int(x) for x in v.split("."))  # type: ignore[attr-defined]
    try:
        for part in ("cutlass_library", "generate_kernels"):
            spec = importlib.util.spec_from_file_location(
                f"fi_gen.jit.gemm.cutlass.{part}", source / f"{part}.py"
            )
            assert spec and spec.loader
            module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        module.generate_gemm_operations(str(out), "120;120-real")
    finally:
        for name in [n for n in sys.modules if n.startswith("fi_gen")]:
            del sys.modules[name]
    (out / ".complete").write_text(track)
    return out


def command(track: str, module: Module, source: str, arch: str, out: Path) -> list[str]:
    """The compile line for one unit of `module` (for sglang, `source` is the generated .cu)."""
    sglang, _ = TRACKS[track]
    fi = fi_data(track)
    cuda = kernel_wheels.tool_dir().parent
    tvm = kernel_wheels.cache() / "cuda" / "tvm_ffi" / "include"
    gencode = f"-gencode=arch=compute_{arch[3:]},code={arch}"
    cutlass = [str(fi / "cutlass" / "include"), str(fi / "cutlass" / "tools" / "util" / "include")]
    if module.owner == "sglang":
        jit = unpacked("sglang", sglang) / "sglang" / "kernels" / "jit"
        flags = [
            gencode,
            f"-DSGL_CUDA_ARCH={int(arch[3:6]) * 10}",
            *SG_FLAGS,
            f"-I{jit / 'include'}",
        ]
        includes = [x for d in (str(tvm), *cutlass) for x in ("-isystem", d)]
        return [
            str(cuda / "bin" / "nvcc"),
            *flags,
            *module.flags,
            *includes,
            "-c",
            source,
            "-o",
            str(out),
        ]
    extra = [f"-I{fi.parent.parent / d}" if d == MOE_GEN else f"-I{fi / 'csrc' / d}"
             for d in module.includes]  # fmt: skip
    if module.includes:  # gen_jit_spec's common cflags: vendored CCCL first, then -isystem
        extra += [f"-I{fi / 'cccl' / d}" for d in ("cub", "libcudacxx/include", "thrust")]
        system = [str(cuda / "include"), str(tvm), str(fi / "include"), str(fi / "csrc"), *cutlass]
    else:
        extra += [f"-I{fi / 'include'}", f"-I{fi / 'csrc'}"]
        system = [str(tvm), *cutlass]
    # SM12X_JIT_EXTRA_INCLUDE: a last -isystem for the CUDA headers no nvcc wheel
    # carries (the fused MoE includes cuBLAS's cublasLt.h; a rig's toolkit has it).
    system += [
        str(fi / "spdlog" / "include"),
        *os.environ.get("SM12X_JIT_EXTRA_INCLUDE", "").split(),
    ]
    includes = [*extra, *(x for d in system for x in ("-isystem", d))]
    if source.endswith(".cpp"):
        return ["c++", *FI_CXX, *includes, "-c", source, "-o", str(out)]
    return [str(cuda / "bin" / "nvcc"), *FI_FLAGS, gencode, *module.flags, *includes,
            "-c", source, "-o", str(out)]  # fmt: skip


def units(track: str, module: Module, work: Path) -> list[str]:
    """The translation units of `module`, in its package's order."""
    sglang, _ = TRACKS[track]
    if module.owner == "flashinfer":
        csrc = fi_data(track) / "csrc"
        found = []
        for s in module.sources:
            if s == MOE_GEN:
                found += sorted(str(p) for p in generate_moe(track).rglob("*.generated.cu"))
            else:
                found.append(str(csrc / s))
        return found
    jit = unpacked("sglang", sglang) / "sglang" / "kernels" / "jit"
    exports = [
        f"TVM_FFI_DLL_EXPORT_TYPED_FUNC(w{n}, ({w}));" for n, w in enumerate(module.wrappers)
    ]
    text = [f'#include "{jit / "csrc" / s}"' for s in module.sources]
    spec = jit / "utils" / "compile" / "spec.py"  # sglang >= 0.5.23's _wrapper_source
    if spec.is_file() and 'lines.append("namespace sglang {")' in spec.read_text():
        heads = ("container/tensor", "dtype", "error", "extra/c_env_api", "function")
        text = [f"#include <tvm/ffi/{h}.h>" for h in heads] + text
        exports = ["namespace sglang {", *exports, "}  // namespace sglang"]
    text += exports
    work.mkdir(parents=True, exist_ok=True)
    generated = work / f"{module.name}.cu"
    generated.write_text("\n".join(text) + "\n")
    return [str(generated)]


def compile_unit(
    track: str, module: Module, source: str, arch: str, work: Path, timeout: float = 3600
) -> tuple[float, list[dict]]:
    """(wall seconds, kernel rows) of one unit; raises with the compiler's own words."""
    out = work / f"{Path(source).parent.name}_{Path(source).stem}.{arch}.o"
    work.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    done = subprocess.run(
        command(track, module, source, arch, out),
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PATH": f"{kernel_wheels.tool_dir()}:{os.environ['PATH']}"},
    )  # fmt: skip
    spent = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"{Path(source).name} {arch}: {done.stderr.strip()[-2000:]}")
    return spent, ([] if source.endswith(".cpp") else resources(out))


def resources(obj: Path) -> list[dict]:
    """Registers, static shared memory, local memory and launch bounds per kernel."""
    tools = kernel_wheels.tool_dir()
    usage = subprocess.run(
        [str(tools / "cuobjdump"), "-res-usage", str(obj)],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout  # fmt: skip
    threads: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [str(tools / "cuobjdump"), "-xelf", "all", str(obj)],
            cwd=tmp, capture_output=True, timeout=600, check=False,
        )  # fmt: skip
        for cubin in Path(tmp).glob("*.cubin"):
            threads.update(kr.launch_bounds(cubin.read_bytes()))
    return [
        {"name": n, "regs": int(r), "smem": int(s), "local": int(lo), "threads": threads.get(n)}
        for n, r, s, lo in kr.RES.findall(usage)
    ]
