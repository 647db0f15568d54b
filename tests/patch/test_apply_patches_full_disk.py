"""scripts/apply-patches on a real full disk (issue 45): all or nothing, one line.

test_apply_patches.py injects an I/O error at each step of the swap; this one
takes none on trust. The real sglang 0.5.17 tree (the files its series
touches) is put on a small tmpfs of its own, the tmpfs is filled to leave a
given number of bytes free, from none to more than the series needs, and
apply-patches runs there, with `patch` and with its own applier. At every
level the tree is byte for byte pristine (no record, no stage, and stderr one
line naming the full disk, no traceback) or fully patched (the record the
same as an unhindered run's); with the space given back, a second run leaves
it fully patched.

Mounting needs root (CAP_SYS_ADMIN); where it is not permitted the test skips
and says why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import trees

VERSION = "0.5.17"
RECORD = "sglang/.sm12x-patches.json"
SIZE = 32 * 1024 * 1024  # the tmpfs: the minimal tree (about 12 MiB) and its stage fit


def snapshot(site: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(site)): p.read_bytes()
        for p in sorted(site.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def free_bytes(folder: Path) -> int:
    stat = os.statvfs(folder)
    return stat.f_bavail * stat.f_frsize


@pytest.fixture
def tmpfs(tmp_path):
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root: the real full-disk test cannot run here")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0755", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here ({done.stderr.strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)


def no_patch_env(tmp_path: Path) -> dict[str, str]:
    bindir = tmp_path / "bin-without-patch"
    bindir.mkdir(exist_ok=True)
    (bindir / "python3").symlink_to(sys.executable)
    return {**os.environ, "PATH": str(bindir)}


def fill(mount: Path, leave: int) -> Path:
    """A file taking all but `leave` bytes of the tmpfs."""
    filler = mount / "filler"
    size = free_bytes(mount) - leave
    with open(filler, "wb") as handle:
        if size > 0:
            os.posix_fallocate(handle.fileno(), 0, size)
    return filler


@pytest.mark.parametrize("applier", ["patch", "own"])
def test_a_real_full_disk_leaves_the_tree_pristine_or_patched(tmpfs, tmp_path, applier):
    if applier == "patch" and shutil.which("patch") is None:
        pytest.skip("no `patch` program on this machine")
    env = no_patch_env(tmp_path) if applier == "own" else None
    pristine_site = trees.unpack_sglang(VERSION, tmp_path / "pristine", full=False)
    pristine = snapshot(pristine_site)
    reference = trees.unpack_sglang(VERSION, tmp_path / "reference", full=False)
    assert trees.apply_patches(reference, env=env).returncode == 0
    patched = snapshot(reference)
    assert patched != pristine and RECORD in patched
    # What the stage needs: a copy of each file the series changes, and the record.
    changed = sum(len(v) for k, v in patched.items() if pristine.get(k) != v)

    outcomes = set()
    levels = [0, 4096, changed // 4, changed // 2, changed, 2 * changed, 4 * changed + 65536]
    for leave in levels:
        site = tmpfs / "site"
        shutil.copytree(pristine_site, site)
        filler = fill(tmpfs, leave)
        proc = trees.apply_patches(site, env=env)
        now = snapshot(site)
        assert not (site / ".sm12x-staging").exists(), (leave, proc.stderr)
        if proc.returncode == 0:
            assert now == patched, leave
            outcomes.add("patched")
        else:
            said = proc.stderr.strip()
            assert "Traceback" not in said and said.count("\n") == 0, (leave, said)
            assert "No space left on device" in said and "nothing was changed" in said, said
            assert now == pristine, leave  # no record either: it is not in pristine
            outcomes.add("pristine")
        filler.unlink()
        again = trees.apply_patches(site, env=env)
        assert again.returncode == 0, (leave, again.stderr)
        assert snapshot(site) == patched, leave
        shutil.rmtree(site)
    # The levels reach both sides: a disk too full to stage, and room enough.
    assert outcomes == {"pristine", "patched"}, outcomes
