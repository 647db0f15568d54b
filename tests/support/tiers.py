"""The test tiers' one rule a test cannot see from its markers: the fast tier
(SM12X_TIER=fast, `make fast`) unpacks no real wheel, runs no sglang code and
talks to no Docker daemon. The helpers that do those call guard(), so a test
in the wrong tier fails at once with the reason, in the test process or in a
server it started (the variable is inherited), instead of quietly taking
minutes. tests/conftest.py says which tests are in which tier."""

from __future__ import annotations

import os


def guard(what: str) -> None:
    if os.environ.get("SM12X_TIER") == "fast":
        raise RuntimeError(
            f"the fast tier does not {what}: this test belongs to a slower tier "
            "(tests/conftest.py, TIERS)"
        )
