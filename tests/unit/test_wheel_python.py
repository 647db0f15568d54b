"""sm12x.mock.wheel_python: sglang's profiler and benchmark client from the
release's wheel, for a Python without sglang (tune and bench against the mock;
tests/integration/test_tune.py and test_bench_process.py run them end to end)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sm12x.mock import wheel_python
from sm12x.patches.series import series
from sm12x.versions import load_versions, tracks
from tests.support.cli import ROOT

pytestmark = pytest.mark.process


def run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sm12x.mock.wheel_python", *argv],
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
            hit = [p for p in wheel_python.PROFILER_FILES if path == p or path.startswith(p)]
            assert not hit, f"{entry['file']} changes {path}: tune's wheel profiler must be patched"


def test_a_release_whose_wheel_is_not_here_is_one_line_naming_the_fetch(tmp_path):
    done = run("9.9.9", "-c", "pass", SM12X_OFFLINE="1", SM12X_CACHE=str(tmp_path))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("sm12x.mock.wheel_python: error: "), line
    assert "sm12x mock-server --fetch --sglang-version 9.9.9" in line and "--python" in line


def test_a_bad_invocation_says_how_to_call_it():
    done = run("0.5.17", "--", "x")
    assert done.returncode == 2 and done.stderr.startswith("usage: "), done.stderr


def test_patched_without_a_module_or_code_says_how_to_call_it():
    done = run("0.5.17", "--patched", "--", "x")
    assert done.returncode == 2 and done.stderr.startswith("usage: "), done.stderr


# What sglang's benchmark client imports from the tree, from this Python (no sglang).
CLOSURE = """
import importlib, json, sys
from sm12x.mock.wheel_python import CLIENT, prepare
prepare(CLIENT)
importlib.import_module(CLIENT)
print(json.dumps(sorted(
    m.__file__ for n, m in list(sys.modules.items())
    if (n == "sglang" or n.startswith("sglang.")) and getattr(m, "__file__", None)
)))
"""


@pytest.mark.wheels
@pytest.mark.parametrize("track", tracks())
def test_bench_s_client_runs_from_the_patched_tree_the_image_runs(track):
    """bench's client (`--patched`) imports every sglang module from the tree
    scripts/apply-patches made, and on the pinned track that tree differs where the
    client reads it: the docstring's reason for --patched."""
    version = load_versions(track)["SGLANG_VERSION"]
    done = run(version, "--patched", "-c", CLOSURE)
    assert done.returncode == 0, done.stderr[-3000:]
    files = json.loads(done.stdout.strip().splitlines()[-1])
    site = f"{os.sep}{version}-patched-"
    assert files and all(site in f for f in files), [f for f in files if site not in f][:5]
    imported = {f.split(site, 1)[1].split(os.sep, 1)[1] for f in files}
    folder = ROOT / "patches" / "sglang" / version
    patched = set().union(*(touched(folder / e["file"]) for e in series(version)))
    if track == "pinned":
        assert imported & patched == {
            "sglang/srt/entrypoints/openai/protocol.py",
            "sglang/srt/function_call/deepseekv32_detector.py",
        }
