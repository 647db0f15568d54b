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
    """flashinfer_tree(version) -> an unzipped flashinfer-python wheel (read-only use)."""
    made: dict[str, Path] = {}

    def make(version: str) -> Path:
        if version not in made:
            made[version] = trees.unpack_flashinfer(
                version, tmp_path_factory.mktemp(f"flashinfer-{version}")
            )
        return made[version]

    return make


@pytest.fixture(scope="session")
def sglang_tree(tmp_path_factory):
    """sglang_tree(version, patched=True) -> an unzipped sglang wheel, patched by
    scripts/apply-patches unless patched=False (read-only use)."""
    made: dict[tuple[str, bool], Path] = {}

    def make(version: str, patched: bool = True) -> Path:
        key = (version, patched)
        if key not in made:
            site = trees.unpack_sglang(
                version,
                tmp_path_factory.mktemp(f"sglang-{version}-{'patched' if patched else 'pristine'}"),
            )
            if patched:
                proc = trees.apply_patches(site)
                assert proc.returncode == 0, proc.stderr
            made[key] = site
        return made[key]

    return make
