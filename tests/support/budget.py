"""The suite's time budget: where a run's minutes went, against what it may spend.

CI gives `.ci/run` 90 minutes on a 2-core machine and a run past that is lost
whole, so every run (scripts/test, `make fast`, any pytest here) ends with:

- the total (scripts/test's setup, passed as SM12X_SETUP_S, plus pytest's wall
  time) against the budget: 30 minutes for a full run (BUDGET_S), 2 minutes
  for the fast tier alone (SM12X_TIER=fast, FAST_BUDGET_S);
- the kernels tier's and qualify's chain's own lines against their budgets;
- each tier's and each module's time (the sum of its tests' setup, call and
  teardown: under `--dist loadfile` a module runs on one worker, so that is
  its wall time there) and each worker's busy time;
- the modules that grew most against the committed baseline
  (tests/budget-baseline.json; `python -m tests.support.budget --write-baseline`
  writes it from the last run's record);
- over budget, a banner saying so; past the hard ceiling (60 minutes,
  CEILING_S, well inside CI's 90) the run fails even if every test passed.

The record of the run goes to $SM12X_CACHE/test-times.json, with the load
average sampled every 30 s beside it (a time means little without the load).
SM12X_BUDGET_S and SM12X_CEILING_S override the two limits (a slower machine
kind). Nothing here times a test for a verdict: only the whole run's length
decides, and only past the ceiling.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BASELINE = REPO / "tests" / "budget-baseline.json"
BUDGET_S = 30 * 60  # issue 44: a cold full run on the 2-core kind
FAST_BUDGET_S = 2 * 60
CEILING_S = 60 * 60
# A test's tier is the slowest of its marks (tests/conftest.py sets them).
TIERS = ("docker", "gpu", "process", "kernels", "wheels", "slow", "fast")
# The kernels tier (tests/kernels) reads four wheels' SASS: its own line, against
# 5 minutes cold (its scans are cached by the libraries' and the check's hash).
KERNELS_BUDGET_S = 5 * 60
# qualify's chain (one mock boot, then doctor, boot, the bench phases, tune,
# the relaunch and the check: tests/integration/test_qualify*.py) is one
# process-tier module on one worker: its own line too, against 6 minutes cold
# (5 min 12 s in the last fresh-clone run).
QUALIFY_MODULES = ("tests/integration/test_qualify.py", "tests/integration/test_qualify_nodes.py")
QUALIFY_BUDGET_S = 6 * 60
GREW_SHOWN = 8
# Growth below this is noise on a loaded 2-core machine, not a trend.
GREW_MIN_S = 5.0
LOAD_EVERY_S = 30.0


def record_path() -> Path:
    return Path(os.environ.get("SM12X_CACHE") or REPO / ".cache") / "test-times.json"


def tier_of(keywords) -> str:
    return next((t for t in TIERS if t in keywords), "other")


def minutes(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def limits(env=os.environ) -> tuple[float, float, str]:
    """(budget, ceiling, what the budget is for) for this run."""
    fast = env.get("SM12X_TIER") == "fast"
    budget = float(env.get("SM12X_BUDGET_S") or (FAST_BUDGET_S if fast else BUDGET_S))
    ceiling = float(env.get("SM12X_CEILING_S") or CEILING_S)
    return budget, ceiling, "the fast tier" if fast else "a full run"


def grew(modules: dict[str, float], baseline: dict[str, float]) -> list[tuple[str, float, float]]:
    """(module, baseline s, now s) for the modules that grew most, largest growth first."""
    found = [
        (name, baseline[name], now)
        for name, now in modules.items()
        if name in baseline and now - baseline[name] >= GREW_MIN_S
    ]
    return sorted(found, key=lambda row: row[2] - row[1], reverse=True)[:GREW_SHOWN]


def load_baseline(path: Path = BASELINE) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def verdict(total: float, budget: float, ceiling: float) -> str:
    if total > ceiling:
        return "ceiling"
    return "over" if total > budget else "within"


def _own_line(what: str, spent: float, budget: float) -> str:
    return f"{what}: {minutes(spent)} of its {minutes(budget)} budget" + (
        " (OVER)" if spent > budget else ""
    )


def summary(record: dict, baseline: dict) -> list[str]:
    """The lines printed at the end of a run."""
    total, budget, ceiling = record["total_s"], record["budget_s"], record["ceiling_s"]
    lines = []
    state = verdict(total, budget, ceiling)
    head = (
        f"total {minutes(total)} of a {minutes(budget)} budget for {record['for']} "
        f"(setup {minutes(record['setup_s'])}, pytest {minutes(record['pytest_s'])}; "
        f"load average {record['load']['median']} median, {record['load']['max']} max, "
        f"{os.cpu_count()} cores)"
    )
    if state == "within":
        lines.append(f"within budget: {head}")
    else:
        bar = "!" * 78
        past = (
            f"PAST THE HARD CEILING OF {minutes(ceiling)}: this run fails"
            if state == "ceiling"
            else f"OVER BUDGET by {minutes(total - budget)} (it fails past {minutes(ceiling)})"
        )
        lines += [bar, f"!!! {past}", f"!!! {head}", "!!! cut the modules below first", bar]
    if not record["modules"]:
        lines.append("no test ran")
        return lines
    lines.append(
        "tiers: "
        + ", ".join(
            f"{t} {minutes(s)} ({record['tier_tests'][t]} tests)"
            for t, s in sorted(record["tiers"].items(), key=lambda kv: -kv[1])
        )
    )
    if "kernels" in record["tiers"]:
        lines.append(_own_line("kernels tier", record["tiers"]["kernels"], KERNELS_BUDGET_S))
    chain = [record["modules"][m] for m in QUALIFY_MODULES if m in record["modules"]]
    if chain:
        lines.append(_own_line("qualify's chain", sum(chain), QUALIFY_BUDGET_S))
    if record["workers"]:
        lines.append(
            "workers busy: "
            + ", ".join(f"{w} {minutes(s)}" for w, s in sorted(record["workers"].items()))
        )
    slowest = sorted(record["modules"].items(), key=lambda kv: -kv[1])[:10]
    lines.append("slowest modules: " + ", ".join(f"{m} {minutes(s)}" for m, s in slowest))
    base = baseline.get("modules", {})
    if base:
        rows = grew(record["modules"], base)
        # Its date and commit; the whole source is in the file.
        when = ", ".join(str(baseline.get("source", "no source given")).split(", ")[:2])
        where = f"{BASELINE.relative_to(REPO)} ({when})"
        if rows:
            lines.append(f"grew most against {where}:")
            lines += [
                f"  {m}: {minutes(b)} -> {minutes(n)} (+{minutes(n - b)})" for m, b, n in rows
            ]
        else:
            lines.append(f"no module grew by {GREW_MIN_S:.0f} s or more against {where}")
        new = sorted(m for m in record["modules"] if m not in base)
        if new:
            lines.append(f"not in the baseline ({len(new)}): " + ", ".join(new[:10]))
    else:
        lines.append(f"no baseline at {BASELINE.relative_to(REPO)}: nothing to compare against")
    return lines


class LoadSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="sm12x-load", daemon=True)
        self.samples = [os.getloadavg()[0]]
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(LOAD_EVERY_S):
            self.samples.append(os.getloadavg()[0])

    def figures(self) -> dict[str, float]:
        samples = [*self.samples, os.getloadavg()[0]]
        return {"median": round(statistics.median(samples), 1), "max": round(max(samples), 1)}


class Budget:
    """The pytest plugin (registered by tests/conftest.py in the controlling
    process only: xdist's workers send it their reports)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.modules: dict[str, float] = defaultdict(float)
        self.tiers: dict[str, float] = defaultdict(float)
        self.tier_tests: dict[str, int] = defaultdict(int)
        self.workers: dict[str, float] = defaultdict(float)
        self.record: dict | None = None
        self.load = LoadSampler()
        self.load.start()

    def pytest_runtest_logreport(self, report) -> None:
        module = report.nodeid.split("::")[0]
        tier = tier_of(report.keywords)
        self.modules[module] += report.duration
        self.tiers[tier] += report.duration
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.tier_tests[tier] += 1
        worker = getattr(getattr(report, "node", None), "gateway", None)
        if worker is not None:
            self.workers[worker.id] += report.duration

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session) -> None:
        self.load.stop.set()
        pytest_s = time.monotonic() - self.started
        try:
            setup_s = float(os.environ.get("SM12X_SETUP_S") or 0)
        except ValueError:
            setup_s = 0.0
        budget, ceiling, what = limits()
        self.record = {
            "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": _commit(),
            "for": what,
            "args": " ".join(session.config.invocation_params.args),
            "setup_s": round(setup_s, 1),
            "pytest_s": round(pytest_s, 1),
            "total_s": round(setup_s + pytest_s, 1),
            "budget_s": budget,
            "ceiling_s": ceiling,
            "load": self.load.figures(),
            "tiers": {k: round(v, 1) for k, v in self.tiers.items()},
            "tier_tests": dict(self.tier_tests),
            "workers": {k: round(v, 1) for k, v in self.workers.items()},
            "modules": {k: round(v, 1) for k, v in sorted(self.modules.items())},
        }
        path = record_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".partial")
            partial.write_text(json.dumps(self.record, indent=1) + "\n")
            partial.replace(path)
        except OSError as exc:
            print(f"budget: could not write {path}: {exc}", file=sys.stderr)
        if (
            verdict(self.record["total_s"], budget, ceiling) == "ceiling"
            and session.exitstatus == 0
        ):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.record is None:
            return
        terminalreporter.section("time budget (tests/support/budget.py)")
        for line in summary(self.record, load_baseline()):
            terminalreporter.write_line(line)


def register(config) -> None:
    """In the controlling process only: xdist's workers send it their reports.
    (Also this module's hook: `pytest -p tests.support.budget`.)"""
    if not hasattr(config, "workerinput") and not config.pluginmanager.has_plugin("sm12x-budget"):
        config.pluginmanager.register(Budget(), "sm12x-budget")


pytest_configure = register


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def write_baseline(
    record_file: Path, out: Path = BASELINE, note: str = "", merge: bool = False
) -> dict:
    """The baseline from a run's record: its module times, and where they came
    from; merge=True keeps the modules of the baseline in `out` that the run
    did not run (a partial run), each source named."""
    record = json.loads(record_file.read_text())
    source = (
        f"{record['when']}, commit {record['commit']}, `pytest {record.get('args', '')}`: setup "
        f"{minutes(record['setup_s'])}, pytest {minutes(record['pytest_s'])}, load average "
        f"{record['load']['median']} median, {record['load']['max']} max"
    )
    source = f"{source}; {note}" if note else source
    modules = dict(record["modules"])
    if merge:
        kept = load_baseline(out)
        left = {m: t for m, t in kept.get("modules", {}).items() if m not in modules}
        if left:
            source = f"{source}; the rest: {kept.get('source', 'no source given')}"
            modules = {**left, **modules}
    baseline = {"source": source, "modules": dict(sorted(modules.items()))}
    out.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")
    return baseline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.budget",
        description="Print the last run's time budget, or make it the committed baseline.",
    )
    parser.add_argument(
        "--record", type=Path, default=None, help="default: $SM12X_CACHE/test-times.json"
    )
    parser.add_argument(
        "--write-baseline", action="store_true", help=f"write {BASELINE.relative_to(REPO)}"
    )
    parser.add_argument(
        "--note", default="", help="added to the baseline's source (e.g. a fresh clone, cold)"
    )
    parser.add_argument(
        "--merge", action="store_true", help="keep the baseline's modules this run did not run"
    )
    args = parser.parse_args(argv)
    path = args.record or record_path()
    if not path.is_file():
        print(f"budget: no record at {path}: run scripts/test first", file=sys.stderr)
        return 1
    if args.write_baseline:
        made = write_baseline(path, note=args.note, merge=args.merge)
        print(
            f"wrote {BASELINE.relative_to(REPO)}: {len(made['modules'])} modules ({made['source']})"
        )
        return 0
    for line in summary(json.loads(path.read_text()), load_baseline()):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
