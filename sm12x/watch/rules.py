"""The shipped alert rules (sm12x/deploy/monitoring.py), evaluated on what
watch reads, without Prometheus.

Each condition below is the rule's expression written over watch's own
samples, with the thresholds and `for` durations taken from the module that
renders the rule files, so the two cannot drift apart in numbers. That they
agree in meaning is proved rule by rule: tests/integration/test_watch_rules.py
feeds the same series to this evaluator and to `promtool test rules` (Debian's
Prometheus) and asserts that an alert fires here exactly when it fires there.

Prometheus' semantics kept: an instant value is the latest sample of the last
5 minutes; a rate is over the samples of its window, both ends included (at
least two, a counter reset counted as a restart from 0); an alert is pending
from the first evaluation its condition holds and fires once it has held at
every evaluation for its `for`. Watch evaluates at every scrape.

ThroughputDrop compares the last 10 minutes with the last day: watch knows
only the day it has watched (at most a day kept), so until it has watched for
more than 10 minutes the baseline is the same window and the alert cannot fire.
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from dataclasses import dataclass, field

from sm12x.deploy import monitoring
from sm12x.deploy.monitoring import Thresholds
from sm12x.watch.scrape import Point

LOOKBACK_S = 300.0  # Prometheus' default lookback for an instant value
KEEP_S = 86400.0 + 600.0  # the longest window a rule reads (1d), and a little more
SERVER_ERROR = re.compile(r"5..")


def seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return float(duration[:-1]) * units[duration[-1]]


ALERTS: dict[str, float] = {
    "DsparkAcceptanceCollapse": seconds(monitoring.ACCEPT_FOR),
    "ThroughputDrop": seconds(monitoring.THROUGHPUT_FOR),
    "ServerErrors": seconds(monitoring.ERRORS_FOR),
    "QueueSaturated": seconds(monitoring.QUEUE_FOR),
    "RigDown": seconds(monitoring.DOWN_FOR),
}


@dataclass
class Alert:
    name: str
    key: str  # "" for the rig, the DP rank for the acceptance alert
    since: float  # when its condition first held (pending since)
    firing: bool


class Series:
    """One number per scrape (a counter or a gauge), kept with running totals so
    a window's rate or average costs two binary searches, not a scan of a day."""

    def __init__(self) -> None:
        self.times: deque[float] = deque()
        self.values: deque[float] = deque()
        self.increase: deque[float] = deque()  # a counter's increase so far (resets counted)
        self.total: deque[float] = deque()  # the values' sum so far

    def add(self, at: float, value: float | None) -> None:
        if value is None:
            return
        if self.values:
            previous = self.values[-1]
            grew = value - previous if value >= previous else value  # a reset starts from 0
            self.increase.append(self.increase[-1] + grew)
            self.total.append(self.total[-1] + value)
        else:
            self.increase.append(0.0)
            self.total.append(value)
        self.times.append(at)
        self.values.append(value)

    def trim(self, before: float) -> None:
        while self.times and self.times[0] < before:
            for kept in (self.times, self.values, self.increase, self.total):
                kept.popleft()

    def _span(self, at: float, window: float) -> tuple[int, int]:
        """The first and last index of the window's samples (both ends included)."""
        return bisect.bisect_left(self.times, at - window), bisect.bisect_right(self.times, at) - 1

    def rate(self, at: float, window: float) -> float | None:
        first, last = self._span(at, window)
        if last - first < 1:
            return None
        return (self.increase[last] - self.increase[first]) / (self.times[last] - self.times[first])

    def avg(self, at: float, window: float) -> float | None:
        first, last = self._span(at, window)
        if last < first:
            return None
        before = self.total[first - 1] if first > 0 else 0.0
        return (self.total[last] - before) / (last - first + 1)


@dataclass
class Evaluator:
    thresholds: Thresholds
    points: deque[Point] = field(default_factory=deque)  # the lookback's scrapes
    times: deque[float] = field(default_factory=deque)
    active: dict[tuple[str, str], float] = field(default_factory=dict)
    tokens: Series = field(default_factory=Series)
    errors: Series = field(default_factory=Series)
    responses: Series = field(default_factory=Series)
    running: Series = field(default_factory=Series)

    def _latest(self, at: float) -> Point | None:
        """The latest scrape of the lookback, failed or not."""
        last = bisect.bisect_right(self.times, at) - 1
        if last < 0 or self.times[last] < at - LOOKBACK_S:
            return None
        return self.points[last]

    # --- each rule's condition --------------------------------------------------

    def conditions(self, at: float) -> set[tuple[str, str]]:
        """The (alert, key) pairs whose condition holds at `at`."""
        t = self.thresholds
        held: set[tuple[str, str]] = set()
        latest = self._latest(at)
        if latest is not None and not latest.up:
            held.add(("RigDown", ""))
        if latest is None or not latest.up:
            return held  # a failed scrape: Prometheus marks every series stale at once
        tokens = self.tokens.rate(at, 300)
        if tokens is not None and tokens > 0:
            for rank, gauges in latest.ranks.items():
                value = gauges.accept_length
                if value is not None and value < t.min_accept_length:
                    held.add(("DsparkAcceptanceCollapse", rank))
        short = self._per_request(at, 600)
        day = self._per_request(at, 86400)
        if short is not None and day is not None and short < monitoring.THROUGHPUT_DROP * day:
            held.add(("ThroughputDrop", ""))
        errors = self.errors.rate(at, 300)
        every = self.responses.rate(at, 300)
        if errors is not None and every and errors / every > monitoring.ERROR_SHARE:
            held.add(("ServerErrors", ""))
        if latest.ranks and latest.total("queued") > 0:
            cap = t.max_running_requests
            if cap is None or latest.total("running") >= monitoring.SATURATION * cap:
                held.add(("QueueSaturated", ""))
        return held

    def _per_request(self, at: float, window: float) -> float | None:
        tokens = self.tokens.rate(at, window)
        running = self.running.avg(at, window)
        if tokens is None or not running:
            return None
        return tokens / running

    # --- evaluation ---------------------------------------------------------------

    def add(self, point: Point) -> list[Alert]:
        """Keep the scrape, evaluate every rule at its time, and say which alerts
        are pending or firing."""
        self.points.append(point)
        self.times.append(point.at)
        while self.times and self.times[0] < point.at - LOOKBACK_S:
            self.points.popleft()
            self.times.popleft()
        if point.up:
            self.tokens.add(point.at, point.tokens)
            self.errors.add(point.at, _responses(point, only_5xx=True))
            self.responses.add(point.at, _responses(point, only_5xx=False))
            self.running.add(point.at, point.total("running") if point.ranks else None)
        for series in (self.tokens, self.errors, self.responses, self.running):
            series.trim(point.at - KEEP_S)
        held = self.conditions(point.at)
        self.active = {k: self.active.get(k, point.at) for k in held}
        return self.alerts(point.at)

    def alerts(self, at: float) -> list[Alert]:
        return [
            Alert(name, key, since, at - since >= ALERTS[name])
            for (name, key), since in sorted(self.active.items())
        ]


def _responses(point: Point, only_5xx: bool) -> float | None:
    if not point.responses:
        return None
    return sum(
        v
        for k, v in point.responses.items()
        if not only_5xx or SERVER_ERROR.fullmatch(k.rsplit(" ", 1)[-1])
    )
