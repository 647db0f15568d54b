"""sm12x.mock.profiler_python: sglang's profiler from the release's wheel, for a
Python without sglang (tune against the mock; tests/integration/test_tune.py
runs it end to end)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sm12x.mock import profiler_python
from sm12x.patches.series import series
from tests.support.cli import ROOT

pytestmark = pytest.mark.process


def run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sm12x.mock.profiler_python", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        cwd=ROOT,
    )


def touched(patch_file) -> set[str]:
    """The files a diff changes, relative to site-packages (its b/ side)."""
    return {
        line[len("+++ b/") :].split("\t")[0].strip()
        for line in patch_file.read_text().splitlines()
        if line.startswith("+++ b/")
    }


VERSIONS = sorted(p.name for p in (ROOT / "patches" / "sglang").iterdir() if p.is_dir())


@pytest.mark.parametrize("version", VERSIONS)
def test_no_patch_touches_what_the_profiler_imports(version):
    """The pristine tree runs what the image's patched sglang runs, for the profiler."""
    folder = ROOT / "patches" / "sglang" / version
    for entry in series(version):
        for path in touched(folder / entry["file"]):
            hit = [p for p in profiler_python.PROFILER_FILES if path == p or path.startswith(p)]
            assert not hit, f"{entry['file']} changes {path}: tune's wheel profiler must be patched"


def test_a_release_whose_wheel_is_not_here_is_one_line_naming_the_fetch(tmp_path):
    done = run("9.9.9", "-c", "pass", SM12X_OFFLINE="1", SM12X_CACHE=str(tmp_path))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("sm12x.mock.profiler_python: error: "), line
    assert "sm12x mock-server --fetch --sglang-version 9.9.9" in line and "--python" in line


def test_a_bad_invocation_says_how_to_call_it():
    done = run("0.5.17", "--", "x")
    assert done.returncode == 2 and done.stderr.startswith("usage: "), done.stderr
