"""Measured runs beside a recipe's published figures.

Every reference at a measured concurrency with the same input/output
lengths gets a ratio (measured / reference) for each figure both sides
have. A reference is `comparable` only if its source ran the recipe's own
configuration (recipes/*.yaml says which); the others are shown as
context, their ratio marked with `~` in the table and hollow in the chart,
and never called a pass or a miss. Today no shipped reference is
comparable (docs/recipes.md says why), so every ratio is context.
"""

from __future__ import annotations

from sm12x.bench.lines import METRICS
from sm12x.bench.result import Comparison, FigureComparison, Run, Workload
from sm12x.recipe.model import Recipe, Reference

# Reference field per metric (the recipe model names them the same way).
REFERENCE_FIELD = {name: name for name, *_ in METRICS}


def reference_value(ref: Reference, metric: str) -> float | None:
    return getattr(ref, REFERENCE_FIELD[metric], None)


def _ratio(measured: float | None, reference: float | None) -> float | None:
    if measured is None or not reference:
        return None
    return measured / reference


def source_key(source: str, config: str, url: str | None, comparable: bool) -> tuple:
    """References of one source and configuration share a label in the table and chart."""
    return (source, config, url, comparable)


def reference_groups(recipe: Recipe) -> dict[tuple, list[Reference]]:
    groups: dict[tuple, list[Reference]] = {}
    for ref in recipe.references:
        groups.setdefault(source_key(ref.source, ref.config, ref.url, ref.comparable), []).append(
            ref
        )
    return groups


def same_workload(ref: Reference, workload: Workload) -> bool:
    return ref.input_len == workload.input_len and ref.output_len == workload.output_len


def compare(recipe: Recipe, runs: list[Run], workload: Workload) -> list[Comparison]:
    by_concurrency = {run.concurrency: run for run in runs}
    comparisons = []
    for ref in recipe.references:
        run = by_concurrency.get(ref.concurrency)
        if run is None or not same_workload(ref, workload):
            continue
        figures = []
        for metric, *_ in METRICS:
            value = reference_value(ref, metric)
            if value is None:
                continue
            measured = getattr(run.metrics, metric)
            upper = ref.output_tokens_per_s_max if metric == "output_tokens_per_s" else None
            figures.append(
                FigureComparison(
                    metric=metric,
                    measured=measured,
                    reference=value,
                    reference_max=upper,
                    ratio=_ratio(measured, value),
                    ratio_max=_ratio(measured, upper),
                )
            )
        comparisons.append(
            Comparison(
                concurrency=ref.concurrency,
                source=ref.source,
                url=ref.url,
                config=ref.config,
                engine=ref.engine,
                comparable=ref.comparable,
                figures=figures,
            )
        )
    return comparisons


def workload_mismatches(recipe: Recipe, workload: Workload) -> list[str]:
    """Why some references were left out (a different input/output length)."""
    skipped = sorted(
        {(r.input_len, r.output_len) for r in recipe.references if not same_workload(r, workload)}
    )
    return [
        f"references measured at {i} in / {o} out are not compared with this "
        f"{workload.input_len} / {workload.output_len} workload"
        for i, o in skipped
    ]
