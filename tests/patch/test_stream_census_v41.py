"""The DSPARK streaming census for DeepSeek-V4.1-Flash's output, sampled, on the
current track's sglang (0.5.23, the first that serves V4.1) unpatched and with its
series.

What runs is 0.5.23's V4.1 path: the stand-in's model config says model_type
deepseek_v41 and the parsers are deepseek-v41 / deepseekv41, so sglang chooses
the `dsv41` encoding (DeepSeek's V4.1 encoder and output parser, deepseek-recipe at
the track's pin); the outputs are rendered by that same encoder (`<｜DSML｜ calls>`
blocks), tokenized with the V4.1 tokenizer derived from V4's
(tests/support/tokenizer_v41.py). The corpus is the outputs in V4.1's own format
(stream_census.line_cases).
"""

from __future__ import annotations

import json

import pytest

from sm12x.mock import serving as sglang_serving
from tests.support import stream_census, trees

CONFIGS = {"0.5.23": ("0.5.23", False), "0.5.23+patches": ("0.5.23", True)}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = {}
    for name, (version, patched) in CONFIGS.items():
        site = sglang_serving.tree(version, patched)
        report = tmp_path_factory.mktemp("census-v41") / "report.json"
        proc = trees.run_python(
            [site],
            [
                "-m",
                "tests.support.stream_census",
                "--site",
                str(site),
                "--json",
                str(report),
                "--samples",
                "1",
                "--split-stride",
                "7",
                "--line",
                "v4.1-flash",
            ],
            timeout=900,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = json.loads(report.read_text())
    return out


def test_the_census_runs_sglang_s_v41_path(reports):
    for report in reports.values():
        assert (report["sglang"], report["line"], report["encoding"]) == (
            "0.5.23",
            "v4.1-flash",
            "dsv41",
        )
        names = {o["case"] for o in report["oracle"]}
        assert len(names) == len(stream_census.line_cases("v4.1-flash")) > 30
        assert all(o["in_format"] for o in report["oracle"])
        assert set(stream_census.table(report)) == set(stream_census.MODES)


def test_patched_0_5_23_has_no_divergence_in_v41_output(reports):
    """With the current track's series: no V4.1 output differs from what was written,
    streamed in any DSPARK chunking or not."""
    report = reports["0.5.23+patches"]
    bad = [r for r in report["streams"] if r["failures"]]
    assert not bad, bad[:3]
    assert not [o for o in report["oracle"] if o["failures"]]
    assert not [r for r in report["streams"] if r["stream_only"]]


def test_unpatched_0_5_23_keeps_the_newline_after_angle_in_v41_output_too(reports):
    """The one divergence of V4's format is in V4.1's as well (the same deepseek-recipe
    output parser): prose ending in "<" before a call keeps one newline, streamed and
    not; patch 0023 removes it (above). Nothing differs between streamed and not."""
    report = reports["0.5.23"]
    failing = {r["case"] for r in report["streams"] if r["failures"]}
    assert failing == {"chat/trailing-angle+weather", "think/trailing-angle+weather"}
    assert {f for r in report["streams"] for f in r["failures"]} == {"separator-in-content"}
    assert {o["case"] for o in report["oracle"] if o["failures"]} == failing
    assert not [r for r in report["streams"] if r["stream_only"]]
