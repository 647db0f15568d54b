"""Every bad input in tools/bad_inputs.py gets one clear refusal, and
docs/security.md's table shows exactly that refusal."""

from __future__ import annotations

import pytest

from tests.support.cli import assert_one_clear_error
from tools.bad_inputs import (
    CASES,
    prepare,
    rows_in_doc,
    run_case,
)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad-inputs")
    prepare(folder)
    return folder


@pytest.fixture(scope="module")
def documented() -> dict[str, str]:
    return rows_in_doc()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_and_documented(case, tmp, documented):
    result = run_case(case, tmp)
    assert_one_clear_error(result, *case.needles)
    # That docs/security.md shows what it gets now: tools/regen.py's bad-inputs entry.
    assert case.id in documented, f"docs/security.md has no row for {case.id}: make regen"


def test_case_ids_are_unique():
    assert len({c.id for c in CASES}) == len(CASES)
