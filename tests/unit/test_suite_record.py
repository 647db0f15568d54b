"""tools/suite_record.py: a full run's record (length, load, the 30 slowest tests)
read from a log whose budget lines come from tests/support/budget.py itself, so
the reader follows the format the suite really prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import budget
from tests.unit.test_budget import record
from tools import suite_record

ROOT = Path(__file__).resolve().parents[2]
DURATIONS = """============================= slowest 30 durations =============================
500.46s call     tests/integration/test_image.py::test_the_image_builds[current]
160.75s setup    tests/patch/test_stream_census.py::test_patched_0_5_17_has_no_divergent_stream_in_any_mode
1.02s teardown tests/unit/test_x.py::test_y[a b]
=========================== short test summary info ============================
SKIPPED [1] tests/gpu/test_dispatch_cuda.py:21: needs a CUDA GPU
========= 2991 passed, 70 skipped, 1707 warnings in 2129.97s (0:35:29) =========
"""


def log(**over) -> str:
    lines = budget.summary(record(**over), {})
    return "\n".join(["noise before", *lines, DURATIONS])


def test_a_run_within_budget_gives_its_length_load_and_slowest_tests():
    got = suite_record.read(log())
    assert (got["total"], got["setup"], got["pytest"]) == (
        "35 min 00 s",
        "5 min 00 s",
        "30 min 00 s",
    )
    assert got["load"] == ("5.1", "8.0") and got["verdict"] == "within budget"
    assert got["budget"] == "45 min 00 s"
    assert got["counts"] == "2991 passed, 70 skipped, 1707 warnings"
    assert [s[1:] for s in got["slowest"]] == [
        ("call", "tests/integration/test_image.py::test_the_image_builds[current]"),
        (
            "setup",
            "tests/patch/test_stream_census.py::test_patched_0_5_17_has_no_divergent_stream_in_any_mode",
        ),
        ("teardown", "tests/unit/test_x.py::test_y[a b]"),
    ]
    text = suite_record.block(got, "abc1234")
    assert text.startswith("abc1234: total 35 min 00 s (setup 5 min 00 s, pytest 30 min 00 s)")
    assert "| 2 | 160.8 | setup |" in text and text.count("\n| ") == 5


@pytest.mark.parametrize(
    "total, says",
    [(3000.0, "OVER BUDGET by 5 min 00 s"), (5000.0, "PAST THE HARD CEILING OF 75 min 00 s")],
)
def test_an_over_budget_run_keeps_its_verdict(total, says):
    assert suite_record.read(log(total_s=total))["verdict"] == says


@pytest.mark.parametrize(
    "cut, why",
    [
        ("total ", "no budget report"),
        ("slowest 30 durations", "no 'slowest 30 durations' block"),
        (" passed, 70 skipped", "no pytest summary line"),
    ],
)
def test_a_cut_short_log_is_refused_in_one_line(tmp_path, cut, why):
    text = "\n".join(line for line in log().splitlines() if cut not in line)
    path = tmp_path / "ci.log"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "tools.suite_record", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and why in done.stderr, done.stderr
