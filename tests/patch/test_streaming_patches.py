"""Each streaming patch removes its own symptom, on sglang's real code: 0002-0008 on
0.5.17 (the pinned track), 0023 on 0.5.23 (the current track).

For every patch: a tree patched up to the patch before it fails the patch's
check (tests/support/stream_checks.py), and a tree patched up to it passes.
The trees are real wheels patched by scripts/apply-patches with the series cut
after each patch, so each patch is proven on its own, in the order the image
applies them. 0.5.23 runs with its own pins (wheels.pythonpath).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from sm12x.mock import wheels
from tests.support import stream_checks, trees

VERSIONS = ["0.5.17", "0.5.23"]
SERIES = {
    v: sorted(p["file"] for p in wheels.patch_series()["patch"] if v in p["sglang"])
    for v in VERSIONS
}
STREAMING = {
    v: [f for f in SERIES[v] if f.removesuffix(".patch") in stream_checks.CHECKS] for v in VERSIONS
}
CASES = [(v, f) for v in VERSIONS for f in STREAMING[v]]


def _checks(version, tmp_path_factory):
    """{last patch applied: {check: (passed, detail)}} for every prefix of `version`'s
    series from the patch before its first streaming one, checked in one process
    (each tree's sglang modules replace the last's)."""
    folder = tmp_path_factory.mktemp(f"{version}-upto")
    try:
        return _check_prefixes(version, folder)
    finally:
        # The prefixes' trees (80 to 145 MB each, ten in all) serve only this
        # check; a module's folders would otherwise stay on the disk until the
        # session ends.
        shutil.rmtree(folder, ignore_errors=True)


def _check_prefixes(version, folder):
    series, streaming = SERIES[version], STREAMING[version]
    sites = {}
    for last in [series[series.index(streaming[0]) - 1], *streaming]:
        base = folder / last[:4]
        site = trees.unpack_sglang(version, base / "site")
        patches = trees.series_upto(version, last, base / "patches")
        applied = trees.apply_patches(site, "--patches", str(patches))
        assert applied.returncode == 0, applied.stderr
        sites[last] = site
    args = ["-m", "tests.support.stream_checks"]
    for site in sites.values():
        args += ["--site", str(site)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(wheels.pythonpath(version))}
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=trees.REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return {last: found[str(site)] for last, site in sites.items()}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return {version: _checks(version, tmp_path_factory) for version in VERSIONS}


def test_every_streaming_patch_has_a_check():
    assert sorted(f.removesuffix(".patch") for v in VERSIONS for f in STREAMING[v]) == sorted(
        stream_checks.CHECKS
    )
    assert STREAMING["0.5.23"] == ["0023-dsv4-recipe-block-newlines.patch"]


@pytest.mark.parametrize("version,patch", CASES, ids=[f"{v}:{f[:4]}" for v, f in CASES])
def test_patch_fixes_its_symptom(results, version, patch):
    series = SERIES[version]
    before = results[version][series[series.index(patch) - 1]][patch.removesuffix(".patch")]
    after = results[version][patch][patch.removesuffix(".patch")]
    assert not before[0], f"{patch}: the check passes without the patch: {before[1]}"
    assert after[0], f"{patch}: the check fails with the patch: {after[1]}"


def test_the_whole_series_passes_every_check(results):
    failed = {
        name: detail
        for name, (ok, detail) in results["0.5.17"][STREAMING["0.5.17"][-1]].items()
        if not ok
    }
    assert not failed


def test_on_0_5_23_the_retired_patches_checks_pass_unpatched(results):
    """The evidence for retiring 0002 and 0004-0008 on 0.5.23, check by check, on
    the tree without 0023 (0.5.23 as released, but for 0022's CUDA guard). Two
    checks cannot pass there, and say why: 0003 forces a failure inside the DSML
    detector, which 0.5.23's DeepSeek-V4 path no longer calls (deepseek-recipe
    parses it), so the check finds nothing forced; 0007 wants text after the
    tool-call block as content, and deepseek-recipe drops it, outside V4's format
    (docs/tracks.md)."""
    unpatched = results["0.5.23"][SERIES["0.5.23"][0]]
    assert {name for name, (ok, _) in unpatched.items() if ok} >= {
        "0002-dsml-stream-partial-json-value",
        "0004-dsml-stream-preamble",
        "0005-tool-stream-end-releases-held-text",
        "0006-dsml-stream-block-whitespace",
        "0008-dsml-string-values-verbatim",
    }
    assert unpatched["0003-dsml-stream-failure-keeps-markup-out"][1].startswith("forced=False")
    assert not unpatched["0007-dsml-text-after-block"][0]
    patched = results["0.5.23"][STREAMING["0.5.23"][-1]]
    assert {name for name, (ok, _) in patched.items() if not ok} == {
        "0003-dsml-stream-failure-keeps-markup-out",
        "0007-dsml-text-after-block",
    }
