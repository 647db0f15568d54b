"""What each track compiles at first use: the JIT modules, their units and flags.

Every list here is read off the wheels' own JIT code: flashinfer's
gen_jit_spec / gen_*_module (jit/core.py, jit/cpp_ext.py, jit/fused_moe.py,
jit/attention), sglang's load_jit calls (kernels/ops/..., kernels/jit/utils).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

TRACKS = {"pinned": ("0.5.17", "0.6.15.post1"), "current": ("0.5.23", "0.7.2")}
ARCHES = ("sm_120a", "sm_120f", "sm_121a")
# flashinfer's gen_jit_spec cuda_cflags, build_cuda_cflags and COMMON_NVCC_FLAGS.
FI_FLAGS = [
    "-std=c++17", "-use_fast_math", "-Xfatbin=-compress-all", "-DNDEBUG", "-O3",
    "-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E4M3",
    "-DFLASHINFER_ENABLE_FP8_E5M2", "-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1",
    "-Xcompiler", "-fPIC",
]  # fmt: skip
# gen_jit_spec's cflags for a .cpp unit (the host compiler, not nvcc).
FI_CXX = ["-std=c++17", "-Wno-switch-bool", "-DNDEBUG", "-O3", "-fPIC"]
SG_FLAGS = ["-std=c++20", "-O3", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC"]
CUTLASS_FLAGS = [
    "-DNDEBUG", "-DCUTE_USE_PACKED_TUPLE=1", "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1",
    "-DCUTLASS_VERSIONS_GENERATED", "-DCUTLASS_TEST_LEVEL=0",
    "-DCUTLASS_TEST_ENABLE_CACHED_RESULTS=1", "-DCUTLASS_DEBUG_TRACE_LEVEL=0",
    "--expt-extended-lambda",
]  # fmt: skip
# gen_cutlass_fused_moe_sm120_module's nvcc flags, plus build_cuda_cflags' own.
MOE_FLAGS = [
    "-DCOMPILE_BLACKWELL_TMA_GEMMS", "-DCOMPILE_BLACKWELL_SM120_TMA_GROUPED_GEMMS",
    "-DENABLE_BF16", "-DENABLE_FP8", "-DENABLE_FP4", "-DUSING_OSS_CUTLASS_MOE_GEMM",
    "-DCUTLASS_ENABLE_GDC_FOR_SM100=1", "--expt-relaxed-constexpr",
    "-static-global-template-stub=false",
]  # fmt: skip
MOE_INCLUDES = [
    "nv_internal", "nv_internal/include", "nv_internal/tensorrt_llm/cutlass_extensions/include",
    "nv_internal/tensorrt_llm/kernels/cutlass_kernels/include",
    "nv_internal/tensorrt_llm/kernels/cutlass_kernels",
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
# Where the MoE module's generated CUTLASS instantiations go (flashinfer puts
# them under FLASHINFER_GEN_SRC_DIR/cutlass_instantiations/120).
MOE_GEN = "gen/cutlass_instantiations/120"


@dataclass
class Module:
    """One JIT module as its package builds it: flashinfer sources, or an
    sglang load_jit(cuda_files, cuda_wrappers) with its template arguments."""

    owner: str  # flashinfer | sglang
    name: str  # its JIT cache name (sm12x.gpucode.firstboot matches it)
    sources: list[str]  # flashinfer: csrc-relative (MoE: MOE_GEN too); sglang: jit/csrc-relative
    wrappers: list[str] = field(default_factory=list)  # sglang: Class<args>::fn
    flags: list[str] = field(default_factory=list)
    groups: tuple[tuple[str, str], ...] = (("all", ""),)  # (label, kernel-name regex)
    includes: list[str] = field(default_factory=list)  # flashinfer: csrc-relative -I dirs
    boot: bool = True  # False: the first boot on CC 12.x does not build it (why at the module)


def moe_sources(fused_moe_py: Path) -> list[str]:
    """gen_cutlass_fused_moe_module's source list, read from flashinfer's own code:
    its csrc files in order, the generated instantiations where it globs them."""
    body = fused_moe_py.read_text().partition("def gen_cutlass_fused_moe_module")[2]
    listed = body.split("\ndef ", 1)[0].partition("generate_gemm_operations(")[2]
    listed = listed.split("extra_cuda_cflags", 1)[0]
    found = []
    for item in re.finditer(
        r'FLASHINFER_CSRC_DIR\s*/\s*"([^"]+)"|rglob\("\*\.generated\.cu"\)', listed
    ):
        found.append(item.group(1) or MOE_GEN)
    if MOE_GEN not in found or len(found) < 10:
        raise RuntimeError(f"{fused_moe_py}: gen_cutlass_fused_moe_module's sources not found")
    return found


def modules(track: str, fused_moe_py: Path | None = None) -> list[Module]:
    """The track's modules; the fused MoE only when flashinfer's fused_moe.py is given."""
    mla = MLA_015 if track == "pinned" else MLA_072
    args = "512, fp32_t, bf16_t, bf16_t, true"
    topk1 = "TopKKernel<true>::transform"
    topk2 = (
        ["TopKKernel::transform", "TopKKernel::plan"]
        if track == "pinned"
        else [f"TopKKernel<true>::{f}" for f in ("transform_paged", "transform_ragged", "plan")]
    )
    mla_groups = (("decode", "decode"), ("prefill", "prefill"))
    found = [
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
        # 0.5.23's arg_groups/model_hook.py sets SGLANG_OPT_USE_TOPK_V2 False for
        # DeepSeek-V4 on any CC 12.x: compiled for the table, not at its first boot.
        Module("sglang", "dpsk_v4_topk_v2", ["deepseek_v4/topk_v2.cuh"], topk2,
               boot=track == "pinned"),
        Module(
            "sglang", "fp8_blockwise_scaled_mm",
            ["gemm/fp8_blockwise/fp8_blockwise_scaled_mm_entry.cuh"],
            ["fp8_blockwise_scaled_mm"], [*CUTLASS_FLAGS, "--expt-relaxed-constexpr"],
        ),
    ]  # fmt: skip
    if fused_moe_py is not None:
        found.append(
            Module(
                "flashinfer", "fused_moe_120", moe_sources(fused_moe_py), flags=MOE_FLAGS,
                groups=(("all", ""), ("fp8 x fp4 grouped GEMM", r"float_e4m3.*float_e2m1|"
                                      r"e4m3.*e2m1")),
                includes=[*MOE_INCLUDES, MOE_GEN],
            )
        )  # fmt: skip
    return found
