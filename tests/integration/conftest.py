import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sm12x.mock.server import MockServer  # noqa: E402
from verify.cli import main  # noqa: E402

SMALL_SOAK = ["--soak-concurrency", "16", "--soak-rounds", "2"]


@pytest.fixture
def fake():
    servers = []

    def start(faults=None, **kw):
        server = MockServer(faults, **kw).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def verify(tmp_path):
    """Run verify's CLI; returns (exit code, the JSON report or None, output)."""

    def run(*args: str):
        report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
        code = main([*args, "--json", str(report), "--junit", str(junit)])
        data = json.loads(report.read_text()) if report.exists() else None
        if report.exists():
            report.unlink()
        return code, data

    return run


def verdicts(report: dict) -> dict[str, str]:
    """Each check's verdict; checks that run only when asked for (--compare-url,
    --accuracy) and were not are left out."""
    return {
        c["name"]: c["verdict"]
        for c in report["checks"]
        if not (c["verdict"] == "skip" and (c["problem"] or "").startswith("not asked for"))
    }


def check(report: dict, name: str) -> dict:
    return next(c for c in report["checks"] if c["name"] == name)
