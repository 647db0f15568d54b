"""Where an image build's time goes: BuildKit's plain progress log, step by step.

tests/support/containers.py keeps every build's log under
$SM12X_CACHE/build-logs/ (one file per build, named for its tag and when it
started); this reads them back as steps: which stage and instruction, how long
it ran, whether BuildKit found it cached, and inside a RUN the second pip
started installing (so a step's download time and its install time show
apart). The profile in docs/benchmarks.md ("Image build profile") is

    python -m tests.support.build_steps .cache/build-logs

BuildKit's plain format (the 20.10 CLI's): `#N [stage i/n] INSTRUCTION` opens
step N, `#N 12.345 text` is its output at 12.345 s, `#N DONE 4.2s`,
`#N CACHED` or `#N ERROR: ...` closes it; steps interleave.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

HEAD = re.compile(r"^#(\d+) (\[[^\]]+\] .*|[a-z].*)$")
OUTPUT = re.compile(r"^#(\d+) (\d+\.\d+) (.*)$")
DONE = re.compile(r"^#(\d+) DONE (\d+(?:\.\d+)?)s$")
CACHED = re.compile(r"^#(\d+) CACHED$")
ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")


@dataclass
class Step:
    number: int
    name: str
    seconds: float = 0.0
    cached: bool = False
    failed: bool = False
    installing_at: float | None = None  # pip's "Installing collected packages" line
    lines: int = 0
    last_output: float = 0.0  # a failed step has no DONE line: its last output's time


def parse(text: str) -> list[Step]:
    steps: dict[int, Step] = {}
    for line in text.splitlines():
        if m := DONE.match(line):
            step = steps.setdefault(int(m[1]), Step(int(m[1]), "?"))
            step.seconds = float(m[2])
        elif m := CACHED.match(line):
            steps.setdefault(int(m[1]), Step(int(m[1]), "?")).cached = True
        elif m := ERROR.match(line):
            steps.setdefault(int(m[1]), Step(int(m[1]), "?")).failed = True
        elif m := OUTPUT.match(line):
            step = steps.setdefault(int(m[1]), Step(int(m[1]), "?"))
            step.lines += 1
            step.last_output = float(m[2])
            if step.installing_at is None and "Installing collected packages" in m[3]:
                step.installing_at = float(m[2])
        elif m := HEAD.match(line):
            number = int(m[1])
            if number not in steps:
                steps[number] = Step(number, m[2])
            elif steps[number].name == "?":
                steps[number].name = m[2]
    for step in steps.values():
        if step.failed and not step.seconds:
            step.seconds = step.last_output
    return [steps[n] for n in sorted(steps)]


def summary(steps: list[Step], width: int = 90) -> list[str]:
    rows = []
    for step in steps:
        if step.seconds < 0.5 and not step.failed:
            continue
        state = "FAILED" if step.failed else ("cached" if step.cached else "")
        pip = (
            ""
            if step.installing_at is None
            else f"  (pip installing from {step.installing_at:.0f} s)"
        )
        rows.append(f"  {step.seconds:7.1f} s {state:6} {step.name[:width]}{pip}")
    total = sum(s.seconds for s in steps)
    rows.append(f"  {total:7.1f} s total of the steps (BuildKit runs some side by side)")
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(
            "usage: python -m tests.support.build_steps DIR (the build logs' folder,"
            " $SM12X_CACHE/build-logs after an image test run)",
            file=sys.stderr,
        )
        return 2
    for log in sorted(Path(argv[0]).glob("*.log")):
        print(log.name)
        print("\n".join(summary(parse(log.read_text(errors="replace")))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
