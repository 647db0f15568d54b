"""The `mock` extra takes the CPU torch, pinned as the test environment pins it.

PyPI's Linux torch is the CUDA build (with GBs of nvidia-* wheels); the
`+cpu` local version only a CPU build satisfies (PyTorch's CPU index, or this
machine's wheel folder), so pip refuses rather than pulls the CUDA one. The
pins are versions.env's, written a second time in pyproject.toml (pip cannot
read versions.env): this test is what keeps the two equal. The install itself:
tests/unit/test_doc_commands.py installs README's command in a clean virtualenv."""

from __future__ import annotations

import tomllib

import pytest
from packaging.requirements import Requirement

from sm12x.versions import load_versions
from tests.support.cli import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
MOCK = [Requirement(r) for r in PROJECT["optional-dependencies"]["mock"]]
LINUX = {"sys_platform": "linux", "platform_machine": "x86_64", "extra": ""}
MAC = {"sys_platform": "darwin", "platform_machine": "arm64", "extra": ""}


def on(env: dict, name: str) -> list[Requirement]:
    return [r for r in MOCK if r.name == name and (r.marker is None or r.marker.evaluate(env))]


def test_linux_gets_the_cpu_torch_pinned_as_the_tests_pin_it():
    pins = load_versions()
    (torch,) = on(LINUX, "torch")
    assert str(torch.specifier) == f"=={pins['TEST_TORCH_VERSION']}+cpu"
    (triton,) = on(LINUX, "triton")  # sglang's serving code imports it (issue 30)
    assert str(triton.specifier) == f"=={pins['TEST_TRITON_VERSION']}"


def test_elsewhere_pypi_s_torch_is_the_cpu_one_and_pinned_the_same():
    (torch,) = on(MAC, "torch")
    assert str(torch.specifier) == f"=={load_versions()['TEST_TORCH_VERSION']}"
    assert on(MAC, "triton") == []


def test_no_cuda_package_and_nothing_that_pulls_a_torch_of_its_own():
    names = {r.name.lower() for r in MOCK}
    assert not [n for n in names if n.startswith("nvidia-") or "cuda" in n]
    # torchvision and torchaudio would pull PyPI's (CUDA) torch beside the pin.
    assert not names & {"torchvision", "torchaudio", "sglang", "flashinfer-python"}


@pytest.mark.wheels  # reads the pinned sglang wheel's own requirements
def test_the_pins_sglang_reads_are_the_pinned_release_s_own():
    """transformers and xgrammar at sglang 0.5.17's own pins: its code then runs on
    this install as it is (no overlay of pins), which is what an offline start from
    a clean install finds (tests/support/mock_starts.py starts it)."""
    from sm12x.mock.wheels import OVERLAY_DISTS, sglang_pins

    pinned = sglang_pins(load_versions()["SGLANG_VERSION"])
    for name in ("transformers", "xgrammar"):
        assert name in OVERLAY_DISTS
        (req,) = on(LINUX, name)
        assert str(req.specifier) == f"=={pinned[name]}", (name, pinned.get(name))
