"""tools/jit_kernels builds each track's modules the way the wheels' own JIT code
does: the fused MoE's unit list read from flashinfer's fused_moe.py, its CUTLASS
instantiations from flashinfer's own generator, sglang 0.5.23's export wrapper;
and runs that are cut short add up unit by unit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import jit_kernels as jk
from tools.jit_kernels import build, cli


@pytest.mark.parametrize("track", list(jk.TRACKS))
def test_the_fused_moe_units_are_flashinfer_s_own(track, tmp_path):
    module = next(m for m in cli.track_modules(track) if m.name == "fused_moe_120")
    units = build.units(track, module, tmp_path)
    names = [Path(u).name for u in units]
    # fused_moe.py's csrc list, in order, and the sm120 grouped GEMMs its generator wrote.
    assert names[0] == "moe_gemm_tma_warp_specialized_input.cu"
    assert "moe_gemm_kernels_fp8_fp4.cu" in names and names[-1] == "lora.cpp"
    generated = [n for n in names if n.endswith(".generated.cu")]
    assert any("gemm_grouped_sm120" in n for n in generated)
    assert len(units) == len(set(units)) > 60
    # A .cpp unit goes to the host compiler with gen_jit_spec's cflags, not nvcc.
    assert build.command(track, module, units[-1], "sm_120f", tmp_path / "o")[0] == "c++"
    cuda = build.command(track, module, units[0], "sm_121a", tmp_path / "o")
    assert "-gencode=arch=compute_121a,code=sm_121a" in cuda
    assert "-DCOMPILE_BLACKWELL_SM120_TMA_GROUPED_GEMMS" in cuda


def test_a_fused_moe_py_without_the_list_is_refused(tmp_path):
    broken = tmp_path / "fused_moe.py"
    broken.write_text("def gen_cutlass_fused_moe_module():\n    return gen_jit_spec('x', [])\n")
    with pytest.raises(RuntimeError, match="sources not found"):
        jk.modules("pinned", broken)


@pytest.mark.parametrize("track, wrapped", [("pinned", False), ("current", True)])
def test_sglang_exports_are_wrapped_as_its_load_jit_does(track, wrapped, tmp_path):
    module = next(m for m in jk.modules(track) if m.name == "dpsk_v4_topk_v1")
    (unit,) = build.units(track, module, tmp_path)
    text = Path(unit).read_text()
    assert ("namespace sglang {" in text) is wrapped
    assert ("#include <tvm/ffi/function.h>" in text) is wrapped
    assert "TVM_FFI_DLL_EXPORT_TYPED_FUNC(w0, (TopKKernel<true>::transform));" in text


def row(name: str) -> dict:
    return {"name": name, "regs": 64, "smem": 1024, "local": 0, "threads": 256}


def test_runs_add_up_unit_by_unit():
    first = {"k": {"units": 1, "seconds": 5.0, "rows": [row("a")], "machine": "m",
                   "errors": ["b.cu: stopped at the end of the time budget"],
                   "compiled": ["a.cu"]}}  # fmt: skip
    second = {"k": {"units": 1, "seconds": 7.0, "rows": [row("b")], "machine": "m",
                    "errors": ["c.cpp: error: no"], "compiled": ["b.cu"]}}  # fmt: skip
    merged = cli.merge([first, second])["k"]
    assert merged["units"] == 2 and merged["seconds"] == 12.0
    assert [r["name"] for r in merged["rows"]] == ["a", "b"]
    assert merged["errors"] == ["c.cpp: error: no"]
    lines, times = cli.render({"current/fused_moe_120/sm_120f": merged})
    assert any("| 2 of 3 |" in line for line in lines)
    # Only a host-only unit missing: every kernel measured, the time announced.
    assert times["0.5.23"]["sm_120f"]["fused_moe_120"]["seconds"] == 12
    merged["errors"] = ["d.cu: stopped at the end of the time budget"]
    lines, times = cli.render({"current/fused_moe_120/sm_120f": merged})
    assert any("not compiled: d.cu" in line for line in lines) and times == {}
