"""Each test's CPU seconds: its pytest process's own and its children's.

    SM12X_TEST_CPU=DIR scripts/test -p tools.test_cpu      # a run, the rows kept in DIR
    python3 -m tools.test_cpu report DIR [--top 40]         # by module, then by test

On this 2-core kind a full run is CPU-bound, so the wall times the budget report
gives (`--durations`) are mostly the other workers' load, and process accounting
(tools/suite_cpu.py) names processes, not the tests that started them. This
plugin writes one row per test (setup, call and teardown together) to
DIR/<worker>.jsonl: `own`, the CPU its pytest process spent, and `kids`, what
the children the test reaped spent (getrusage's RUSAGE_CHILDREN: a child and
the descendants it reaped; not a server still running, nor a Docker build's
steps, which dockerd's processes run). A module-wide fixture's work lands on
the first test that asks for it.

Without SM12X_TEST_CPU the plugin writes nothing. `report` needs the standard
library only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import pytest

    hookwrapper = pytest.hookimpl(hookwrapper=True)
except ImportError:  # `report`, from a Python without pytest

    def hookwrapper(function: Any) -> Any:
        return function


ENV = "SM12X_TEST_CPU"


def _children_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


@hookwrapper
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    folder = os.environ.get(ENV)
    if not folder:
        yield
        return
    own, kids, wall = time.process_time(), _children_s(), time.monotonic()
    yield
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    row = {
        "id": item.nodeid,
        "own": round(time.process_time() - own, 2),
        "kids": round(_children_s() - kids, 2),
        "wall": round(time.monotonic() - wall, 2),
        "worker": worker,
    }
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"{worker}.jsonl", "a", encoding="utf-8") as sink:
        sink.write(json.dumps(row) + "\n")


def rows(folder: Path) -> list[dict]:
    found = [
        json.loads(line)
        for path in sorted(folder.glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    if not found:
        raise SystemExit(
            f"test_cpu: no rows under {folder}: run the tests with {ENV}={folder} "
            "and -p tools.test_cpu"
        )
    return found


def report(found: list[dict], top: int) -> str:
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for row in found:
        m = modules[row["id"].split("::")[0]]
        m[0] += row["own"]
        m[1] += row["kids"]
        m[2] += row["wall"]
        m[3] += 1
    own, kids = sum(r["own"] for r in found), sum(r["kids"] for r in found)
    lines = [
        f"{len(found)} tests: {own:.0f} CPU s in the pytest processes, {kids:.0f} in the "
        "children they reaped",
        "",
        "| CPU s | own | children | wall s | tests | module |",
        "| ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    by_cpu = sorted(modules.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
    for name, (o, k, w, n) in by_cpu[:top]:
        lines.append(f"| {o + k:.1f} | {o:.1f} | {k:.1f} | {w:.1f} | {int(n)} | `{name}` |")
    lines += [
        "",
        "| CPU s | own | children | wall s | test |",
        "| ---: | ---: | ---: | ---: | --- |",
    ]
    for row in sorted(found, key=lambda r: -(r["own"] + r["kids"]))[:top]:
        lines.append(
            f"| {row['own'] + row['kids']:.1f} | {row['own']:.1f} | {row['kids']:.1f} | "
            f"{row['wall']:.1f} | `{row['id']}` |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m tools.test_cpu", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("report", help="the rows of a run, by module and by test")
    p.add_argument("folder", type=Path)
    p.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    print(report(rows(args.folder), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
