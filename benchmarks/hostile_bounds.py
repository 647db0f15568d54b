"""How long verify, bench and doctor take to end against each hostile server,
and how much memory they use doing it: the figures behind the bounds that
tests/integration/test_hostile.py holds them to.

Runs every case of tests/support/hostile_cases.py (the same servers, limits
and commands as the tests) under each Python given, the command in a process
of its own that records its own peak RSS (VmHWM), and prints one
markdown table: wall time, the stated bound, the command's own peak RSS and,
for doctor, the docker CLI's (the largest process doctor waited for:
RUSAGE_CHILDREN; for verify and bench that figure is only a fork of
themselves, so it is left out).

    python benchmarks/hostile_bounds.py [--python PY ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import hostile_cases as hc  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--python",
        action="append",
        help="interpreter(s) to run the commands "
        "with (default: this one, and $SM12X_PYTHON312 when set)",
    )
    parser.add_argument("--only", help="run only cases whose id contains this")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    pythons = args.python or [sys.executable] + (
        [os.environ["SM12X_PYTHON312"]] if os.environ.get("SM12X_PYTHON312") else []
    )
    rows, failures = [], 0
    print(
        "| command | server | where | Python | wall s | bound s | peak RSS MiB | docker CLI "
        "peak MiB | cause found |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    scratch = tempfile.TemporaryDirectory()
    baselines = hc.Baselines(Path(scratch.name))
    for case in hc.CASES:
        if args.only and args.only not in case.id:
            continue
        for python in pythons:
            with tempfile.TemporaryDirectory() as tmp:
                o, bound = hc.judge(case, python, Path(tmp), baselines)
            ok = (
                o.wall_s < bound
                and 0 < o.peak_rss_mib < hc.MAX_RSS_MIB
                and o.cause_found
                and bool(o.reports)
            )
            failures += not ok
            rows.append(
                {
                    "id": case.id,
                    "python": o.python,
                    "wall_s": round(o.wall_s, 2),
                    "bound_s": round(bound, 1),
                    "baseline_s": round(baselines.seen[python], 2),
                    "budget": case.why,
                    "peak_rss_mib": round(o.peak_rss_mib, 1),
                    "children_peak_rss_mib": round(o.children_peak_rss_mib, 1),
                    "exit": o.exit,
                    "reports": o.reports,
                    "cause": o.cause[:300],
                    "ok": ok,
                }
            )
            child = f"{o.children_peak_rss_mib:.0f}" if case.tool == "doctor" else "-"
            print(
                f"| {case.tool} | {case.behaviour} | {case.target} | {o.python} | "
                f"{o.wall_s:.1f} | {bound:.1f} | {o.peak_rss_mib:.0f} | {child} | "
                f"{'yes' if o.cause_found else 'NO'}{'' if ok else ' (OUT OF BOUNDS)'} |",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
