"""How much slower this machine runs now than the CI kind does idle.

A limit a test puts on a long step (the image tests' build limit) is its idle
figure times `slowdown()`, measured in the same run, so a machine busy with
other work (a CPU hog beside the suite, docs/benchmarks.md) stretches the
limit instead of failing a build that was only slow. The measure is CPU time
a fixed pure-Python loop takes of the wall clock, which is what contention for
the cores changes; the median of five runs, so one lucky or unlucky slice
does not decide it. Clamped to [1, MAX_SLOWDOWN]: a faster machine keeps the
idle limit, and a stuck one still ends.
"""

from __future__ import annotations

import functools
import statistics
import time

# The loop below on the CI machine kind (2 cores, no GPU), idle: 0.188-0.216 s
# measured 2026-12-02 with some load beside it, so a little under that.
REFERENCE_S = 0.18
MAX_SLOWDOWN = 4.0
LOOP = 3_000_000


def _loop_s() -> float:
    started = time.perf_counter()
    total = 0
    for i in range(LOOP):
        total += i
    return time.perf_counter() - started


@functools.cache
def slowdown() -> float:
    measured = statistics.median(_loop_s() for _ in range(5))
    return min(MAX_SLOWDOWN, max(1.0, measured / REFERENCE_S))


def scaled(idle_s: float) -> int:
    """An idle limit, stretched by how loaded the machine is now."""
    return int(idle_s * slowdown())
