"""Patches 0020-0022 on sglang's DeepSeek-V4 JIT CUDA sources, checked on CPU.

What they change at run time (verify rows planned, the race, the write before the
cache) needs a GPU: benchmarks/dsv4_kernel_check.sh, figures in docs/benchmarks.md.
Here, with nvcc but no GPU: the sources the patches target are the same in sglang
0.5.16 and 0.5.17, the patched sources compile for sm_120a (the RTX PRO 6000 / 5090
target; the H200 runs built sm_90a), and the planners' write rule, compiled from the
patched c_plan.cuh and run on the host, keeps every row of the verifies the recipes
can ask for while leaving non-speculative plans as sglang wrote them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CSRC = {
    "0.5.16": "sglang/jit_kernel",
    "0.5.17": "sglang/kernels/jit",
    "0.5.23": "sglang/kernels/jit",
}
SPEC_RING = {4: 16, 128: 256}
PLAIN_RING = {4: 8, 128: 128}

nvcc = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(nvcc is None, reason="nvcc is not installed")


def source(tree: Path, version: str, name: str) -> Path:
    return tree / CSRC[version] / "csrc" / "deepseek_v4" / name


def compile_cuda(tree: Path, version: str, code: str, out: Path, link: bool) -> None:
    """nvcc with the flags sglang's load_jit gives its JIT kernels, for sm_120a."""
    tvm_ffi = pytest.importorskip("tvm_ffi.libinfo")
    unit = out.with_suffix(".cu")
    unit.write_text(code)
    cmd = [
        nvcc,
        "-DSGL_CUDA_ARCH=1200",
        "-std=c++20",
        "-O3",
        "--expt-relaxed-constexpr",
        "-gencode=arch=compute_120a,code=sm_120a",
        f"-I{tree / CSRC[version] / 'include'}",
        f"-I{tvm_ffi.find_include_path()}",
        f"-I{tvm_ffi.find_dlpack_include_path()}",
        str(unit),
        "-o",
        str(out),
    ]
    if not link:
        cmd.insert(1, "-c")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("name", ["c_plan.cuh", "store.cuh"])
def test_0_5_16_and_0_5_17_share_the_sources_the_patches_change(sglang_tree, name):
    old, new = sglang_tree("0.5.16", patched=False), sglang_tree("0.5.17", patched=False)
    assert source(old, "0.5.16", name).read_bytes() == source(new, "0.5.17", name).read_bytes()
    old, new = sglang_tree("0.5.16"), sglang_tree("0.5.17")
    assert source(old, "0.5.16", name).read_bytes() == source(new, "0.5.17", name).read_bytes()


def test_the_patches_change_what_they_say(sglang_tree):
    pristine, patched = sglang_tree("0.5.17", patched=False), sglang_tree("0.5.17")
    plan_before = source(pristine, "0.5.17", "c_plan.cuh").read_text()
    plan_after = source(patched, "0.5.17", "c_plan.cuh").read_text()
    assert "kMaxMTPDraftTokens = 4" in plan_before and "kMaxMTPDraftTokens = 4;" not in plan_after
    # Both planners use the one rule: the GPU kernel's two paths and the host loop.
    assert plan_after.count("first_write_position(") == 4
    stage_b = plan_after.index("// === Stage B")
    assert plan_after.rindex("__syncthreads();", 0, stage_b) > plan_after.index("warp_min[tx] = ")
    store_after = source(patched, "0.5.17", "store.cuh").read_text()
    assert store_after.count("if (static_cast<int64_t>(index) < 0) return;") == 2


RULE_PROBE = """
#include "{plan}"
#include <cstdio>
int main() {{
  const int rings[][2] = {{{{4, 16}}, {{128, 256}}, {{4, 8}}, {{128, 128}}}};
  for (const auto& r : rings) {{
    for (int extend = 1; extend <= 400; ++extend) {{
      for (int seq = 1024; seq < 1024 + 256; ++seq) {{
        std::printf("%d %d %d %d %d\\n", r[0], r[1], extend, seq,
                    first_write_position(seq, extend, r[0], r[1] - r[0]));
      }}
    }}
  }}
}}
"""


@pytest.fixture(scope="module")
def write_rule(sglang_tree, tmp_path_factory):
    """{(ratio, ring, extend, seq_len): first written position}, from the patched source."""
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    tree = sglang_tree("0.5.17")
    exe = tmp_path_factory.mktemp("rule") / "probe"
    compile_cuda(
        tree, "0.5.17", RULE_PROBE.format(plan=source(tree, "0.5.17", "c_plan.cuh")), exe, link=True
    )
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, check=True)
    rule = {}
    for line in out.stdout.splitlines():
        ratio, ring, extend, seq, first = map(int, line.split())
        rule[ratio, ring, extend, seq] = first
    return rule


def boundary(ratio: int, seq: int) -> int:
    """Where the next compression reads back to (sglang's rule, unpatched)."""
    return seq // ratio * ratio - (ratio if ratio == 4 else 0)


@needs_nvcc
@pytest.mark.parametrize("ratio", [4, 128])
def test_every_row_of_a_verify_up_to_ten_rows_is_written(write_rule, ratio):
    ring = SPEC_RING[ratio]
    for rows in range(1, 11):  # DSPARK depth 0..9
        for seq in range(1024, 1024 + 256):
            assert write_rule[ratio, ring, rows, seq] <= seq - rows, (ratio, rows, seq)


@needs_nvcc
@pytest.mark.parametrize("ratio", [4, 128])
def test_without_speculative_decoding_the_plan_is_unchanged(write_rule, ratio):
    # sglang's GPU planner wrote from min(boundary, seq - min(spare, 4)), its host loop
    # from the boundary; without speculation's wider ring both are the boundary.
    ring = PLAIN_RING[ratio]
    for extend in (1, 4, 5, 8, 100, 400):
        for seq in range(1024, 1024 + 256):
            old_gpu = min(boundary(ratio, seq), seq - min(ring - ratio, 4))
            assert write_rule[ratio, ring, extend, seq] == boundary(ratio, seq) == old_gpu


@needs_nvcc
@pytest.mark.parametrize("ratio", [4, 128])
def test_a_long_prefill_writes_at_most_the_rings_spare_room(write_rule, ratio):
    ring = SPEC_RING[ratio]
    for seq in range(1024, 1024 + 256):
        assert write_rule[ratio, ring, 400, seq] == min(boundary(ratio, seq), seq - (ring - ratio))


STORE_UNIT = """
#include "{store}"
template struct FusedStoreCacheFlashMLAKernel<bf16_t, int64_t, 256, true>;
template struct FusedStoreCacheIndexerKernel<bf16_t, int64_t, 64, true>;
"""


@needs_nvcc
def test_the_patched_store_kernels_compile_for_sm_120a(sglang_tree, tmp_path):
    tree = sglang_tree("0.5.17")
    compile_cuda(
        tree,
        "0.5.17",
        STORE_UNIT.format(store=source(tree, "0.5.17", "store.cuh")),
        tmp_path / "store.o",
        link=False,
    )


# --- The current track: sglang 0.5.23 ----------------------------------------------
# 0020 and 0021 are retired there (patches.toml); 0022 is not, and is ported. What
# the H200 showed for 0.5.16/0.5.17 (benchmarks/dsv4_kernel_check.sh) has not been
# run on 0.5.23: these are its sources, and the bound its own Python asserts.

CURRENT = "0.5.23"


def test_0_5_23_plans_every_row_of_the_recipes_verifies(sglang_tree):
    """No row cap: the write plan keeps `mtp_pad = ring - window + 2` trailing rows in
    all three planners (the GPU kernel's two paths and the host loop), the bound
    0.5.23's pool configurator asserts at boot against the draft count
    (get_compress_state_write_pad, "mirrors mtp_pad in c_plan.cuh"). With the
    speculative c4 ring of 16 slots that is 10 rows: patches.toml's [[release]]."""
    from sm12x.patches import series as patch_series

    tree = sglang_tree(CURRENT, patched=False)
    plan = source(tree, CURRENT, "c_plan.cuh").read_text()
    assert "kMaxMTPDraftTokens" not in plan
    assert "const auto mtp_pad = ring_size > window_size ? ring_size - window_size + 2 : 0;" in plan
    assert plan.count("sl - params.mtp_pad)") == 2 and plan.count("seq_len - mtp_pad)") == 1
    pool = (tree / "sglang/srt/mem_cache/deepseek_v4_memory_pool.py").read_text()
    assert "return ring_size - window_size + 2 if ring_size > window_size else 0" in pool
    assert "return 16 if compress_ratio == 4 else 256" in pool  # the speculative rings
    window = 4 * 2  # c4 compresses overlapping windows of twice its ratio (c_plan.cuh)
    assert patch_series.verify_rows(CURRENT).rows == SPEC_RING[4] - window + 2 == 10
    configurator = (tree / "sglang/srt/model_executor/pool_configurator.py").read_text()
    assert "assert num_draft_tokens <= max_draft_tokens" in configurator


def test_0_5_23_has_the_barrier_0021_adds(sglang_tree):
    """Each warp writes its own reduction slot, then the block syncs, then warp 0 reads."""
    plan = source(sglang_tree(CURRENT, patched=False), CURRENT, "c_plan.cuh").read_text()
    stage_b = plan[
        plan.index("// === Stage B") : plan.index("const auto num_q = params.num_q_tokens;")
    ]
    write, sync = stage_b.index("warp_max[warp_id] = "), stage_b.index("__syncthreads();")
    assert write < sync < stage_b.index("warp::reduce_max(warp_max[lane_id])")


def test_0_5_23_still_stores_at_index_minus_1_and_the_port_guards_it(sglang_tree):
    pristine = source(sglang_tree(CURRENT, patched=False), CURRENT, "store.cuh").read_text()
    patched = source(sglang_tree(CURRENT), CURRENT, "store.cuh").read_text()
    guard = "if (static_cast<int64_t>(index) < 0) return;"
    assert guard not in pristine
    # The V4 and V4.1 FlashMLA stores and the indexer store, each before its first store.
    assert patched.count(guard) == 3
    for kernel in (
        "fused_store_flashmla_cache(",
        "fused_store_flashmla_cache_v41(",
        "fused_store_indexer_cache(",
    ):
        body = patched[patched.index(kernel) :]
        body = body[: body.index("PDLTriggerSecondary")]
        first_store = min(
            i
            for i in (
                body.find("Paged::row("),
                body.find("const int32_t page = index >> kPageBits;"),
            )
            if i >= 0
        )
        assert 0 <= body.find(guard) < first_store, kernel


# 0.5.23 moved the kernels into namespace sglang and gave the FlashMLA store a layout
# (its wrapper struct instantiates RoPE paths V4 refuses): the three __global__
# kernels the patch changes, instantiated as the JIT wrapper launches them.
STORE_UNIT_0_5_23 = """
#include "{store}"
// Taking each kernel's address instantiates it, as the JIT wrapper's launch does.
void* sm12x_store_kernels[] = {{
    (void*)&sglang::fused_store_flashmla_cache<sglang::bf16_t, int64_t, 8, true>,
    (void*)&sglang::fused_store_flashmla_cache_v41<sglang::bf16_t, int64_t, 8,
                                                   sglang::deepseek_v4::KVLayout::V41, false, true>,
    (void*)&sglang::fused_store_indexer_cache<sglang::bf16_t, int64_t, 6, true>,
}};
"""


@needs_nvcc
def test_the_patched_0_5_23_store_kernels_compile_for_sm_120a(sglang_tree, tmp_path):
    tree = sglang_tree(CURRENT)
    compile_cuda(
        tree,
        CURRENT,
        STORE_UNIT_0_5_23.format(store=source(tree, CURRENT, "store.cuh")),
        tmp_path / "store.o",
        link=False,
    )
