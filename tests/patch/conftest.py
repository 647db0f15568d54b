"""Fixtures: real sglang/flashinfer trees, pristine or patched, shared per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm12x.mock import wheels
from sm12x.versions import load_versions
from tests.support import trees


@pytest.fixture(scope="session")
def pins() -> dict[str, str]:
    return load_versions()


@pytest.fixture(scope="session")
def series() -> list[dict]:
    return wheels.patch_series()["patch"]


@pytest.fixture(scope="session")
def flashinfer_tree(tmp_path_factory):
    """flashinfer_tree(version) -> an unzipped flashinfer-python wheel (read-only use;
    one per run, shared by the workers: trees.shared)."""
    root = trees.run_folder(tmp_path_factory)

    def make(version: str) -> Path:
        return trees.shared(
            root, f"flashinfer-{version}", lambda dest: trees.unpack_flashinfer(version, dest)
        )

    return make


def _patched(version: str, dest: Path) -> None:
    site = trees.unpack_sglang(version, dest)
    proc = trees.apply_patches(site)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/apply-patches failed on sglang {version}:\n{proc.stderr}")


@pytest.fixture(scope="session")
def sglang_tree(tmp_path_factory):
    """sglang_tree(version, patched=True) -> an unzipped sglang wheel, patched by
    scripts/apply-patches unless patched=False (read-only use; one per run,
    shared by the workers: trees.shared)."""
    root = trees.run_folder(tmp_path_factory)

    def make(version: str, patched: bool = True) -> Path:
        if patched:
            return trees.shared(root, f"sglang-{version}-patched", lambda d: _patched(version, d))
        return trees.shared(
            root, f"sglang-{version}-pristine", lambda d: trees.unpack_sglang(version, d)
        )

    return make
