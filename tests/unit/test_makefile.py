"""`make fast` in a fresh clone builds its environment first (issue 29: it failed
with `.cache/venv/bin/python: not found`). The real make, dry run (-n), on a copy
of the Makefile in a folder with or without .cache/venv."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = "scripts/test --co"


def planned(folder: Path, *args: str) -> list[str]:
    make = shutil.which("make")
    if make is None:
        pytest.fail("no make on PATH: scripts/test installs it (the Debian package make)")
    shutil.copy(ROOT / "Makefile", folder / "Makefile")
    # Not the make this may run under (`make fast`): its MAKEFLAGS would leak in.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(
        [make, "--no-print-directory", "-n", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("target", ["fast", "lint", "types", "regen"])
def test_a_fresh_clone_builds_the_environment_first(target, tmp_path):
    steps = planned(tmp_path, target)
    # The build is one recipe of several lines (its time and budget after it,
    # tests/unit/test_make_env.py), then the target's own command.
    build = next(k for k, s in enumerate(steps) if BOOTSTRAP in s)
    assert "SM12X_NO_DOCKER=1" in steps[build], steps
    assert ".cache/venv/bin/" in " ".join(steps[build + 1 :]), steps


def test_a_built_environment_is_used_as_it_is(tmp_path):
    venv = tmp_path / ".cache" / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    steps = planned(tmp_path, "fast")
    assert not any(BOOTSTRAP in s for s in steps), steps
    assert "-m pytest -m fast" in steps[0], steps


def test_a_python_of_your_own_is_not_replaced(tmp_path):
    steps = planned(tmp_path, "fast", "PY=/usr/bin/python3")
    assert not any(BOOTSTRAP in s for s in steps), steps
    assert steps[0].startswith("SM12X_TIER=fast") and "/usr/bin/python3 -m pytest" in steps[0]
