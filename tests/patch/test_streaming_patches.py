"""Each streaming patch (0002-0008) removes its own symptom, on sglang 0.5.17's real code.

For every patch: a tree patched up to the patch before it fails the patch's
check (tests/support/stream_checks.py), and a tree patched up to it passes.
The trees are real 0.5.17 wheels patched by scripts/apply-patches with the
series cut after each patch, so each patch is proven on its own, in the order
the image applies them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import stream_checks, trees, wheels

VERSION = "0.5.17"
SERIES = sorted(p["file"] for p in wheels.patch_series()["patch"] if VERSION in p["sglang"])
STREAMING = [f for f in SERIES if f.removesuffix(".patch") in stream_checks.CHECKS]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{last patch applied: {check: (passed, detail)}} for every prefix of the series,
    checked in one process (each tree's sglang modules replace the last's)."""
    sites = {}
    for last in [SERIES[SERIES.index(STREAMING[0]) - 1], *STREAMING]:
        base = tmp_path_factory.mktemp(f"upto-{last[:4]}")
        site = trees.unpack_sglang(VERSION, base / "site")
        patches = trees.series_upto(VERSION, last, base / "patches")
        applied = trees.apply_patches(site, "--patches", str(patches))
        assert applied.returncode == 0, applied.stderr
        sites[last] = site
    args = ["-m", "tests.support.stream_checks"]
    for site in sites.values():
        args += ["--site", str(site)]
    proc = subprocess.run([sys.executable, *args], cwd=trees.REPO, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return {last: found[str(site)] for last, site in sites.items()}


def test_every_streaming_patch_has_a_check():
    assert [f.removesuffix(".patch") for f in STREAMING] == list(stream_checks.CHECKS)


@pytest.mark.parametrize("patch", STREAMING)
def test_patch_fixes_its_symptom(results, patch):
    before = results[SERIES[SERIES.index(patch) - 1]][patch.removesuffix(".patch")]
    after = results[patch][patch.removesuffix(".patch")]
    assert not before[0], f"{patch}: the check passes without the patch: {before[1]}"
    assert after[0], f"{patch}: the check fails with the patch: {after[1]}"


def test_the_whole_series_passes_every_check(results):
    failed = {name: detail for name, (ok, detail) in results[STREAMING[-1]].items() if not ok}
    assert not failed
