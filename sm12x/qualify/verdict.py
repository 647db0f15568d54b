"""The verdicts, from the steps alone (qualify writes them, `--check` computes
them again): correctness passes when no step failed; throughput is judged at
each anchor's concurrency against `anchor x (1 - tolerance)`, below it
"qualified, slow", never a silent pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from sm12x.qualify.bundle import Step, Summary, Verdicts
from sm12x.recipe import Recipe


def throughput_lines(step: Step, recipe: Recipe, tolerance: float) -> tuple[list[str], list[str]]:
    """(slow lines, at-or-above lines) of a bench step against its recipe's anchors."""
    refs = recipe.comparable_references or list(recipe.references)
    slow: list[str] = []
    fine: list[str] = []
    for run in step.runs:
        measured = run.figures.get("output_tokens_per_s")
        for ref in refs:
            if (ref.concurrency, ref.input_len, ref.output_len) != (
                run.concurrency, run.input_len, run.output_len,
            ):  # fmt: skip
                continue
            floor = ref.output_tokens_per_s * (1 - tolerance)
            kind = "" if ref.comparable else " (not comparable: context)"
            said = (
                f"{step.name} at concurrency {run.concurrency}: "
                f"{0.0 if measured is None else measured:.1f} output tokens/s against "
                f"{ref.output_tokens_per_s:g} x (1 - {tolerance:g}) = {floor:.1f}{kind}"
            )
            (slow if measured is None or measured < floor else fine).append(said)
    return slow, fine


def judge(steps: list[Step], recipe_of: Callable[[Step], Recipe], tolerance: float) -> Verdicts:
    failed = [s for s in steps if s.verdict == "fail"]
    lines = [f"{s.name} failed: {s.problems[0] if s.problems else 'see the step'}" for s in failed]
    benches = [s for s in steps if s.kind == "bench" and s.verdict == "pass" and s.runs]
    throughput: Literal["at or above", "slow", "not measured"] = "not measured"
    if benches:
        best = benches[-1]  # the throughput configuration's when it ran
        slow, fine = throughput_lines(best, recipe_of(best), tolerance)
        if slow:
            throughput = "slow"
            lines += slow
        elif fine:
            throughput = "at or above"
            lines += fine
        else:
            lines.append(f"{best.name}: no anchor ran this workload at these concurrencies")
    skipped = [s.name for s in steps if s.verdict in ("skipped", "not-run")]
    if skipped:
        lines.append(f"not run: {', '.join(skipped)}")
    summary: Summary
    if failed:
        summary = "not qualified"
    elif throughput == "slow":
        summary = "qualified, slow"
    else:
        summary = "qualified"
    return Verdicts(
        summary=summary,
        correctness="fail" if failed else "pass",
        throughput=throughput,
        tolerance=tolerance,
        lines=lines,
    )
