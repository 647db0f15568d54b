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
