"""The JIT kernels of the DeepSeek-V4 sm_12x path, compiled here with CUDA 13 from PyPI.

    python3 -m tests.support.kernel_wheels --download   # once: nvcc, cuobjdump, tvm-ffi
    python -m tools.jit_kernels                         # print the table
    python -m tools.jit_kernels --write                 # table + times into the repo

No PyPI wheel carries prebuilt SASS for these: flashinfer and sglang compile
them from their wheels' sources at first use. Each module below is compiled
the way its package's JIT does (flashinfer's gen_jit_spec flags and include
dirs; sglang's load_jit: a generated .cu that includes the source and exports
the wrappers through tvm-ffi), one translation unit at a time with `nvcc -c`
(host and device, what the rig's first boot runs), for sm_120a, sm_120f and
sm_121a. Resources per kernel come from cuobjdump (`-res-usage`, launch
bounds from .nv.info: tools.kernel_resources); the compile time of a module
is the sum of its units' wall times on this machine (serial). --write puts
the table into docs/benchmarks.md and the per-arch times into
sm12x/gpucode/jit_times.json, which sm12x.gpucode.firstboot announces.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from sm12x.gpucode import firstboot
from tests.support import kernel_wheels
from tools import kernel_resources as kr

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- jit-resources:begin -->", "<!-- jit-resources:end -->"
TRACKS = {"pinned": ("0.5.17", "0.6.15.post1"), "current": ("0.5.23", "0.7.2")}
ARCHES = ("sm_120a", "sm_120f", "sm_121a")
FI_FLAGS = [
    "-std=c++17", "-use_fast_math", "-Xfatbin=-compress-all", "-DNDEBUG", "-O3",
    "-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E4M3",
    "-DFLASHINFER_ENABLE_FP8_E5M2", "-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1",
    "-Xcompiler", "-fPIC",
]  # fmt: skip
SG_FLAGS = ["-std=c++20", "-O3", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC"]
CUTLASS_FLAGS = [
    "-DNDEBUG", "-DCUTE_USE_PACKED_TUPLE=1", "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1",
    "-DCUTLASS_VERSIONS_GENERATED", "-DCUTLASS_TEST_LEVEL=0",
    "-DCUTLASS_TEST_ENABLE_CACHED_RESULTS=1", "-DCUTLASS_DEBUG_TRACE_LEVEL=0",
    "--expt-extended-lambda",
]  # fmt: skip
MLA_015 = [
    "sparse_mla_sm120.cu", "sparse_mla_sm120_decode_dsv3_2.cu", "sparse_mla_sm120_decode_dsv4.cu",
    "sparse_mla_sm120_prefill.cu", "sparse_mla_sm120_jit_binding.cu",
]  # fmt: skip
MLA_072 = [
    f"sparse_mla_sm120/{n}.cu"
    for n in (
        "prefill_binding", "dsv32_decode_dispatch", "decode_dispatch", "prefill_dispatch",
        "dsv41_fp4_cache_ops", "cake_dsv41_fp8_cache_ops", "nvfp4_mma_layout_probe",
        "dsv4_nvfp4_cache_ops", "dsv4_nvfp4_attention_binding", "dsv4_nvfp4_dispatch",
        "dsv4_nvfp4_resolve", "attention_binding", "attention_resolve",
    )
]  # fmt: skip
# The one decode unit the kernels tier compiles per arch (the pinned track's).
DECODE_UNIT = ("pinned", "sparse_mla_sm120_decode_dsv4.cu")


@dataclass
class Module:
    """One JIT module as its package builds it: flashinfer sources, or an
    sglang load_jit(cuda_files, cuda_wrappers) with its template arguments."""

    owner: str  # flashinfer | sglang
    name: str  # its JIT cache name (sm12x.gpucode.firstboot matches it)
    sources: list[str]  # flashinfer: csrc-relative; sglang: jit/csrc-relative
    wrappers: list[str] = field(default_factory=list)  # sglang: Class<args>::fn
    flags: list[str] = field(default_factory=list)
    groups: tuple[tuple[str, str], ...] = (("all", ""),)  # (label, kernel-name regex)


def modules(track: str) -> list[Module]:
    mla = MLA_015 if track == "pinned" else MLA_072
    args = "512, fp32_t, bf16_t, bf16_t, true"
    topk1 = "TopKKernel<true>::transform"
    topk2 = (
        ["TopKKernel::transform", "TopKKernel::plan"]
        if track == "pinned"
        else [f"TopKKernel<true>::{f}" for f in ("transform_paged", "transform_ragged", "plan")]
    )
    mla_groups = (("decode", "decode"), ("prefill", "prefill"))
    return [
        Module("flashinfer", "sparse_mla_sm120", mla, groups=mla_groups),
        Module(
            "sglang", "dpsk_v4_compress_4_v2", ["deepseek_v4/c4_v2.cuh"],
            [f"FlashCompress4Kernel<{a}>::run_{f}" for a in (args, args.replace("512", "128"))
             for f in ("decode", "prefill")], ["-use_fast_math"],
        ),
        Module(
            "sglang", "dpsk_v4_compress_128_v2", ["deepseek_v4/c128_v2.cuh"],
            [f"FlashCompress128Kernel<{args}>::run_{f}" for f in ("decode", "prefill")],
            ["-use_fast_math"],
        ),
        Module(
            "sglang", "dpsk_v4_compress_128_online_v2", ["deepseek_v4/c128_online_v2.cuh"],
            [f"FlashCompress128OnlineKernel<512, fp32_t, true>::run_{f}"
             for f in ("decode", "prefill")], ["-use_fast_math"],
        ),
        Module(
            "sglang", "dpsk_v4_topk_v1", ["deepseek_v4/topk_v1.cuh"], [topk1],
            ["-DSGL_TOPK=512"] if track == "pinned" else [],
        ),
        Module("sglang", "dpsk_v4_topk_v2", ["deepseek_v4/topk_v2.cuh"], topk2),
        Module(
            "sglang", "fp8_blockwise_scaled_mm",
            ["gemm/fp8_blockwise/fp8_blockwise_scaled_mm_entry.cuh"],
            ["fp8_blockwise_scaled_mm"], CUTLASS_FLAGS,
        ),
    ]  # fmt: skip


def unpacked(package: str, version: str) -> Path:
    """The sglang / flashinfer wheel's sources, unpacked once under the kernels cache."""
    from sm12x.mock import wheels

    target = kernel_wheels.cache() / "src" / f"{package}-{version}"
    if not (target / ".complete").is_file():
        prefix = "sglang/kernels/jit/" if package == "sglang" else "flashinfer/data/"
        with zipfile.ZipFile(wheels.wheel(package, version)) as archive:
            archive.extractall(target, [n for n in archive.namelist() if n.startswith(prefix)])
        (target / ".complete").write_text(version)
    return target


def command(track: str, module: Module, source: str, arch: str, out: Path) -> list[str]:
    """The nvcc line for one unit of `module` (for sglang, `source` is the generated .cu)."""
    sglang, flashinfer = TRACKS[track]
    fi = unpacked("flashinfer_python", flashinfer) / "flashinfer" / "data"
    cuda = kernel_wheels.tool_dir().parent
    tvm = kernel_wheels.cache() / "cuda" / "tvm_ffi" / "include"
    number = arch[3:6]
    gencode = f"-gencode=arch=compute_{arch[3:]},code={arch}"
    includes = ["-isystem", str(tvm)]
    cutlass = [str(fi / "cutlass" / "include"), str(fi / "cutlass" / "tools" / "util" / "include")]
    if module.owner == "flashinfer":
        flags = [*FI_FLAGS, gencode, f"-I{fi / 'include'}", f"-I{fi / 'csrc'}"]
        includes += [x for d in (*cutlass, str(fi / "spdlog" / "include")) for x in ("-isystem", d)]
    else:
        jit = unpacked("sglang", sglang) / "sglang" / "kernels" / "jit"
        flags = [gencode, f"-DSGL_CUDA_ARCH={int(number) * 10}", *SG_FLAGS, f"-I{jit / 'include'}"]
        includes += [x for d in cutlass for x in ("-isystem", d)]
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


def units(track: str, module: Module, work: Path) -> list[str]:
    """The translation units nvcc compiles for `module`."""
    sglang, flashinfer = TRACKS[track]
    if module.owner == "flashinfer":
        csrc = unpacked("flashinfer_python", flashinfer) / "flashinfer" / "data" / "csrc"
        return [str(csrc / s) for s in module.sources]
    jit = unpacked("sglang", sglang) / "sglang" / "kernels" / "jit" / "csrc"
    text = [f'#include "{jit / s}"' for s in module.sources]
    text += [f"TVM_FFI_DLL_EXPORT_TYPED_FUNC(w{n}, ({w}));" for n, w in enumerate(module.wrappers)]
    work.mkdir(parents=True, exist_ok=True)
    generated = work / f"{module.name}.cu"
    generated.write_text("\n".join(text) + "\n")
    return [str(generated)]


def compile_unit(
    track: str, module: Module, source: str, arch: str, work: Path
) -> tuple[float, list[dict]]:
    """(wall seconds, kernel rows) of one unit; raises with nvcc's own words on failure."""
    out = work / (Path(source).stem + f".{arch}.o")
    start = time.monotonic()
    done = subprocess.run(
        command(track, module, source, arch, out),
        capture_output=True, text=True, timeout=3600,
        env={**os.environ, "PATH": f"{kernel_wheels.tool_dir()}:{os.environ['PATH']}"},
    )  # fmt: skip
    spent = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"nvcc {Path(source).name} {arch}: {done.stderr.strip()[-2000:]}")
    return spent, resources(out)


def resources(obj: Path) -> list[dict]:
    tools = kernel_wheels.tool_dir()
    usage = subprocess.run(
        [str(tools / "cuobjdump"), "-res-usage", str(obj)],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout  # fmt: skip
    threads: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [str(tools / "cuobjdump"), "-xelf", "all", str(obj)],
            cwd=tmp, capture_output=True, timeout=600, check=True,
        )  # fmt: skip
        for cubin in Path(tmp).glob("*.cubin"):
            threads.update(kr.launch_bounds(cubin.read_bytes()))
    return [
        {"name": n, "regs": int(r), "smem": int(s), "local": int(lo), "threads": threads.get(n)}
        for n, r, s, lo in kr.RES.findall(usage)
    ]


def compile_module(track: str, module: Module, arch: str, work: Path) -> tuple[float, list[dict]]:
    total, rows = 0.0, []
    work.mkdir(parents=True, exist_ok=True)
    for source in units(track, module, work):
        spent, found = compile_unit(track, module, source, arch, work)
        total += spent
        rows += found
    return total, rows


def row(track: str, module: Module, label: str, arch: str, group: list[dict], spent: float) -> str:
    sglang, flashinfer = TRACKS[track]
    version = f"flashinfer {flashinfer}" if module.owner == "flashinfer" else f"sglang {sglang}"
    bounded = [r for r in group if r["threads"]]
    low = min((kr.occupancy(r["regs"], r["smem"], r["threads"]) for r in bounded), default=None)
    flagged = sorted({f for r in group for f in kr.flags(r["regs"], r["smem"], r["threads"])})
    spread = sorted({r["threads"] for r in bounded})
    room = kr.BLOCK_SMEM - max((r["smem"] for r in group), default=0)
    name = module.name + ("" if label == "all" else f" ({label})")
    return (
        f"| {version} ({track}) | {name} | {arch} | {len(group)} "
        f"| {max((r['regs'] for r in group), default=0)} "
        f"| {max((r['smem'] for r in group), default=0):,} | {room:,} "
        f"| {', '.join(map(str, spread)) or 'none'} "
        f"| {'-' if low is None else f'{low:.0%}'} | {', '.join(flagged) or 'no'} | {spent:.0f} |"
    )


def run(arch: str) -> tuple[list[str], dict]:
    """One arch's table rows and times; kept under the kernels cache for --reuse."""
    lines: list[str] = []
    times: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for track in TRACKS:
            for module in modules(track):
                work = Path(tmp) / track
                try:
                    spent, rows = compile_module(track, module, arch, work)
                except RuntimeError as error:
                    print(f"{track} {module.name} {arch}: {error}", file=sys.stderr, flush=True)
                    lines.append(f"| {track} | {module.name} | {arch} | not compiled: "
                                 f"{str(error).splitlines()[-1][:160]} |||||||||")  # fmt: skip
                    save(arch, lines, times)
                    continue
                print(f"{track} {module.name} {arch}: {len(rows)} kernels, {spent:.0f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
                times.setdefault(TRACKS[track][0], {}).setdefault(arch, {})[module.name] = {
                    "owner": module.owner, "seconds": round(spent),
                }  # fmt: skip
                for label, pattern in module.groups:
                    group = [r for r in rows if re.search(pattern, r["name"])]
                    lines.append(row(track, module, label, arch, group, spent))
                save(arch, lines, times)
    return lines, times


def save(arch: str, lines: list[str], times: dict) -> None:
    """After each module: an interrupted run keeps what it measured (--reuse)."""
    kept(arch).parent.mkdir(parents=True, exist_ok=True)
    kept(arch).write_text(json.dumps({"lines": lines, "times": times}))


def kept(arch: str) -> Path:
    return kernel_wheels.cache() / "jit" / f"table-{arch}.json"


HEADER = [
    "| package | JIT module | arch | kernels | max registers | max static shared (B) "
    "| dynamic room (B) | launch bounds (threads) | lowest occupancy at its bounds "
    "| flagged | compile (s, 2 cores) |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.jit_kernels")
    parser.add_argument("--write", action="store_true", help="write the table and the times")
    parser.add_argument("--arch", action="append", choices=ARCHES, help="only this arch")
    parser.add_argument(
        "--reuse", action="store_true", help="take an arch's last run from the cache (no compile)"
    )
    args = parser.parse_args(argv)
    if not (kernel_wheels.tool_dir() / "nvcc").is_file():
        print(f"jit_kernels: no nvcc in {kernel_wheels.tool_dir()}: run "
              f"`{kernel_wheels.DOWNLOAD}`", file=sys.stderr)  # fmt: skip
        return 1
    lines, times = list(HEADER), dict[str, dict]()
    for arch in args.arch or ARCHES:
        if args.reuse and not kept(arch).is_file():
            print(f"jit_kernels: no kept run for {arch}: run without --reuse", file=sys.stderr)
            return 1
        if args.reuse:
            found = json.loads(kept(arch).read_text())
            more, got = found["lines"], found["times"]
        else:
            more, got = run(arch)
        lines += more
        for sglang, arches in got.items():
            times.setdefault(sglang, {}).update(arches)
    if not args.write:
        print("\n".join(lines))
        return 0
    text = kr.DOC.read_text()
    if BEGIN not in text or END not in text:
        print(f"jit_kernels: {kr.DOC} has no {BEGIN} ... {END} block", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    kr.DOC.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + rest.split(END, 1)[1])
    firstboot.TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
