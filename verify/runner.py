"""Runs the checks in order; a failed prerequisite marks its dependants not-run.

Whatever a check meets, the run goes on and ends with a result per check: a
reply no check expected (a `{}` chat completion, a field of the wrong type)
is that check's failure with the cause named, never a traceback, and Ctrl-C
stops the run with the checks done so far kept (Interrupted carries them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import openai

from verify import accuracy, compare, fullload
from verify.checks import basic, chat, reasoning, spec, tools, vision
from verify.client import REPLY_SHAPE_CAUSE, REPLY_SHAPE_FIX, explain
from verify.context import Context, Options
from verify.result import CheckFailure, CheckResult, CheckSkipped, Evidence, Verdict
from verify.soak import soak


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    run: Callable[[Context, Evidence], None]
    needs: tuple[str, ...] = ("health", "models")
    # Checks that run only when asked for (a flag); off, they are skipped.
    enabled: Callable[[Options], bool] = lambda options: True
    off: str = ""


CHECKS = [
    Check("health", "GET /health answers 200", basic.health, needs=()),
    Check("models", "/v1/models lists the model", basic.models, needs=("health",)),
    Check("one-token", "a one-token generation", basic.one_token),
    Check("chat", "non-streamed chat: role, id, finish_reason, usage", chat.chat),
    Check(
        "chat-stream",
        "streamed chat: role first, one finish_reason, text == non-streamed",
        chat.chat_stream,
    ),
    Check("raw-stream", "raw event stream: data: lines, [DONE], include_usage", chat.raw_stream),
    Check(
        "reasoning-on",
        "thinking on: reasoning present, first, not in content",
        reasoning.thinking_on,
    ),
    Check("reasoning-off", "thinking off: no reasoning", reasoning.thinking_off),
    Check(
        "tools", "tool calls: finish_reason, ids, arguments valid against the schema", tools.tools
    ),
    Check(
        "tools-stream",
        "streamed tool calls merge to the non-streamed ones, stable ids",
        tools.tools_stream,
    ),
    Check("tools-parallel", "parallel tool calls, streamed and not", tools.parallel),
    Check(
        "tool-choice",
        "tool_choice auto / required / named / none, and 400 for unknown",
        tools.tool_choice,
    ),
    Check("tools-multi-turn", "answer from role: tool results, no new call", tools.multi_turn),
    Check(
        "tools-not-needed",
        "tools offered but not needed: no call, finish_reason stop",
        tools.not_needed,
    ),
    Check(
        "image",
        "image input: counts shapes in pictures verify draws (the vision tower)",
        vision.image,
        enabled=lambda o: o.vision,
        off="not asked for (the recipe's model serves no vision tower: model.vision; --vision)",
    ),
    Check(
        "soak",
        "concurrent streamed soak: nothing lost, no degenerate output",
        soak,
        needs=("health", "models", "one-token"),
    ),
    Check(
        "full-load",
        "every DP rank full: the exact tasks at max running requests, all answered right",
        fullload.full_load,
        needs=("health", "models", "one-token"),
        enabled=lambda o: o.full_load is not None,
        off="not asked for (--full-load; on for ragged-verify recipes)",
    ),
    Check(
        "spec",
        "speculative decoding ran: acceptance length above the floor",
        spec.spec,
        needs=("health", "models", "one-token"),
    ),
    Check(
        "compare",
        "same temperature-0 outputs as the server without speculative decoding",
        compare.compare,
        needs=("health", "models", "one-token"),
        enabled=lambda o: o.compare_endpoint is not None,
        off="not asked for (--compare-url)",
    ),
    Check(
        "accuracy",
        "benchmark accuracy (lm-eval) above the recipe's floor",
        accuracy.accuracy,
        needs=("health", "models", "one-token"),
        enabled=lambda o: o.accuracy is not None,
        off="not asked for (--accuracy)",
    ),
]
NAMES = [c.name for c in CHECKS]
BY_NAME = {c.name: c for c in CHECKS}


DEADLINE_PROBLEM = (
    "not run: the run's deadline (--deadline) passed before it started; give "
    "a longer --deadline, or run fewer checks (--only)"
)


class Interrupted(Exception):
    """Ctrl-C during the run: the results so far, the rest marked not-run."""

    def __init__(self, results: list[CheckResult]):
        super().__init__("interrupted")
        self.results = results


def needed(names: set[str]) -> set[str]:
    """names and everything they need, transitively."""
    out, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(BY_NAME[name].needs)
    return out


def plan(only: set[str], skip: set[str]) -> tuple[set[str], dict[str, str]]:
    """The checks to run and, for those --only pulled in, which asked for them.
    Raises ValueError when --skip leaves out what --only needs."""
    if not only:
        return set(NAMES) - skip, {}
    wanted = needed(only)
    clash = sorted((wanted - only) & skip)
    if clash:
        users = sorted(n for n in only if set(clash) & needed({n}))
        raise ValueError(
            f"--only {','.join(users)} needs {', '.join(clash)}, which --skip "
            "leaves out: drop it from --skip, or the check from --only"
        )
    return wanted - skip, {
        n: ", ".join(sorted(o for o in only if n in needed({o}))) for n in wanted - only
    }


def unexpected(exc: Exception, name: str) -> CheckFailure:
    """A failure for an exception no check anticipated."""
    if isinstance(exc, (httpx.HTTPError, openai.OpenAIError, UnicodeDecodeError, ValueError)):
        failure = explain(exc, name)
        if failure.cause:
            return failure
    return CheckFailure(
        f"{name} could not read the server's reply: {type(exc).__name__}: {exc}"[:400],
        REPLY_SHAPE_CAUSE,
        REPLY_SHAPE_FIX,
    )


def run_checks(
    ctx: Context, on_result: Callable[[CheckResult], None] | None = None
) -> list[CheckResult]:
    results: dict[str, CheckResult] = {}
    opts = ctx.options
    run, pulled_in = plan(opts.only, opts.skip)
    for check in CHECKS:
        result = CheckResult(check.name, check.title, Verdict.NOT_RUN)
        failed_needs = [
            n for n in check.needs if n in results and results[n].verdict is not Verdict.PASS
        ]
        if check.name in run and not check.enabled(opts):
            result.verdict, result.required = Verdict.SKIP, False
            result.problem = check.off
        elif check.name not in run:
            result.verdict, result.required = Verdict.SKIP, False
            result.problem = "skipped by --skip/--only"
        elif failed_needs:
            result.problem = f"not run: {', '.join(failed_needs)} did not pass"
        elif opts.deadline is not None and time.monotonic() >= opts.deadline:
            result.problem = DEADLINE_PROBLEM
        else:
            ev = Evidence()
            if check.name in pulled_in:
                ev.saw(f"run because --only {pulled_in[check.name]} needs it")
            start = time.monotonic()
            try:
                check.run(ctx, ev)
                result.verdict = Verdict.PASS
            except CheckFailure as exc:
                result.verdict = Verdict.FAIL
                result.problem, result.cause, result.fix = exc.problem, exc.cause, exc.fix
            except CheckSkipped as exc:
                result.verdict, result.problem = exc.verdict, exc.reason
            except KeyboardInterrupt:
                result.problem = "interrupted (Ctrl-C) while running"
                results[check.name] = result
                raise Interrupted(_rest_not_run(results)) from None
            except Exception as exc:  # noqa: BLE001 - a reply nothing expected is a failure
                failure = unexpected(exc, check.name)
                result.verdict = Verdict.FAIL
                result.problem, result.cause, result.fix = (
                    failure.problem,
                    failure.cause,
                    failure.fix,
                )
            result.duration_s = time.monotonic() - start
            result.evidence, result.metrics = ev.lines, ev.metrics
        results[check.name] = result
        if on_result:
            on_result(result)
    return list(results.values())


def _rest_not_run(results: dict[str, CheckResult]) -> list[CheckResult]:
    for check in CHECKS:
        if check.name not in results:
            results[check.name] = CheckResult(
                check.name, check.title, Verdict.NOT_RUN, problem="not run: interrupted (Ctrl-C)"
            )
    return list(results.values())


def not_run(problem: str) -> list[CheckResult]:
    """Every check not-run with one reason (no server, boot failed)."""
    return [CheckResult(c.name, c.title, Verdict.NOT_RUN, problem=problem) for c in CHECKS]
