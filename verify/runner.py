"""Runs the checks in order; a failed prerequisite marks its dependants not-run."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from verify import accuracy, compare
from verify.checks import basic, chat, reasoning, spec, tools
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
    Check("chat-stream", "streamed chat: role first, one finish_reason, text == non-streamed",
          chat.chat_stream),
    Check("raw-stream", "raw event stream: data: lines, [DONE], include_usage", chat.raw_stream),
    Check("reasoning-on", "thinking on: reasoning present, first, not in content",
          reasoning.thinking_on),
    Check("reasoning-off", "thinking off: no reasoning", reasoning.thinking_off),
    Check("tools", "tool calls: finish_reason, ids, arguments valid against the schema",
          tools.tools),
    Check("tools-stream", "streamed tool calls merge to the non-streamed ones, stable ids",
          tools.tools_stream),
    Check("tools-parallel", "parallel tool calls, streamed and not", tools.parallel),
    Check("tool-choice", "tool_choice auto / required / named / none, and 400 for unknown",
          tools.tool_choice),
    Check("tools-multi-turn", "answer from role: tool results, no new call", tools.multi_turn),
    Check("tools-not-needed", "tools offered but not needed: no call, finish_reason stop",
          tools.not_needed),
    Check("soak", "concurrent streamed soak: nothing lost, no degenerate output", soak,
          needs=("health", "models", "one-token")),
    Check("spec", "speculative decoding ran: acceptance length above the floor", spec.spec,
          needs=("health", "models", "one-token")),
    Check("compare", "same temperature-0 outputs as the server without speculative decoding",
          compare.compare, needs=("health", "models", "one-token"),
          enabled=lambda o: o.compare_endpoint is not None, off="not asked for (--compare-url)"),
    Check("accuracy", "benchmark accuracy (lm-eval) above the recipe's floor",
          accuracy.accuracy, needs=("health", "models", "one-token"),
          enabled=lambda o: o.accuracy is not None, off="not asked for (--accuracy)"),
]
NAMES = [c.name for c in CHECKS]


def run_checks(ctx: Context, on_result: Callable[[CheckResult], None] | None = None
               ) -> list[CheckResult]:
    results: dict[str, CheckResult] = {}
    opts = ctx.options
    for check in CHECKS:
        result = CheckResult(check.name, check.title, Verdict.NOT_RUN)
        wanted = (not opts.only or check.name in opts.only) and check.name not in opts.skip
        failed_needs = [n for n in check.needs if n in results and results[n].verdict
                        is not Verdict.PASS]
        if wanted and not check.enabled(opts):
            result.verdict, result.required = Verdict.SKIP, False
            result.problem = check.off
        elif not wanted:
            result.verdict, result.required = Verdict.SKIP, False
            result.problem = "skipped by --skip/--only"
        elif failed_needs:
            result.problem = f"not run: {', '.join(failed_needs)} did not pass"
        else:
            ev = Evidence()
            start = time.monotonic()
            try:
                check.run(ctx, ev)
                result.verdict = Verdict.PASS
            except CheckFailure as exc:
                result.verdict = Verdict.FAIL
                result.problem, result.cause, result.fix = exc.problem, exc.cause, exc.fix
            except CheckSkipped as exc:
                result.verdict, result.problem = exc.verdict, exc.reason
            result.duration_s = time.monotonic() - start
            result.evidence, result.metrics = ev.lines, ev.metrics
        results[check.name] = result
        if on_result:
            on_result(result)
    return list(results.values())
