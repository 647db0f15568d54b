"""The test tiers' one rule a test cannot see from its markers: the fast tier
(SM12X_TIER=fast, `make fast`) unpacks no real wheel, runs no sglang code and
talks to no Docker daemon. The helpers that do those refuse, so a test in the
wrong tier fails at once with the reason, in the test process or in a server
it started (the variables are inherited), instead of quietly taking minutes.
tests/conftest.py says which tests are in which tier.

Wheels and sglang's code are the product's (sm12x.mock.wheels, the mock
server's): its switch SM12X_FORBID_WHEELS=WHY refuses every one of them with
WHY, and `apply()` sets it for the fast tier. Docker is the tests' own
(tests/support/containers.py): guard()."""

from __future__ import annotations

import os

from sm12x.mock import wheels

REASON = (
    "the fast tier does not unpack real wheels or run sglang code: this test belongs "
    "to a slower tier (tests/conftest.py, TIERS)"
)


def fast() -> bool:
    return os.environ.get("SM12X_TIER") == "fast"


def apply() -> None:
    """At the start of a test session: every tier downloads nothing (scripts/test
    fetched the wheels; a missing one is an error naming it), and the fast tier
    reaches no wheel or sglang code at all."""
    os.environ.setdefault(wheels.OFFLINE_ENV, "1")
    if fast():
        os.environ[wheels.FORBID_ENV] = REASON


def guard(what: str) -> None:
    if fast():
        raise RuntimeError(
            f"the fast tier does not {what}: this test belongs to a slower tier "
            "(tests/conftest.py, TIERS)"
        )
