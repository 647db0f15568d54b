"""sm12x.gpucode.firstboot: the JIT modules a first boot compiles, named before
sglang starts, and the boot wait that shows the compile (verify.boot)."""

from __future__ import annotations

import json

import pytest

from sm12x.gpucode import firstboot
from tools import jit_kernels
from verify.boot import compiling

TIMES = {
    "0.5.17": {
        "sm_120f": {
            "sparse_mla_sm120": {"owner": "flashinfer", "seconds": 300},
            "dpsk_v4_topk_v2": {"owner": "sglang", "seconds": 60},
        },
        "sm_121a": {"sparse_mla_sm120": {"owner": "flashinfer", "seconds": 310}},
    }
}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setattr(
        firstboot, "_version", {"flashinfer-python": "0.6.15.post1", "sglang": "0.5.17"}.get
    )
    return tmp_path


def test_the_arch_is_the_one_both_packages_compile_for_with_cuda_13():
    assert firstboot.arch("12.0") == "120f"
    assert firstboot.arch("12.1") == "121a"


def test_a_cold_cache_misses_every_module_of_the_arch(home):
    env = {"HOME": str(home)}
    assert firstboot.missing("0.5.17", "12.0", env, TIMES) == [
        ("sglang", "dpsk_v4_topk_v2", 60),
        ("flashinfer", "sparse_mla_sm120", 300),
    ]
    assert firstboot.missing("0.5.17", "12.1", env, TIMES) == [
        ("flashinfer", "sparse_mla_sm120", 310)
    ]
    assert firstboot.missing("0.5.99", "12.0", env, TIMES) == []


def test_a_module_in_its_packages_cache_is_not_named(home):
    base = home / "volume"
    ops = base / ".cache/flashinfer/0.6.15.post1/120f/cached_ops/sparse_mla_sm120"
    ops.mkdir(parents=True)
    (ops / "sparse_mla_sm120.so").write_bytes(b"")
    tvm = home / "tvm" / "sgl_kernel_jit_dpsk_v4_topk_v2_0123__arch_12.0f__tvmffi_0.1.11"
    tvm.mkdir(parents=True)
    (tvm / "sgl_kernel_jit_dpsk_v4_topk_v2_0123.so").write_bytes(b"")
    env = {"HOME": str(home), "FLASHINFER_WORKSPACE_BASE": str(base)}
    assert firstboot.missing("0.5.17", "12.0", env, TIMES) == [("sglang", "dpsk_v4_topk_v2", 60)]
    env["TVM_FFI_CACHE_DIR"] = str(home / "tvm")
    assert firstboot.missing("0.5.17", "12.0", env, TIMES) == []
    # Built for the other arch: still missing on CC 12.1.
    assert firstboot.missing("0.5.17", "12.1", env, TIMES) == [
        ("flashinfer", "sparse_mla_sm120", 310)
    ]


def test_sglang_0_5_23s_cache_layout(home):
    leaf = home / ".cache/sglang/jit/sm121a/sgl_kernel_jit_dpsk_v4_topk_v2_ab/build-1/deps-2"
    leaf.mkdir(parents=True)
    (leaf / "sgl_kernel_jit_dpsk_v4_topk_v2_ab.so").write_bytes(b"")
    times = {"0.5.23": {"sm_121a": {"dpsk_v4_topk_v2": {"owner": "sglang", "seconds": 5}}}}
    assert firstboot.missing("0.5.23", "12.1", {"HOME": str(home)}, times) == []
    assert firstboot.missing("0.5.23", "12.1", {"HOME": str(home / "x")}, times)


def test_the_announcement_is_what_the_boot_wait_reads(home, monkeypatch):
    monkeypatch.setattr(firstboot, "TIMES", home / "times.json")
    firstboot.TIMES.write_text(json.dumps(TIMES))
    said: list[str] = []
    firstboot.announce("12.0", {"HOME": str(home)}, said.append)
    assert len(said) == 2 and all(line.startswith(firstboot.PREFIX) for line in said)
    assert "sparse_mla_sm120 for sm_120f" in said[1] and "about 300 s" in said[1]
    # An entry without the machine it was measured on is from the 2-core runs.
    assert "2 CPU cores" in said[1]
    assert [compiling(line) for line in said] == ["dpsk_v4_topk_v2", "sparse_mla_sm120"]
    # flashinfer 0.7's own line (jit/core.py), in its logger's format.
    line = (
        "2026-12-06 07:00:00,000 - INFO - core.py:594 - flashinfer.jit: Building JIT module "
        "sparse_mla_sm120; this can take several minutes on first use."
    )
    assert compiling(line) == "sparse_mla_sm120"
    assert compiling("Loading safetensors checkpoint shards: 50%") is None


def test_the_measured_times_are_the_compile_sets_modules():
    """jit_times.json (tools/jit_kernels --write) names only modules a first boot
    of the track builds (not 0.5.23's top-k v2, which its model hook turns off on
    CC 12.x), each with a time and the machine that measured it, and covers the
    attention, compressor, top-k and fp8 GEMM modules of both tracks for the
    arches a first boot compiles for (CUDA 13: sm_120f on CC 12.0, sm_121a)."""
    times = json.loads(firstboot.TIMES.read_text())
    for track, (sglang, _) in jit_kernels.TRACKS.items():
        booted = {m.name for m in jit_kernels.modules(track) if m.boot} | {"fused_moe_120"}
        for arch, measured in times.get(sglang, {}).items():
            assert set(measured) <= booted, (sglang, arch)
            assert all(e["seconds"] > 0 and e["machine"] for e in measured.values())
            assert {e["owner"] for e in measured.values()} <= {"flashinfer", "sglang"}
        common = {"sparse_mla_sm120", "dpsk_v4_compress_4_v2", "dpsk_v4_compress_128_v2",
                  "dpsk_v4_topk_v1", "fp8_blockwise_scaled_mm"}  # fmt: skip
        for arch in ("sm_120f", "sm_121a"):
            assert common <= set(times[sglang][arch]), (sglang, arch)
    assert "dpsk_v4_topk_v2" in times["0.5.17"]["sm_120f"]
    assert "dpsk_v4_topk_v2" not in times["0.5.23"]["sm_120f"]
