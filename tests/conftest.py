"""Shared by every test suite: the repo root and the test-support helpers on sys.path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# A developer's own .env in the checkout must not reach the tests: every
# command reads .env (sm12x.settings); a test that wants one names it.
os.environ["SM12X_ENV_FILE"] = os.devnull


# --- Running in several processes (pytest-xdist: `scripts/test` runs -n 4 --dist loadfile)
#
# loadfile keeps each module in one process, so a fixture wider than a function
# (a module's probe, the image the image tests build) is made once. The
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


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: the order the scheduler hands out
        rank = {path: n for n, path in enumerate(FIRST)}
        items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(FIRST)))
