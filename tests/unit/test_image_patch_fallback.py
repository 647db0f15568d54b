"""scripts/apply-patches without the `patch` program: its own applier, on the real wheels.

The real bases do not promise `patch`, and the build must not reach the
Ubuntu archive to install it (the Dockerfile installs nothing from apt). With
no `patch` on PATH apply-patches applies the series itself, with patch's
--fuzz=0 rules; these cases prove it makes the very bytes `patch` makes, on
every sglang the series covers, undoes them (the already-applied check), and
refuses a file that was edited, with the same message.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.support import trees


def no_patch_env(tmp_path: Path) -> dict[str, str]:
    """PATH with python only: `patch` cannot be found."""
    bindir = tmp_path / "bin-without-patch"
    bindir.mkdir(exist_ok=True)
    (bindir / "python3").symlink_to(sys.executable)
    return {**os.environ, "PATH": str(bindir)}


def targets(site: Path) -> dict[str, bytes]:
    return {str(p.relative_to(site)): p.read_bytes() for p in sorted(site.rglob("*.py"))}


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs `patch` to compare against")
@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_the_fallback_makes_the_bytes_patch_makes(version, tmp_path):
    with_tool = trees.unpack_sglang(version, tmp_path / "tool", full=False)
    without = trees.unpack_sglang(version, tmp_path / "python", full=False)
    made = trees.apply_patches(with_tool)
    assert made.returncode == 0, made.stderr
    env = no_patch_env(tmp_path)
    own = trees.apply_patches(without, env=env)
    assert own.returncode == 0, own.stderr
    assert targets(without) == targets(with_tool)
    # Applied twice: the reverse check finds the series in, and changes nothing.
    again = trees.apply_patches(without, env=env)
    assert again.returncode == 0, again.stderr
    assert "already applied" in again.stdout
    assert targets(without) == targets(with_tool)
    check = trees.apply_patches(without, "--check", env=env)
    assert check.returncode == 0, check.stderr


def test_the_fallback_refuses_an_edited_target(tmp_path):
    site = trees.unpack_sglang("0.5.17", tmp_path / "site", full=False)
    target = site / "sglang/kernels/ops/attention/flash_mla_sm120.py"
    target.write_text(target.read_text().replace("import math", "import math  # edited", 1))
    before = targets(site)
    proc = trees.apply_patches(site, env=no_patch_env(tmp_path))
    assert proc.returncode == 1
    assert (
        "sglang 0.5.17: 0001-sm120-sparse-mla-topk-dispatch.patch does not apply" in proc.stderr
    ), proc.stderr
    assert "Hunk #1 FAILED" in proc.stderr
    assert targets(site) == before  # nothing half-written
