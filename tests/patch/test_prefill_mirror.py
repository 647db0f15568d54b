"""The patch's prefill mirror equals the C++ table of every verified flashinfer wheel.

The patched module selects its mirror entry by the installed flashinfer's
version; this runs that selection against each wheel and compares the result
with what sm12x.selftest.csrc parses out of csrc/sparse_mla_sm120_prefill.cu.
"""

from __future__ import annotations

import json

import pytest

from sm12x.mock import wheels
from tests.support import trees

SELECTED = (
    "import json, sm12x.selftest.env as e; e.stub_torchvision(); "
    "from sglang.kernels.ops.attention import flash_mla_sm120 as m; "
    "t = m._sm12x_flashinfer(); "
    "print(json.dumps({k: sorted(v) for k, v in t[1].items()}))"
)
PARSED = (
    "import json; from pathlib import Path; import sm12x.selftest.env as e; "
    "from sm12x.selftest import csrc; "
    "t = csrc.parse_prefill(csrc.csrc_dir(e.flashinfer_package()) / 'sparse_mla_sm120_prefill.cu'); "
    "print(json.dumps({k: list(v) for k, v in t.as_mirror().items()}))"
)


@pytest.mark.parametrize("flashinfer", wheels.patch_series()["patch"][0]["flashinfer_verified"])
def test_mirror_matches_the_wheels_cpp(flashinfer, sglang_tree, flashinfer_tree, pins):
    site = [sglang_tree(pins["SGLANG_VERSION"]), flashinfer_tree(flashinfer)]
    selected = trees.run_python(site, ["-c", SELECTED])
    parsed = trees.run_python(site, ["-c", PARSED])
    assert selected.returncode == 0, selected.stderr
    assert parsed.returncode == 0, parsed.stderr
    assert json.loads(selected.stdout) == json.loads(parsed.stdout)
