"""A full run's record for docs/benchmarks.md, read from what scripts/test printed.

    python -m tools.suite_record LOG [--label TEXT]

LOG is the output of `.ci/run` (or scripts/test): its budget report (the total,
setup, pytest, the load average) and pytest's own lines (the counts, the 30
slowest durations). The block it prints is what issue 44 asks to keep for a
run: its length, its load and its 30 slowest tests, taken from the log rather
than copied by hand. A log without the budget report or the durations (a run
cut short) is refused: it is not a record of a full run.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# tests/support/budget.py's head line, and the verdict it prints with it (within:
# one line; over or past the ceiling: a banner whose lines start with "!!! ").
BUDGET = re.compile(
    r"total (?P<total>[\dminus ]+?) of a (?P<budget>[\dminus ]+?) budget for .*?"
    r"\(setup (?P<setup>[\dminus ]+?), pytest (?P<pytest>[\dminus ]+?); "
    r"load average (?P<median>[\d.]+) median, (?P<max>[\d.]+) max"
)
VERDICT = re.compile(
    r"^(?:!!! )?(?P<verdict>within budget|OVER BUDGET by [^(]+|PAST THE HARD CEILING OF [^:]+)"
)
COUNTS = re.compile(r"^=+ (?P<counts>\d+ (?:passed|failed).*?) in [\d.]+s .*=+$")
DURATION = re.compile(r"^(?P<s>\d+\.\d+)s (?P<phase>call|setup|teardown) +(?P<id>\S.*)$")
WORKERS = re.compile(r"^workers busy: (?P<workers>.*)$")


class NotARecord(ValueError):
    pass


def read(text: str) -> dict:
    lines = text.splitlines()
    budget = next((m for m in map(BUDGET.search, lines) if m), None)
    if budget is None:
        raise NotARecord("no budget report (tests/support/budget.py's 'total ... of a ...' line)")
    verdict = next((m["verdict"].strip() for m in map(VERDICT.match, lines) if m), "")
    counts = next((m["counts"] for m in map(COUNTS.match, lines) if m), None)
    if counts is None:
        raise NotARecord("no pytest summary line ('N passed ... in S s')")
    try:
        start = next(i for i, line in enumerate(lines) if "slowest 30 durations" in line)
    except StopIteration:
        raise NotARecord("no 'slowest 30 durations' block (pytest --durations=30)") from None
    slowest = []
    for line in lines[start + 1 :]:
        m = DURATION.match(line.strip())
        if not m:
            if slowest:
                break
            continue
        slowest.append((float(m["s"]), m["phase"], m["id"]))
    if not slowest:
        raise NotARecord("the durations block is empty")
    workers = next((m["workers"] for m in map(WORKERS.match, lines) if m), "")
    return {
        "verdict": verdict or "no verdict line",
        "budget": budget["budget"].strip(),
        "total": budget["total"].strip(),
        "setup": budget["setup"].strip(),
        "pytest": budget["pytest"].strip(),
        "load": (budget["median"], budget["max"]),
        "counts": counts,
        "workers": workers,
        "slowest": slowest,
    }


def block(record: dict, label: str) -> str:
    out = [
        f"{label}: total {record['total']} (setup {record['setup']}, pytest "
        f"{record['pytest']}); load average {record['load'][0]} median, "
        f"{record['load'][1]} max; {record['counts']}; {record['verdict']} "
        f"(budget {record['budget']})",
    ]
    if record["workers"]:
        out.append(f"workers busy: {record['workers']}")
    out += ["", "| # | seconds | phase | test |", "| --- | ---: | --- | --- |"]
    for n, (seconds, phase, nodeid) in enumerate(record["slowest"], 1):
        out.append(f"| {n} | {seconds:.1f} | {phase} | `{nodeid}` |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="what .ci/run or scripts/test printed")
    parser.add_argument("--label", default="run", help="the block's first words")
    args = parser.parse_args(argv)
    try:
        text = args.log.read_text(errors="replace")
    except OSError as exc:
        print(f"suite_record: cannot read {args.log}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        record = read(text)
    except NotARecord as exc:
        print(f"suite_record: {args.log} is not a full run's log: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(block(record, args.label))
    return 0


if __name__ == "__main__":
    sys.exit(main())
