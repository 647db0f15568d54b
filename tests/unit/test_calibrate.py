"""The load calibration that stretches long limits (tests/support/calibrate.py)."""

from __future__ import annotations

import pytest

from tests.support import calibrate


@pytest.fixture
def measured(monkeypatch):
    def use(seconds: float) -> float:
        monkeypatch.setattr(calibrate, "_loop_s", lambda: seconds)
        calibrate.slowdown.cache_clear()
        return calibrate.slowdown()

    yield use
    calibrate.slowdown.cache_clear()


def test_a_machine_twice_as_slow_doubles_the_limit(measured):
    assert measured(2 * calibrate.REFERENCE_S) == pytest.approx(2.0)
    assert calibrate.scaled(1000) == 2000


def test_a_faster_machine_keeps_the_idle_limit(measured):
    assert measured(calibrate.REFERENCE_S / 10) == 1.0
    assert calibrate.scaled(1000) == 1000


def test_a_stuck_machine_still_ends(measured):
    assert measured(1000 * calibrate.REFERENCE_S) == calibrate.MAX_SLOWDOWN


def test_the_median_decides_not_one_slice(monkeypatch):
    runs = iter(
        [10.0, calibrate.REFERENCE_S, calibrate.REFERENCE_S * 2, 0.0, calibrate.REFERENCE_S * 2]
    )
    monkeypatch.setattr(calibrate, "_loop_s", lambda: next(runs))
    calibrate.slowdown.cache_clear()
    try:
        assert calibrate.slowdown() == pytest.approx(2.0)
    finally:
        calibrate.slowdown.cache_clear()


def test_the_real_loop_runs_and_is_at_least_one():
    calibrate.slowdown.cache_clear()
    assert 1.0 <= calibrate.slowdown() <= calibrate.MAX_SLOWDOWN
