import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from verify import report  # noqa: E402
from verify.result import CheckResult, Verdict  # noqa: E402

RESULTS = [
    CheckResult("health", "h", Verdict.PASS, evidence=["GET /health -> HTTP 200"]),
    CheckResult(
        "tools",
        "t",
        Verdict.FAIL,
        problem="no tool_calls in the response",
        cause="is `--tool-call-parser deepseekv4` set?",
        fix="launch with it",
        evidence=["weather: ..."],
    ),
    CheckResult("spec", "s", Verdict.NOT_RUN, problem="no backend figures"),
    CheckResult("soak", "k", Verdict.SKIP, required=False, problem="skipped by --skip"),
]


def test_exit_rule():
    assert not report.passed(RESULTS)
    assert report.passed([RESULTS[0], RESULTS[3]])
    # not-run counts as not passed for a required check
    assert not report.passed([RESULTS[0], RESULTS[2]])


def test_json_and_junit(tmp_path):
    report.write_json(tmp_path / "r.json", RESULTS, {"base_url": "x"})
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["passed"] is False
    assert data["summary"] == {"pass": 1, "fail": 1, "skip": 1, "not-run": 1}
    tools = data["checks"][1]
    assert tools["verdict"] == "fail" and "deepseekv4" in tools["cause"]
    report.write_junit(tmp_path / "j.xml", RESULTS, {"base_url": "x"})
    suite = ET.parse(tmp_path / "j.xml").getroot()
    assert suite.get("tests") == "4" and suite.get("failures") == "1"
    assert suite.get("errors") == "1" and suite.get("skipped") == "1"
    failure = suite.find("testcase[@name='tools']/failure")
    assert "deepseekv4" in failure.text


def test_table_shows_cause_and_fix():
    console = Console(record=True, width=160)
    report.table(RESULTS, console)
    text = console.export_text()
    assert "cause:" in text and "--tool-call-parser deepseekv4" in text and "FAIL" in text
