"""Shared by every test suite: the repo root on sys.path, so the helpers are
`tests.support.X` under that one name (a second name, `support.X`, would load
a module twice, each copy with its own state: tests/unit/test_lint.py refuses it)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# Ctrl-C as a terminal delivers it. A run started as a background job of a
# non-interactive shell has SIGINT ignored (POSIX), and an ignored signal stays
# ignored across fork and exec: every command the tests start would shrug off
# the Ctrl-C they press on it (stop 60's run, so started, failed test_watch's
# and test_forkserver's). A handler is not inherited across exec, so with one
# here those commands start with the default, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# First, before any test adds an import hook: the in-process CLI runs with the
# interpreter's own (tests/support/cli.py).
import tests.support.cli  # noqa: E402,F401

# A developer's own .env in the checkout must not reach the tests: every
# command reads .env (sm12x.settings); a test that wants one names it.
os.environ["SM12X_ENV_FILE"] = os.devnull

# No test downloads a wheel (SM12X_OFFLINE=1: scripts/test fetched them), and
# the fast tier reaches none (SM12X_FORBID_WHEELS): tests/support/tiers.py.
from tests.support import tiers  # noqa: E402

tiers.apply()


def pytest_configure(config):
    """The time budget's report ends every run (tests/support/budget.py); in
    the controlling process only, which xdist's workers send their reports."""
    from tests.support import budget, forkservers

    budget.register(config)
    forkservers.start()


def pytest_unconfigure(config):
    from tests.support import forkservers

    forkservers.stop()


# --- Running in several processes (pytest-xdist: `scripts/test` runs -n 4 --dist loadfile)
#
# loadfile keeps each module in one process, so a fixture wider than a function
# (a module's probe, the image the image tests build) is made once (the image
# tests are the exception: one unit per track, work_unit below). The
# modules that take longest start first: a long chain started last is what a
# run waits for (the figures: docs/benchmarks.md, "The test suite").
# (Not loadgroup: pytest 9.2 ignores its groups, pytest-dev/pytest-xdist#1386.)
FIRST = (
    "tests/integration/test_image.py",
    "tests/integration/test_router.py",
    "tests/integration/test_hostile.py",
    "tests/patch/test_census.py",
    "tests/patch/test_swa_eviction.py",
    "tests/patch/test_dispatch_behaviour.py",
)


# --- The tiers (CONTRIBUTING.md, "Running the tests")
#
#   fast    tests/unit without any mark below: the CLI, models, renderers and
#           docs; no real wheel, no Docker, no sglang code (SM12X_TIER=fast
#           makes the code that reaches for those fail: tests/support/tiers.py).
#           `make fast`: `SM12X_TIER=fast pytest -m fast`.
#   wheels  the real sglang/flashinfer code from PyPI: tests/patch, and any test
#           whose module holds a helper that unpacks or runs it (WHEEL_HELPERS).
#   docker  a Docker daemon; slow: more than a minute (both marked in the module).
#   gpu     tests/gpu: the device (benchmarks/*.sh run them there).
#   kernels tests/kernels: the real sglang-kernel wheels' GPU code, read with
#           CUDA's tools from PyPI (its own budget: tests/support/budget.py).
#   process tests/integration: real processes, servers, Compose.
# The full suite (scripts/test, CI) runs every tier.
WHEEL_HELPERS = {
    "sm12x.mock.wheels",
    "sm12x.mock.serving",
    "sm12x.mock.engine",
    "tests.support.trees",
    "tests.support.server_args_check",
    "tests.support.closure",
    "tests.support.standin",
    "tests.support.stream_census",
    "tests.support.stream_checks",
    "tools.sglang_cli",
    "tests.support.sglang_surface",
}
FOLDER_MARKS = {"patch": "wheels", "gpu": "gpu", "integration": "process", "kernels": "kernels"}
SLOWER = ("wheels", "docker", "slow", "gpu", "process")


def _holds_wheel_helper(module) -> bool:
    for value in vars(module).values():
        name = getattr(value, "__name__", "") if isinstance(value, type(os)) else ""
        if name in WHEEL_HELPERS:
            return True
    return False


def _mark_tiers(items) -> None:
    helpers: dict[object, bool] = {}
    for item in items:
        folder = Path(str(item.fspath)).relative_to(REPO / "tests").parts[0]
        if folder in FOLDER_MARKS:
            item.add_marker(getattr(pytest.mark, FOLDER_MARKS[folder]))
        module = getattr(item, "module", None)
        if module is not None:
            if module not in helpers:
                helpers[module] = _holds_wheel_helper(module)
            if helpers[module]:
                item.add_marker(pytest.mark.wheels)
        if folder == "unit" and not any(item.get_closest_marker(m) for m in SLOWER):
            item.add_marker(pytest.mark.fast)


def _module_order(items) -> dict[str, tuple]:
    """Each module's place in the queue: FIRST, then the longest by the
    committed baseline's times (tests/budget-baseline.json), then the most tests."""
    from tests.support import budget

    rank = {path: n for n, path in enumerate(FIRST)}
    measured = budget.load_baseline().get("modules", {})
    count: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        count[module] = count.get(module, 0) + 1
    return {m: (rank.get(m, len(FIRST)), -measured.get(m, 0.0), -n, m) for m, n in count.items()}


def pytest_collectreport(report):
    # A test file that skips itself at import (tests/gpu without a GPU) has no
    # items: tests/support/session.py still counts it as collected.
    if report.skipped and report.nodeid.endswith(".py"):
        from tests.support import session

        session.skipped_files.add(report.nodeid)


def pytest_collection_modifyitems(config, items):
    _mark_tiers(items)
    if hasattr(config, "workerinput"):  # an xdist worker: the order the scheduler hands out
        order = _module_order(items)
        items.sort(key=lambda item: order[item.nodeid.split("::")[0]])


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # no hook without xdist (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile with the image tests split by track
    (tests/support/schedule.py, work_unit), units
    handed out in the order the workers collected them (FIRST, then the
    longest measured: pytest_collection_modifyitems), not xdist's own
    most-tests-first."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    from tests.support.schedule import work_unit

    class ByUnit(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False
    return ByUnit(config, log)


@pytest.fixture(autouse=True)
def _cli_as_a_process(request, monkeypatch):
    """The process tier starts `sm12x` as a real process; the rest call it in
    process (tests/support/cli.py says what that isolates by hand)."""
    if request.node.get_closest_marker("process"):
        monkeypatch.setenv("SM12X_CLI_PROCESS", "1")


@pytest.fixture(autouse=True)
def _fresh_imports_for_the_fast_tier(request):
    """A fast-tier test runs with a fresh process's imports: a stub sglang or a
    wheel tree that a slower test left in this worker is hidden for it (the
    CI-under-load run failed 14 launch tests on one, in a worker that had
    served the mock server in process first)."""
    if request.node.get_closest_marker("fast") is None:
        yield
        return
    from tests.support.cli import fresh_imports

    with fresh_imports(Path.cwd()):
        yield
