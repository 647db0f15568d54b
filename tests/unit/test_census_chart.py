"""scripts/census-chart: the table docs/patch.md carries, and a real PNG."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.cli import ROOT

SCRIPT = ROOT / "scripts" / "census-chart"


def _call(phase, scenario, route):
    return {"phase": phase, "scenario": scenario, "route": route}


def test_table_and_png(tmp_path):
    calls = (
        [_call("draft", "patched", "cutlass-padded")] * 3
        + [_call("draft", "unpatched", "abort")] * 3
        + [_call("verify", s, "cutlass") for s in ("patched", "unpatched")]
        + [_call(p, "triton", "triton") for p in ("draft", "draft", "draft", "verify")]
    )
    report = tmp_path / "census.json"
    report.write_text(
        json.dumps({"versions": {"sglang": "0.5.17", "flashinfer-python": "x"}, "calls": calls})
    )
    png = tmp_path / "census.png"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(report), str(png)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| sm12x patch | DSpark draft | 0 | 3 | 0 | 0 | 0 |" in proc.stdout
    assert "| upstream 0.5.17 | DSpark draft | 0 | 0 | 0 | 3 | 0 |" in proc.stdout
    assert "| BACKEND=triton | target verify | 0 | 0 | 1 | 0 | 0 |" in proc.stdout
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_a_file_that_is_not_a_report_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(bad), str(tmp_path / "o.png")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "is not a self-test report" in proc.stderr and "Traceback" not in proc.stderr
