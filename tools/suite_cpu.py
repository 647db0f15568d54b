"""Where a full run's CPU seconds go, by kind of process.

    python3 -m tools.suite_cpu watch SAMPLES.jsonl [--interval 0.5]
    python3 -m tools.suite_cpu report PACCT SAMPLES.jsonl [--top 40] [--width 90]

The suite's budget report gives each module's wall time, but on this 2-core kind
a run is CPU-bound (the load median is above 4) and a module's wall time is mostly
the others' load. The kernel's process accounting (Debian's `acct`: `accton
FILE`) writes every process's CPU seconds when it ends, including the processes of
the Docker builds and containers, but only its 16-character name ("python3").
`watch` records each new process's command line while the run goes (from /proc,
twice a second); `report` joins the two by pid and start time and sums the CPU
seconds by command line, with the parts that differ per run (temporary folders,
pytest's folders, hashes, ports) made alike. A process too short for the sampler
to see keeps its accounting name, with a "?" before it.

Standard library only (the system Python runs it beside a run); the report reads
the accounting file through `dump-acct` (acct's own reader).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

# dump-acct's columns (acct 6.6, "v3" records): command, version, user time, system
# time, elapsed (all three in 1/100 s), uid, gid, memory, io, pid, ppid, flags,
# exit code, tty, start time (ctime format, local time).
START_FORMAT = "%a %b %d %H:%M:%S %Y"
SLACK_S = 2.0  # the start time has whole seconds; the sampler sees a process late


@dataclass(frozen=True)
class Record:
    name: str
    cpu_s: float
    elapsed_s: float
    pid: int
    started: float


@dataclass(frozen=True)
class Sample:
    pid: int
    seen: float
    cmd: str


def records(dump: str) -> list[Record]:
    """dump-acct's lines as records; a line of another shape is an error naming it."""
    out = []
    for number, line in enumerate(dump.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 15 or fields[1] != "v3":
            raise ValueError(f"dump-acct line {number} is not a v3 record: {line!r}")
        out.append(
            Record(
                name=fields[0],
                cpu_s=(float(fields[2]) + float(fields[3])) / 100,
                elapsed_s=float(fields[4]) / 100,
                pid=int(fields[9]),
                started=time.mktime(time.strptime(fields[14], START_FORMAT)),
            )
        )
    return out


def samples(lines: Iterable[str]) -> dict[int, list[Sample]]:
    by_pid: dict[int, list[Sample]] = defaultdict(list)
    for line in lines:
        if line.strip():
            raw = json.loads(line)
            by_pid[raw["pid"]].append(Sample(raw["pid"], raw["t"], raw["cmd"]))
    return by_pid


ALIKE = (
    (re.compile(r"\[pytest-xdist running\].*"), "[pytest-xdist worker]"),
    (re.compile(r"/tmp/\S*?/(?=[^/\s]+(?:\s|$))"), "/tmp/…/"),
    (re.compile(r"pytest-of-\w+/pytest-\d+/\S*"), "PYTEST/…"),
    (re.compile(r"\b[0-9a-f]{12,}\b"), "HASH"),
    (re.compile(r"\b\d{4,}\b"), "N"),
)


def kind(cmd: str, root: str, width: int) -> str:
    """A command line with what differs between runs made alike, cut to width."""
    cmd = cmd.replace(root.rstrip("/") + "/", "")
    for pattern, alike in ALIKE:
        cmd = pattern.sub(alike, cmd)
    return " ".join(cmd.split())[:width]


def census(
    recs: list[Record], seen: dict[int, list[Sample]], root: str, width: int
) -> dict[str, list[float]]:
    """CPU seconds and process count per kind of command line."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for rec in recs:
        window = (rec.started - SLACK_S, rec.started + rec.elapsed_s + SLACK_S)
        # Its last row in the window: what it ran after its exec (watch's docstring).
        rows = reversed(seen.get(rec.pid, []))
        match = next((s for s in rows if window[0] <= s.seen <= window[1]), None)
        label = kind(match.cmd, root, width) if match and match.cmd else f"?{rec.name}"
        totals[label][0] += rec.cpu_s
        totals[label][1] += 1
    return totals


def report(totals: dict[str, list[float]], top: int) -> str:
    cpu = sum(v[0] for v in totals.values())
    unseen = sum(v[0] for k, v in totals.items() if k.startswith("?"))
    procs = int(sum(v[1] for v in totals.values()))
    lines = [
        f"{cpu:.0f} CPU s in {procs} processes; {unseen:.0f} s in processes the sampler "
        "did not see (named by the accounting only)",
        "",
        "| CPU s | share | processes | command |",
        "| ---: | ---: | ---: | --- |",
    ]
    for label, (seconds, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]:
        share = 100 * seconds / cpu if cpu else 0.0
        text = label.replace("|", "\\|").replace("`", "'")
        lines.append(f"| {seconds:.1f} | {share:.1f}% | {int(count)} | `{text}` |")
    return "\n".join(lines)


def stop_flag() -> Callable[[], bool]:
    """A check that turns true once SIGTERM or SIGINT has come: the watchers
    here and in tools/suite_disk.py sample until the run they watch has ended."""
    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _: stopped.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _: stopped.append(signum))
    return lambda: bool(stopped)


RECHECK_S = 5.0  # how long a new process's command line is read again


def _cmdline(pid: str) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None  # ended between the listing and the read
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _row(pid: str, seen: float, cmd: str) -> str:
    return json.dumps({"pid": int(pid), "t": seen, "cmd": cmd}) + "\n"


def watch(out: Path, interval: float) -> int:
    """Append each new process's command line to out until SIGTERM or SIGINT.

    A process seen between its fork and its exec still shows its parent's
    command line (a loaded machine widens that window), so a new process's is
    read again for RECHECK_S, and a change is a row of its own: the census
    takes a process's last row (what it ran after its exec). An ending
    process's command line reads empty; that is not a change."""
    stopped = stop_flag()
    known: set[str] = set()
    recent: dict[str, tuple[float, str]] = {}  # pid -> (first seen, last command line)
    with out.open("a") as sink:
        while not stopped():
            now = time.time()
            alive = {p for p in os.listdir("/proc") if p.isdigit()}
            for pid in sorted(alive - known):
                cmd = _cmdline(pid)
                if cmd is None:
                    continue
                recent[pid] = (now, cmd)
                sink.write(_row(pid, now, cmd))
            for pid, (first, last) in list(recent.items()):
                if pid not in alive or now - first > RECHECK_S:
                    del recent[pid]
                elif pid in known and (cmd := _cmdline(pid)) and cmd != last:
                    # (An empty one is the process ending: a zombie's, or one
                    # read mid-exit; its command is still the last row's.)
                    recent[pid] = (first, cmd)
                    sink.write(_row(pid, now, cmd))
            sink.flush()
            known = alive  # a pid the kernel hands out again is new again
            time.sleep(interval)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m tools.suite_cpu", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="what", required=True)
    w = sub.add_parser("watch", help="record each new process's command line")
    w.add_argument("samples", type=Path)
    w.add_argument("--interval", type=float, default=0.5)
    r = sub.add_parser("report", help="CPU seconds by kind of command line")
    r.add_argument("pacct", type=Path)
    r.add_argument("samples", type=Path)
    r.add_argument("--top", type=int, default=40)
    r.add_argument("--width", type=int, default=90)
    r.add_argument("--root", default=str(Path.cwd()), help="the checkout the run ran in")
    args = parser.parse_args(argv)
    if args.what == "watch":
        return watch(args.samples, args.interval)
    if not args.pacct.is_file():
        print(f"suite_cpu: {args.pacct}: no such file (`accton FILE` writes it)", file=sys.stderr)
        return 1
    try:
        dump = subprocess.run(
            ["dump-acct", str(args.pacct)], capture_output=True, text=True, timeout=600, check=True
        ).stdout
        recs = records(dump)
        if not recs:
            raise ValueError(f"{args.pacct}: no accounting records in it")
        seen = samples(args.samples.read_text().splitlines())
    except FileNotFoundError as exc:
        print(
            f"suite_cpu: {exc.filename or exc}: not found (dump-acct is Debian's `acct`)",
            file=sys.stderr,
        )
        return 1
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        print(f"suite_cpu: {exc}", file=sys.stderr)
        return 1
    print(report(census(recs, seen, args.root, args.width), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
