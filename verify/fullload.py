"""Full load: the exact tasks at the recipe's own max running requests.

A fault that hurts only a DP rank holding its largest decode graph's worth of
requests (sglang 0.5.23's compact-verify full-rank padding, issue 28) never
shows in the ordinary soak: 64 streams over four ranks of 64 fill none. This
check holds max_running_requests streams in flight, each an exact task
(verify/exact.py: one right answer, scored exactly), in a closed loop: every
stream starts its next request as soon as one ends, so for the whole run every
rank holds its share (sglang's data-parallel controller places requests in
turn, `--load-balance-method round_robin` by default) and runs full-graph
decode steps. `--full-load-rounds` requests a stream; the run stops starting
new ones after `--full-load-time` seconds (each in flight bounded as every
request is). Any wrong answer fails it, naming the likely misconfiguration.

The maximum comes from the recipe (`--max-running-requests` in its flags,
and its DP ranks), else from what the server resolved (/server_info's
max_running_requests and dp_size: sglang's own resolution of the argv), or
`--full-load-concurrency`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from sm12x.http import transport
from sm12x.http.transport import async_client
from verify import exact, scenarios
from verify.context import Context
from verify.result import Evidence
from verify.soak import Outcome, _one, lost, soak_limits

EXACT_BASE = len(scenarios.SOAK_MIX)  # the soak mix's index of its first exact task
KINDS = len(exact.SOAK_MIX)
# Past this a run is a load test (sm12x bench), not a check (verify/cli.py's cap).
MAX_STREAMS = 1024
FULL_RANK_CAUSE = (
    "wrong answers only when every DP rank is full: the likely misconfiguration is a "
    "DP rank that fills its largest decode CUDA graph under compact ragged verify "
    "(sglang 0.5.23's full-rank padding: with no padding slot left, the last request "
    "of a full rank is handed the graph's leftover verify rows and its compressed KV "
    "is overwritten)"
)
FULL_RANK_FIX = (
    "serve the image's own patch series: sm12x's images (both tracks) carry 0024, "
    "which hands the DeepSeek-V4 compressor each request's own verify rows (no request "
    "limit or graph cap avoids the full rank: sglang clamps its decode graphs to the "
    "rank's request pool; docs/patch.md, docs/benchmarks.md#compact-verify-at-a-full-dp-rank); "
    "an image without it must not run compact verify: run the rig's baseline "
    "(SM12X_CONFIGURATION=baseline: static verify)"
)


@dataclass(frozen=True)
class FullLoad:
    """--full-load's settings: the streams (None: the recipe's, else the server's)."""

    streams: int | None = None
    dp: int | None = None
    source: str = ""
    rounds: int = 2
    budget_s: float = 900.0


def _server_layout(ctx: Context, ev: Evidence) -> tuple[int | None, int | None]:
    """max_running_requests and dp_size as the server resolved them."""
    try:
        r = ctx.http.get(ctx.endpoint.base_url.rstrip("/") + "/server_info")
        info = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        ev.saw(f"GET /server_info: {str(exc) or type(exc).__name__}")
        return None, None
    if not isinstance(info, dict):
        return None, None

    def number(name: str) -> int | None:
        value = info.get(name)
        return value if isinstance(value, int) and value > 0 else None

    return number("max_running_requests"), number("dp_size")


def layout(ctx: Context, options: FullLoad, ev: Evidence) -> tuple[int, int, str]:
    """How many streams, over how many DP ranks, and where that came from."""
    server_max, server_dp = _server_layout(ctx, ev)
    if options.streams is not None:
        streams, dp, source = options.streams, options.dp or server_dp or 1, options.source
    elif server_max is not None:
        streams, dp, source = server_max, server_dp or 1, "the server's max_running_requests"
    else:
        ev.fail(
            "cannot tell the server's max running requests (no max_running_requests on "
            "/server_info, no --max-running-requests in the recipe)",
            "the check loads every DP rank to its maximum, which it must know",
            "pass --recipe (a recipe that sets --max-running-requests) or "
            "--full-load-concurrency N",
        )
    if server_max is not None and server_max != streams:
        ev.saw(
            f"the server resolved max_running_requests={server_max}, not {streams} "
            f"({source}): the server may not run this recipe"
        )
    if streams > MAX_STREAMS:
        ev.fail(
            f"{streams} streams ({source}) is past verify's {MAX_STREAMS}",
            "each stream is a connection and a task",
            "`sm12x bench --concurrency` loads a server that far",
        )
    return streams, dp, source


async def run_full(
    ctx: Context, streams: int, rounds: int, budget_s: float
) -> tuple[list[Outcome], float, int]:
    """`streams` streams, each running up to `rounds` exact tasks one after another
    (a closed loop: the load stays at `streams`); none starts after budget_s. Returns
    the outcomes, the wall time and how many requests the budget left unsent."""
    limits = soak_limits(ctx)
    ep = ctx.endpoint
    start = time.monotonic()
    outcomes: list[Outcome] = []
    unsent = 0

    async def stream(client: httpx.AsyncClient, number: int) -> None:
        nonlocal unsent
        for round_ in range(rounds):
            if time.monotonic() - start >= budget_s:
                unsent += rounds - round_
                return
            case = EXACT_BASE + (number + round_) % KINDS
            outcome = await _one(client, ctx, case, round_, limits)
            outcome.case = number
            outcomes.append(outcome)
            if lost(outcome) and all(lost(o) for o in outcomes[-streams:]):
                unsent += rounds - round_ - 1
                return  # the server is gone: a round of losses is enough

    async with async_client(
        limits, base_url=ep.base_url, headers=ep.headers, limits=transport.pool(streams)
    ) as client:
        await asyncio.gather(*(stream(client, n) for n in range(streams)))
    return outcomes, time.monotonic() - start, unsent


def full_load(ctx: Context, ev: Evidence) -> None:
    options = ctx.options.full_load
    assert isinstance(options, FullLoad)  # the check runs only with it
    streams, dp, source = layout(ctx, options, ev)
    share = -(-streams // dp)
    ev.saw(
        f"{streams} streams ({source}) over {dp} DP rank(s): {share} a rank, each stream "
        f"{options.rounds} exact task(s) one after another"
    )
    outcomes, wall, unsent = asyncio.run(run_full(ctx, streams, options.rounds, options.budget_s))
    wrong = [o for o in outcomes if o.mismatch is not None]
    failed = [o for o in outcomes if not o.ok]
    ev.metrics.update(
        {
            "streams": streams,
            "dp_ranks": dp,
            "per_rank": share,
            "source": source,
            "rounds": options.rounds,
            "requests": len(outcomes),
            "unsent": unsent,
            "failed": len(failed),
            "wrong": len(wrong),
            "wall_s": wall,
        }
    )
    ev.saw(
        f"{len(outcomes)} requests in {wall:.1f} s"
        + (f"; {unsent} not sent (--full-load-time {options.budget_s:g} s)" if unsent else "")
        + f"; {len(failed)} failed, {len(wrong)} answered wrong"
    )
    exact.report(outcomes, ev)
    for o in failed[:3]:
        ev.saw(f"stream {o.case} request {o.round} ({o.kind}): {'; '.join(o.problems)[:200]}")
    if not outcomes:
        ev.fail(
            "no request was sent before --full-load-time",
            "the time budget ran out first",
            "give a longer --full-load-time",
        )
    if wrong:
        ev.fail(
            f"{len(wrong)}/{len(outcomes)} exact tasks answered wrong with {streams} "
            f"requests in flight ({share} a DP rank)",
            FULL_RANK_CAUSE,
            FULL_RANK_FIX,
        )
    if failed:
        lost_any = any(lost(o) for o in failed)
        ev.fail(
            f"{len(failed)}/{len(outcomes)} requests failed at full load",
            "requests lost or cut with every rank full: the server dropped, stalled or "
            "crashed (OOM, a dead worker)"
            if lost_any
            else "degenerate or malformed output only at full load",
            "read the server log for the time of the check; the soak's evidence names each problem",
        )
