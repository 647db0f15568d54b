"""tools/suite_cpu.py: a run's CPU seconds by kind of process."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import suite_cpu

REPO = Path(__file__).resolve().parents[2]


def acct_line(name: str, user: float, system: float, elapsed: float, pid: int, start: str) -> str:
    """One line as dump-acct (acct 6.6) prints a v3 record: times in 1/100 s."""
    return (
        f"{name:<16}|v3|{user * 100:9.2f}|{system * 100:9.2f}|{elapsed * 100:9.2f}|     0|     0|"
        f"  4488.00|     0.00|{pid:8d}|       1|     |       0|__      |{start}"
    )


START = "Sun Dec  6 16:50:44 2026"
T0 = time.mktime(time.strptime(START, suite_cpu.START_FORMAT))


def test_dump_acct_lines_become_records_with_cpu_seconds():
    recs = suite_cpu.records(
        acct_line("python3", 1.25, 0.5, 10, 4242, START)
        + "\n\n"
        + acct_line("bash", 0, 0, 0, 7, START)
    )
    assert [(r.name, r.cpu_s, r.elapsed_s, r.pid, r.started) for r in recs] == [
        ("python3", 1.75, 10.0, 4242, T0),
        ("bash", 0.0, 0.0, 7, T0),
    ]


def test_a_line_of_another_shape_is_an_error_naming_it():
    with pytest.raises(ValueError, match="line 1 is not a v3 record"):
        suite_cpu.records("python3|v2|0|0|0")


def test_runs_differences_are_made_alike():
    cmd = (
        "/srv/run/.cache/venv/bin/python -m sm12x.mock --port 43117 "
        "--tree /tmp/pytest-of-root/pytest-3/popen-gw1/test_x0/site "
        "--json /tmp/tmpab12/out.json --key 0123456789abcdef0123"
    )
    assert suite_cpu.kind(cmd, "/srv/run", 200) == (
        ".cache/venv/bin/python -m sm12x.mock --port N --tree /tmp/…/site"
        " --json /tmp/…/out.json --key HASH"
    )
    assert (
        suite_cpu.kind("[pytest-xdist running] tests/a.py::b", "/r", 90) == "[pytest-xdist worker]"
    )
    assert len(suite_cpu.kind("x" * 500, "/r", 90)) == 90


def test_a_process_is_named_by_the_sample_in_its_lifetime_only():
    recs = [
        suite_cpu.Record("python3", 4.0, 20.0, 100, T0),
        suite_cpu.Record("python3", 2.0, 5.0, 100, T0 + 600),  # the pid handed out again
        suite_cpu.Record("python3", 1.0, 5.0, 100, T0 + 900),
        suite_cpu.Record("nvdisasm", 3.0, 1.0, 200, T0),
    ]
    seen = suite_cpu.samples(
        [
            json.dumps({"pid": 100, "t": T0 + 0.6, "cmd": "/r/.cache/venv/bin/python probe.py"}),
            json.dumps({"pid": 100, "t": T0 + 601, "cmd": "/r/.cache/venv/bin/python probe.py"}),
            json.dumps({"pid": 200, "t": T0 + 30, "cmd": "nvdisasm late"}),  # after it ended
        ]
    )
    totals = suite_cpu.census(recs, seen, "/r", 90)
    assert dict(totals) == {
        ".cache/venv/bin/python probe.py": [6.0, 2],
        "?python3": [1.0, 1],
        "?nvdisasm": [3.0, 1],
    }
    table = suite_cpu.report(totals, top=2).splitlines()
    assert (
        table[0]
        == "10 CPU s in 4 processes; 4 s in processes the sampler did not see (named by the accounting only)"
    )
    assert table[4:] == [
        "| 6.0 | 60.0% | 2 | `.cache/venv/bin/python probe.py` |",
        "| 3.0 | 30.0% | 1 | `?nvdisasm` |",
    ]


@contextlib.contextmanager
def watching(out: Path):
    """The real watcher writing to `out` (its first pass done) for the block's
    length; then SIGTERM, which it must end on with 0."""
    watcher = subprocess.Popen(
        [sys.executable, "-m", "tools.suite_cpu", "watch", str(out), "--interval", "0.1"], cwd=REPO
    )
    try:
        time.sleep(1.0)
        yield
    finally:
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(timeout=30) == 0


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_watch_records_a_new_process_s_command_line_and_stops_on_sigterm(tmp_path):
    out = tmp_path / "samples.jsonl"
    with watching(out):
        marker = subprocess.Popen(["sleep", "2.718"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.exists() and f'"pid": {marker.pid}' in out.read_text():
                break
            time.sleep(0.1)
        marker.wait(timeout=30)
    rows = rows_of(out)
    # Its last row: seen before its exec, its first showed this test's process
    # (stop 59's CI, a loaded machine).
    assert {"pid": marker.pid, "cmd": "sleep 2.718"}.items() <= (
        [r for r in rows if r["pid"] == marker.pid][-1].items()
    )


def test_a_process_seen_before_its_exec_gets_a_row_for_what_it_then_runs(tmp_path):
    """A process that shows one command line and then execs another (as every
    fork does, in a window a loaded machine widens): both rows, in that order,
    and the census names it by the second."""
    out = tmp_path / "samples.jsonl"
    with watching(out):
        before = "import os, time; time.sleep(1.5); os.execvp('sleep', ['sleep', '1.234'])"
        late = subprocess.Popen([sys.executable, "-c", before])
        late.wait(timeout=60)
    rows = rows_of(out)
    cmds = [r["cmd"] for r in rows if r["pid"] == late.pid]
    # (A first row may be this test's own command line: the watcher can see the
    # child before its first exec, into python, too.)
    assert cmds[-2:] == [f"{sys.executable} -c {before}", "sleep 1.234"], cmds
    seen = suite_cpu.samples(out.read_text().splitlines())
    start = min(r["t"] for r in rows if r["pid"] == late.pid)
    rec = suite_cpu.Record("sleep", 0.5, 3.0, late.pid, start)
    assert dict(suite_cpu.census([rec], seen, "/r", 90)) == {"sleep 1.234": [0.5, 1]}


def test_a_process_that_ended_unreaped_keeps_its_command_line(tmp_path):
    """A zombie's /proc cmdline reads empty (a process mid-exit's too): the watcher
    must not take that for a new command line (stop 60: the census named such a
    process by ''), however long its parent takes to reap it."""
    out = tmp_path / "samples.jsonl"
    with watching(out):
        ended = subprocess.Popen(["sleep", "0.3"])
        time.sleep(2.0)  # ended, not reaped: a zombie while the watcher reads it again
        assert ended.wait(timeout=30) == 0
        time.sleep(0.5)
    cmds = [r["cmd"] for r in rows_of(out) if r["pid"] == ended.pid]
    assert cmds and cmds[-1] == "sleep 0.3", cmds


@pytest.mark.parametrize("pacct", ["missing", "empty"])
def test_report_on_no_accounting_records_is_one_line_and_exit_1(tmp_path, pacct):
    """Missing, or empty (whether or not acct's dump-acct is installed here)."""
    (tmp_path / "samples.jsonl").write_text("")
    if pacct == "empty":
        (tmp_path / pacct).write_bytes(b"")
    proc = subprocess.run(
        [sys.executable, "-m", "tools.suite_cpu", "report", str(tmp_path / pacct), str(tmp_path / "samples.jsonl")],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("suite_cpu: ") and proc.stderr.count("\n") == 1
