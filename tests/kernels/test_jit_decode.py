"""The one sparse-MLA decode unit of flashinfer's sm120 JIT module, compiled
with nvcc 13 from PyPI for sm_120a and sm_121a, fits sm_120/sm_121's limits.

The pinned track's flashinfer (the image's default) compiles
csrc/sparse_mla_sm120_decode_dsv4.cu at first use on the rig; no wheel on PyPI
carries its SASS. tools/jit_kernels compiles it as flashinfer's JIT does and
reads the kernels' resources with cuobjdump. The answer is kept under
$SM12X_CACHE/kernels/jit, keyed by the hash of versions.env, the compile
tool and this test: a new pin or a changed check compiles again."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import pytest

from tests.support import kernel_wheels
from tools import jit_kernels as jk
from tools import kernel_resources as kr

ROOT = Path(__file__).resolve().parents[2]
TRACK, UNIT = jk.DECODE_UNIT


def key() -> str:
    digest = hashlib.sha256()
    package = sorted(Path(jk.__file__).parent.glob("*.py"))
    for path in (ROOT / "versions.env", *package, Path(kr.__file__), Path(__file__)):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def decode_rows(arch: str) -> list[dict]:
    if not (kernel_wheels.tool_dir() / "nvcc").is_file():
        pytest.fail(f"no nvcc in {kernel_wheels.tool_dir()}: run `{kernel_wheels.DOWNLOAD}`")
    kept = kernel_wheels.cache() / "jit" / f"decode-{arch}-{key()}.json"
    if kept.is_file():
        return json.loads(kept.read_text())
    module = next(m for m in jk.modules(TRACK) if m.name == "sparse_mla_sm120")
    source = next(s for s in jk.units(TRACK, module, Path()) if s.endswith(UNIT))
    with tempfile.TemporaryDirectory() as tmp:
        _, rows = jk.compile_unit(TRACK, module, source, arch, Path(tmp))
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(rows))
    return rows


@pytest.mark.parametrize("arch", ["sm_120a", "sm_121a"])
def test_the_sparse_mla_decode_kernels_fit_sm_12x(arch):
    rows = decode_rows(arch)
    decode = [r for r in rows if "sparse_mla_decode_dsv4_kernel" in r["name"]]
    merge = [r for r in rows if "sparse_mla_decode_dsv4_merge_kernel" in r["name"]]
    assert decode and merge, [r["name"][:80] for r in rows]
    for r in rows:
        assert kr.flags(r["regs"], r["smem"], r["threads"]) == [], r
        assert r["regs"] <= 255
        # Its launch code asks for ~88 KB dynamic on top (sparse_mla_sm120_decode_dsv4.cu):
        # the static part must leave that room under the 101,376 B opt-in.
        assert r["smem"] + 88 * 1024 <= kr.BLOCK_SMEM, r
        assert r["local"] <= 64, r  # small spills only, no local-memory arrays
