"""Where the pytest workers' own CPU goes, by function and by test.

    python3 -m tools.worker_spy watch ROOT FOLDER [--rate 20] [--py-spy PATH]
    python3 -m tools.suite_cpu ...            (beside it: the other processes)
    python3 -m tools.worker_spy report FOLDER [--top 30]

tools/suite_cpu.py names the processes a run's CPU goes to; the largest is the
four pytest-xdist workers themselves (the in-process tests: 16 % of a cold run).
`watch` attaches py-spy (`pip install py-spy`; not a test dependency) to each
worker of the run whose working folder is ROOT as it appears, sampling at
--rate per second without stopping it, and writes py-spy's raw (collapsed)
stacks to FOLDER/w<pid>.txt when the worker ends; it returns once every worker
it attached to has ended. `report` sums the samples: by the test the stack is
in (the first frame of a test_*.py or conftest.py), by function (self), and by
function including callees, without pytest's and xdist's own frames.

py-spy counts a sample whenever a worker's thread is not idle, which on a loaded
2-core machine includes waiting for a core: a worker's samples are about twice
its CPU seconds there (stop 55: 1,383 sampled seconds, 590 accounted). Compare
shares, not seconds, with the accounting.

Standard library only, like suite_cpu: the system Python runs it beside a run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# xdist's workers are execnet's `python -c` bootstrap (the same in xdist 3.x).
WORKER_CMD = "import sys;exec(eval(sys.stdin.readline()))"
FRAMEWORK = ("pluggy/", "_pytest/", "execnet/", "xdist/", "<module> (<string>")
POLL_S = 1.0


def workers(root: Path) -> list[int]:
    """The pids of pytest-xdist workers working in root."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:  # gone, or not ours to read
            continue
        if WORKER_CMD.encode() in argv and Path(cwd) == root:
            found.append(int(entry.name))
    return sorted(found)


def watch(root: Path, folder: Path, rate: int, py_spy: str, wait_s: float) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    spies: dict[int, subprocess.Popen] = {}
    deadline = time.monotonic() + wait_s
    while True:
        for pid in workers(root):
            if pid not in spies:
                out = folder / f"w{pid}.txt"
                log = open(folder / f"w{pid}.log", "wb")  # noqa: SIM115 - the spy's own
                with log:
                    spies[pid] = subprocess.Popen(
                        [py_spy, "record", "--nonblocking", "--rate", str(rate),
                         "--format", "raw", "-o", str(out), "-p", str(pid)],
                        stdout=log, stderr=subprocess.STDOUT,
                    )  # fmt: skip
                print(f"worker_spy: sampling worker {pid} into {out}", flush=True)
        if spies and all(spy.poll() is not None for spy in spies.values()):
            print(f"worker_spy: all {len(spies)} workers ended", flush=True)
            return 0
        if not spies and time.monotonic() > deadline:
            print(f"worker_spy: no pytest-xdist worker in {root} within {wait_s:.0f} s",
                  file=sys.stderr)  # fmt: skip
            return 1
        time.sleep(POLL_S)


@dataclass
class Profile:
    samples: int = 0
    by_test: Counter = field(default_factory=Counter)
    own: Counter = field(default_factory=Counter)
    including: Counter = field(default_factory=Counter)


def _test_of(frames: list[str]) -> str:
    for frame in frames:
        where = frame.rpartition("(")[2]
        if where.startswith(("test_", "conftest.py")):
            return frame
    return "(outside any test: collection, reporting, other threads)"


def read(lines: Iterable[str], into: Profile | None = None) -> Profile:
    """py-spy's raw lines ("frame;frame;... COUNT") summed; other lines (py-spy
    writes a frame's text as it is, newlines included) are skipped."""
    out = into or Profile()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        out.samples += n
        out.by_test[_test_of(frames)] += n
        out.own[frames[-1]] += n
        for frame in set(frames):
            if not any(part in frame for part in FRAMEWORK):
                out.including[frame] += n
    return out


def report(folder: Path, top: int, rate: int) -> str:
    files = sorted(folder.glob("w*.txt"))
    if not files:
        raise SystemExit(f"worker_spy: no w*.txt in {folder}: run `watch` during a run first")
    profile = Profile()
    for path in files:
        with path.open(encoding="utf-8", errors="replace") as f:
            read(f, profile)
    seconds = profile.samples / rate
    parts = [f"{seconds:,.1f} sampled s ({profile.samples} samples at {rate}/s) "
             f"in {len(files)} workers"]  # fmt: skip
    for title, counts in (
        ("by test", profile.by_test),
        ("by function (own)", profile.own),
        ("by function, with its callees", profile.including),
    ):
        parts += ["", f"| sampled s | share | {title} |", "| ---: | ---: | --- |"]
        for name, n in counts.most_common(top):
            parts.append(f"| {n / rate:.1f} | {n / profile.samples:.1%} | `{name[:120]}` |")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.worker_spy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("watch", help="sample each worker of the run in ROOT")
    w.add_argument("root", type=Path)
    w.add_argument("folder", type=Path)
    w.add_argument("--rate", type=int, default=20)
    w.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    w.add_argument("--wait", type=float, default=3600.0, help="seconds to wait for a worker")
    r = sub.add_parser("report", help="sum the samples of a watched run")
    r.add_argument("folder", type=Path)
    r.add_argument("--top", type=int, default=30)
    r.add_argument("--rate", type=int, default=20, help="the rate `watch` sampled at")
    args = parser.parse_args(argv)
    if args.command == "watch":
        if shutil.which(args.py_spy) is None:
            parser.error(f"no py-spy at {args.py_spy!r}: `pip install py-spy`, or give --py-spy")
        return watch(args.root.resolve(), args.folder, args.rate, args.py_spy, args.wait)
    print(report(args.folder, args.top, args.rate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
