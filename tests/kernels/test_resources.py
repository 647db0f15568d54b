"""tools/kernel_resources on the real sglang-kernel wheels: the library the sm_12x
path loads fits sm_120/sm_121's limits, and its launch bounds are read as
nvdisasm reads them."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from sm12x.gpucode import check
from tests.support import kernel_wheels
from tools import kernel_resources as kr


@pytest.mark.parametrize("version", [v for _, v in kr.CASES])
@pytest.mark.parametrize("machine, arch, target", kr.ARCHES)
def test_the_loaded_library_fits_sm_12x(version, machine, arch, target):
    rows = kr.read(version, machine, arch, target)
    assert len(rows) > 500
    assert any(r["threads"] for r in rows)
    flagged = [
        (r["name"][:100], kr.flags(r["regs"], r["smem"], r["threads"]))
        for r in rows
        if kr.flags(r["regs"], r["smem"], r["threads"])
    ]
    assert not flagged
    for op, pattern, _ in check.CALLED:
        kernels = [r for r in rows if re.search(pattern, r["name"])]
        assert kernels, op
        assert all(r["regs"] <= 255 and r["smem"] + kr.RESERVED <= kr.SM_SMEM for r in kernels)


def test_occupancy_and_flags_use_sm_12x_limits():
    # 256 threads x 32 registers, no shared memory: 6 blocks fill 48 warps.
    assert kr.occupancy(32, 0, 256) == 1.0
    # 255 registers x 256 threads: one block of 8 warps (65,536 registers).
    assert kr.occupancy(255, 0, 256) == 8 / 48
    # 50 KB static + 1 KB reserved per block: one block of 100 KB per SM.
    assert kr.occupancy(32, 50 * 1024, 128) == 4 / 48
    assert kr.flags(128, 0, 1024) == ["registers x threads > 65,536"]
    assert kr.flags(32, 49 * 1024, 128) == ["static shared > 48 KB"]
    assert kr.flags(255, 0, 256) == []


def test_launch_bounds_are_nvdisasm_s():
    library = (
        kernel_wheels.unpacked("0.4.5", "aarch64") / "sgl_kernel" / "sm100" / "common_ops.abi3.so"
    )
    tools = kernel_wheels.tool_dir()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [str(tools / "cuobjdump"), "-xelf", "all", "-arch", "sm_121a", str(library)],
            cwd=tmp,
            check=True,
            capture_output=True,
            timeout=600,
        )
        cubins = sorted(Path(tmp).glob("*.cubin"), key=lambda p: p.stat().st_size)
        cubin = next(c for c in cubins if kr.launch_bounds(c.read_bytes()))
        dump = subprocess.run(
            [str(tools / "nvdisasm"), "-ndf", str(cubin)],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        ).stdout
        ours = kr.launch_bounds(cubin.read_bytes())
    theirs = []
    for chunk in re.split(r"nvinfo : EIATTR_(?:MAX_THREADS|REQNTID)\n", dump)[1:]:
        x, y, z = (
            int(w, 16) for w in re.findall(r"\.word\s+(0x\w+)", chunk.split("nvinfo :")[0])[:3]
        )
        theirs.append(x * y * z)
    assert theirs and sorted(ours.values()) == sorted(theirs)
