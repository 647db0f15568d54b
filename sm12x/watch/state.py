"""What watch shows, from the scrapes so far: throughput, acceptance (its
trend, and by context length as far as sglang's metrics allow), the DP ranks,
recent errors and the alerts.

Acceptance by context length: sglang exports the acceptance length only per
DP rank, its accepted tokens over its decode steps since the last report
(`sglang:spec_accept_length`, a gauge set in
scheduler_components/metrics_reporter.py; no per-request or per-length series
exists in 0.5.17 or 0.5.23). The same report sets the running batch's total
sequence length (`sglang:decode_sum_seq_lens`), so each scrape's acceptance is
bucketed by its batch's mean context (total length / running requests). That
is exact while one request runs, a blend of lengths under a mixed batch, and
says so.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sm12x.deploy.monitoring import Thresholds
from sm12x.watch.rules import Alert, Evaluator
from sm12x.watch.scrape import Point

# Context buckets in tokens (the field reports acceptance by 8K, 32K and 128K).
BUCKETS = ((0, 8192, "<8K"), (8192, 32768, "8-32K"), (32768, 131072, "32-128K"))
TOP = ">=128K"
TREND_S = 300.0  # acceptance's trend: its change over the last 5 minutes
RATE_S = 10.0  # tok/s over the scrapes of the last 10 seconds
ERRORS_KEPT = 5
CONTEXT_NOTE = (
    "by the batch's mean context: sglang exports acceptance per DP rank, averaged "
    "over the running batch (exact with one request)"
)
NO_CONTEXT = "no context buckets: this server exports no sglang:decode_sum_seq_lens"


def bucket(context: float) -> str:
    for low, high, name in BUCKETS:
        if low <= context < high:
            return name
    return TOP


@dataclass
class Watch:
    thresholds: Thresholds
    rules: Evaluator = field(init=False)
    points: deque[Point] = field(default_factory=lambda: deque(maxlen=4096))
    by_context: dict[str, list[float]] = field(default_factory=dict)  # bucket -> [sum, n]
    errors: deque[str] = field(default_factory=lambda: deque(maxlen=ERRORS_KEPT))
    alerts: list[Alert] = field(default_factory=list)
    has_context: bool = False

    def __post_init__(self) -> None:
        self.rules = Evaluator(self.thresholds)

    def add(self, point: Point, clock: str = "") -> None:
        previous = self.last_up()
        self.points.append(point)
        self.alerts = self.rules.add(point)
        if not point.up:
            return
        if previous is not None:
            self._errors(previous, point, clock)
        generating = previous is not None and (point.tokens or 0) > (previous.tokens or 0)
        for rank in point.ranks.values():
            context = rank.context()
            self.has_context |= rank.seq_lens is not None
            if generating and context is not None and rank.accept_length:
                total = self.by_context.setdefault(bucket(context), [0.0, 0])
                total[0] += rank.accept_length
                total[1] += 1

    def _errors(self, before: Point, now: Point, clock: str) -> None:
        for key, value in sorted(now.responses.items()):
            endpoint, _, status = key.rpartition(" ")
            grew = value - before.responses.get(key, 0.0)
            if status[:1] in ("4", "5") and grew > 0:
                self.errors.append(f"{clock} {grew:.0f}x HTTP {status} {endpoint}".strip())
        if now.aborted is not None and before.aborted is not None and now.aborted > before.aborted:
            self.errors.append(f"{clock} {now.aborted - before.aborted:.0f} aborted".strip())

    def last_up(self) -> Point | None:
        return next((p for p in reversed(self.points) if p.up), None)

    def tokens_per_s(self) -> float | None:
        ups = [p for p in self.points if p.up and p.tokens is not None]
        if len(ups) < 2:
            return None
        newest = ups[-1]
        oldest = next((p for p in ups if p.at >= newest.at - RATE_S), ups[0])
        if oldest is newest:
            oldest = ups[-2]
        return max(0.0, (newest.tokens or 0) - (oldest.tokens or 0)) / (newest.at - oldest.at)

    def accept_now(self) -> float | None:
        point = self.last_up()
        values = [
            r.accept_length for r in (point.ranks.values() if point else []) if r.accept_length
        ]
        return sum(values) / len(values) if values else None

    def accept_trend(self) -> float | None:
        """Acceptance's change over the last TREND_S seconds (None: too soon)."""
        ups = [(p.at, a) for p in self.points if p.up and (a := _mean_accept(p)) is not None]
        if len(ups) < 2 or ups[-1][0] - ups[0][0] < 1.0:
            return None
        start = next(v for t, v in ups if t >= ups[-1][0] - TREND_S)
        return ups[-1][1] - start

    def snapshot(self) -> dict:
        """Everything the view shows, as JSON (`--once`)."""
        point = self.last_up()
        t = self.thresholds
        ranks = {
            name: {
                "running": r.running,
                "queued": r.queued,
                "kv_usage": r.kv_usage,
                "accept_length": r.accept_length,
                "mean_context": r.context(),
            }
            for name, r in sorted((point.ranks if point else {}).items())
        }
        return {
            "up": bool(self.points and self.points[-1].up),
            "error": self.points[-1].error if self.points else None,
            "output_tokens_per_s": self.tokens_per_s(),
            "accept_length": self.accept_now(),
            "accept_trend_5m": self.accept_trend(),
            "min_accept_length": t.min_accept_length,
            "accept_by_context": {k: v[0] / v[1] for k, v in self.by_context.items() if v[1]},
            "accept_by_context_note": CONTEXT_NOTE if self.has_context else NO_CONTEXT,
            "ranks": ranks,
            "recent_errors": list(self.errors),
            "alerts": [
                {
                    "alert": a.name,
                    "rank": a.key or None,
                    "state": "firing" if a.firing else "pending",
                }
                for a in self.alerts
            ],
            "rig": t.rig,
        }


def _mean_accept(point: Point) -> float | None:
    values = [r.accept_length for r in point.ranks.values() if r.accept_length]
    return sum(values) / len(values) if values else None
