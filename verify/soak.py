"""Soak: N concurrent streamed requests (chat and tool calls mixed) for M
rounds. Every request must complete with `[DONE]` and one finish_reason, and
every output must pass the degeneration detectors, run separately on
content, reasoning and tool arguments; tool arguments must validate. The mix
holds exact tasks (verify/exact.py) whose one right answer is known: a wrong
token in fluent text fails them.

Reports pass^k (a case passes only if all k = M of its rounds passed),
pass@1 over all requests, TTFT and inter-token latency percentiles, and
output tokens per second.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field, replace

import httpx
import jsonschema

from sm12x.http import transport
from sm12x.http.transport import KnownStuck, Limits, Stalled, Unfinished, aiter_lines, async_client
from verify import detectors, exact, scenarios
from verify.client import max_events
from verify.context import Context
from verify.result import Evidence
from verify.stream import merge

TAGS = ("</think>", "<think>")
MIX = scenarios.SOAK_MIX + exact.SOAK_MIX
# Problems that mean wrong tokens in otherwise fluent text (not loops).
CORRUPTION = ("exact ", "broken_utf8", "script_switch", "nonwords")


@dataclass
class Outcome:
    case: int
    round: int
    kind: str
    problems: list[str] = field(default_factory=list)
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    tokens: int = 0
    sample: str = ""
    mismatch: exact.Mismatch | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    values = sorted(values)

    def q(p: float) -> float:
        return values[min(len(values) - 1, int(round(p * (len(values) - 1))))]

    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": values[-1]}


def judge(kind: str, merged, done: bool, *, tool: bool) -> list[str]:
    """Everything wrong with one soak output (empty: it passed)."""
    problems = []
    if merged.errors:
        problems.append(f"error event: {str(merged.errors[0])[:120]}")
    if not done:
        problems.append("stream ended without [DONE]")
    finishes = merged.finish_reasons.get(0) or []
    if len(finishes) != 1:
        problems.append(f"{len(finishes)} finish_reasons")
    elif finishes[0] == "length":
        problems.append("finish_reason length: ran to max_tokens on a prompt that ends short")
    channels = {"content": merged.content, "reasoning": merged.reasoning}
    for index, call in merged.calls.items():
        channels[f"tool arguments {index}"] = call.arguments
    for name, text in channels.items():
        for finding in detectors.degenerate(text):
            problems.append(f"{name}: {finding}")
    for tag in TAGS:
        if tag in merged.content:
            problems.append(f"content: {tag} leaked into content")
    if tool:
        if not merged.calls:
            problems.append("no tool call")
        elif finishes and finishes[0] != "tool_calls":
            problems.append(f"finish_reason {finishes[0]!r} with tool calls")
        for index, call in merged.calls.items():
            if len(set(call.ids)) > 1:
                problems.append(f"tool call {index}: id changed within the stream")
            try:
                jsonschema.validate(
                    json.loads(call.arguments), scenarios.SCHEMAS.get(call.name, {})
                )
            except (json.JSONDecodeError, jsonschema.ValidationError) as exc:
                message = exc.msg if isinstance(exc, json.JSONDecodeError) else exc.message
                problems.append(
                    f"tool call {index} ({call.name}): invalid arguments: {message[:100]}"
                )
    return problems


TOKEN_FIELDS = ("content", "reasoning_content", "reasoning", "tool_calls")
LOST = ("request failed", "not finished", "stream ended", "not sent")


def soak_limits(ctx: Context) -> Limits:
    """Per-request bounds: the run's time limits, and a body cap scaled to
    max_tokens (about 300 bytes an event, a token or more each, so 1 KiB a
    token is ample) so N concurrent runaway streams stay small together."""
    base = ctx.endpoint.limits
    return replace(base, max_body=1024 * ctx.options.soak_max_tokens + 64 * 1024, fail_fast_after=0)


def _has_token(event: dict) -> bool:
    choices = event.get("choices")
    return isinstance(choices, list) and any(
        isinstance(c, dict) and isinstance(c.get("delta"), dict) and c["delta"].get(k)
        for c in choices
        for k in TOKEN_FIELDS
    )


async def _one(
    client: httpx.AsyncClient, ctx: Context, case: int, round_: int, limits: Limits
) -> Outcome:
    kind, extra = MIX[case % len(MIX)]
    outcome = Outcome(case, round_, kind)
    body = {
        "model": ctx.model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": ctx.options.soak_max_tokens,
        **extra,
    }
    # Events are kept as their JSON text and parsed again to merge: 64 streams'
    # worth of parsed dicts would be several times the bytes.
    events: list[str] = []
    token_times: list[float] = []
    done = False
    most = max_events(body)
    start = time.monotonic()
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:120]}")
            async for line in aiter_lines(response, limits):
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    continue
                event = json.loads(data)
                events.append(data)
                if isinstance(event, dict) and _has_token(event):
                    token_times.append(time.monotonic())
                if len(events) > most:
                    raise RuntimeError(
                        f"over {most} events for max_tokens {body['max_tokens']}: a runaway stream"
                    )
    except KnownStuck as exc:
        outcome.problems.append(f"not sent: {exc}")
    except Unfinished as exc:
        how = "stalled" if isinstance(exc, Stalled) else "past the whole-request limit"
        outcome.problems.append(f"not finished ({how}): {exc}")
    except (httpx.HTTPError, RuntimeError, ValueError, OSError) as exc:
        outcome.problems.append(f"request failed: {type(exc).__name__}: {str(exc)[:160]}")
    try:
        merged = merge([e for e in map(json.loads, events) if isinstance(e, dict)])
    except (TypeError, AttributeError, ValueError) as exc:
        merged = merge([])
        outcome.problems.append(f"request failed: events that are not chat chunks ({exc})"[:200])
    if token_times:
        outcome.ttft = token_times[0] - start
        outcome.itl = [b - a for a, b in zip(token_times, token_times[1:])]
    if merged.usage:
        outcome.tokens = merged.usage[-1][1].get("completion_tokens") or 0
    if not outcome.problems:
        outcome.problems = judge(
            kind,
            merged,
            done,
            tool=kind.startswith("tool") or kind in exact.TASKS and exact.TASKS[kind].tool,
        )
        outcome.mismatch = exact.score(kind, merged)
        if outcome.mismatch is not None:
            outcome.problems.append(f"exact {kind}: {outcome.mismatch}")
    if outcome.problems:
        text = (
            merged.content
            or merged.reasoning
            or next((c.arguments for c in merged.calls.values()), "")
        )
        outcome.sample = text[-160:]
    return outcome


def lost(outcome: Outcome) -> bool:
    """Lost, not judged: the request failed, stalled or was cut."""
    return any(p.startswith(LOST) for p in outcome.problems)


async def run_soak(
    ctx: Context, concurrency: int, rounds: int
) -> tuple[list[Outcome], float, str | None]:
    """Every request is bounded by the transport (whole-request deadline, stall
    limit, body cap); a round in which every request was lost ends the soak,
    so a dead server costs one round, not all of them."""
    ep = ctx.endpoint
    limits = soak_limits(ctx)
    pool = transport.pool(concurrency)
    outcomes: list[Outcome] = []
    stopped = None
    start = time.monotonic()
    async with async_client(
        limits, base_url=ep.base_url, headers=ep.headers, limits=pool
    ) as client:
        for round_ in range(rounds):
            this_round = await asyncio.gather(
                *(_one(client, ctx, case, round_, limits) for case in range(concurrency))
            )
            outcomes += this_round
            if all(lost(o) for o in this_round) and round_ + 1 < rounds:
                stopped = (
                    f"round {round_ + 1}: every request was lost, so rounds "
                    f"{round_ + 2}-{rounds} were not run"
                )
                break
    return outcomes, time.monotonic() - start, stopped


def soak(ctx: Context, ev: Evidence) -> None:
    n, k = ctx.options.soak_concurrency, ctx.options.soak_rounds
    outcomes, wall, stopped = asyncio.run(run_soak(ctx, n, k))
    if stopped:
        ev.saw(stopped)
    by_case: dict[int, list[Outcome]] = {}
    for o in outcomes:
        by_case.setdefault(o.case, []).append(o)
    pass_k = sum(all(o.ok for o in runs) for runs in by_case.values()) / len(by_case)
    pass_1 = sum(o.ok for o in outcomes) / len(outcomes)
    tokens = sum(o.tokens for o in outcomes)
    ttft = percentiles([o.ttft for o in outcomes if o.ttft is not None])
    itl = percentiles([x for o in outcomes for x in o.itl])
    kinds = {}
    for kind in sorted({o.kind for o in outcomes}):
        runs = [o for o in outcomes if o.kind == kind]
        kinds[kind] = {"requests": len(runs), "failed": sum(not o.ok for o in runs)}
    ev.metrics.update(
        {
            "concurrency": n,
            "rounds": k,
            "requests": len(outcomes),
            "failed": sum(not o.ok for o in outcomes),
            "pass_k": pass_k,
            "pass_at_1": pass_1,
            "output_tokens": tokens,
            "wall_s": wall,
            "output_tokens_per_s": tokens / wall if wall else 0,
            "ttft_s": ttft,
            "itl_s": itl,
            "by_kind": kinds,
        }
    )
    fmt = lambda p: " ".join(f"{q} {v * 1000:.0f} ms" for q, v in p.items()) or "n/a"  # noqa: E731
    ev.saw(
        f"{len(outcomes)} requests ({n} concurrent x {k} rounds) in {wall:.1f} s; "
        f"pass^{k} {pass_k:.3f}, pass@1 {pass_1:.3f}"
    )
    ev.saw(
        f"output {tokens} tokens, {tokens / wall if wall else 0:.0f} tok/s; TTFT {fmt(ttft)}; "
        f"ITL {fmt(itl)}"
    )
    exact.report(outcomes, ev)
    failed = [o for o in outcomes if not o.ok]
    if not failed:
        return
    # "content: repeating_tail=40 ..." counts as "content: repeating_tail".
    reasons = Counter(
        p.split("=")[0] if "=" in p.split(" (")[0] else p.split(":")[0]
        for o in failed
        for p in o.problems
    )
    for o in failed[:3]:
        ev.saw(
            f"case {o.case} round {o.round} ({o.kind}): {'; '.join(o.problems)[:200]} | "
            f"tail {o.sample!r}"
        )
    problems = " ".join(p for o in failed for p in o.problems)
    lost_any = any(lost(o) for o in failed)
    degenerate = any(
        d in problems
        for d in (
            "repeating_tail",
            "distinct_",
            "compression_ratio",
            "duplicate_lines",
            "length",
            "leaked",
        )
    )
    corrupt = any(
        p.startswith(CORRUPTION) or any(f": {c}=" in p for c in CORRUPTION)
        for o in failed
        for p in o.problems
    )
    if corrupt and not degenerate:
        cause = (
            "wrong tokens in otherwise fluent output under load (a wrong answer to an "
            "exact task, broken UTF-8, a script switch or non-words): the symptom of a "
            "stale or wrong DSPARK verify row, which repetition statistics do not see"
        )
        fix = (
            "compare against the same recipe booted without speculative decoding "
            "(`sm12x launch --no-spec`, then verify --compare-url); check the image's "
            "patch is applied and the recipe's --speculative-dspark-block-size (4)"
        )
    elif degenerate:
        cause = (
            "degenerate output under concurrent load (repetition loops / word salad / "
            "</think> leaks): the DSPARK draft-depth 5 corruption, which single requests "
            "do not show"
        )
        fix = (
            "set --speculative-dspark-block-size 4 (the recipes' default; 3, 6, 7 were also "
            "clean in the field sweep) and soak again"
        )
    elif lost_any:
        cause = (
            "requests lost or cut under load: the server dropped, stalled or crashed "
            "(OOM, a dead worker, a full queue)"
        )
        fix = "read the server log for the time of the soak; lower --max-running-requests"
    else:
        cause = (
            "tool calls break under concurrent streaming (the intermittent streamed "
            "tool-call failure seen with DSPARK)"
        )
        fix = "check the sglang version's deepseekv4 streaming parser; lower the draft depth"
    ev.fail(
        f"{len(failed)}/{len(outcomes)} soak requests failed (pass^{k} {pass_k:.3f}): "
        + ", ".join(f"{r} x{c}" for r, c in reasons.most_common()),
        cause,
        fix,
    )
