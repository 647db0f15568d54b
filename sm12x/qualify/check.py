"""`sm12x qualify --check BUNDLE`: is the bundle complete and consistent?

It recomputes every figure from the per-request records (load.figures) and
the full-load hold from its samples, judges the verdicts again, validates the
schema, finds the recipe whose render hashes to the bundle's hash, requires
every planned step, and (--for-verified) a rig's bundle: not the mock's,
every step passed, the provenance complete. One line per failure.

It catches incomplete and inconsistent bundles, not forgeries: records can be
made up as easily as figures. `verified` also needs a reviewer.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from sm12x.qualify import load
from sm12x.qualify.bundle import RESULT, QualifyResult, schema_problems
from sm12x.qualify.facts import incomplete
from sm12x.qualify.render_hash import recipe_hash
from sm12x.qualify.steps import held
from sm12x.qualify.verdict import judge
from sm12x.recipe import load_all

BENCH_METRICS = (
    "output_tokens_per_s", "mean_itl_ms", "mean_ttft_ms", "p99_ttft_ms",
    "mean_e2e_latency_ms", "request_throughput", "duration_s", "total_output_tokens",
)  # fmt: skip


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-3)


def problems(folder: Path, for_verified: bool = False) -> list[str]:
    path = folder / RESULT if folder.is_dir() else folder
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{path}: not a readable JSON file ({type(exc).__name__})"]
    found = schema_problems(data)
    if found:
        return [f"schema: {p}" for p in found]
    result = QualifyResult.model_validate(data)
    out: list[str] = []
    recipes = {r.name: r for r in load_all()}
    recipe = recipes.get(result.recipe.name)
    if recipe is None:
        out.append(f"recipe: no recipe {result.recipe.name} here")
    elif recipe_hash(recipe) != result.recipe.hash:
        owner = [n for n, r in recipes.items() if recipe_hash(r) == result.recipe.hash]
        out.append(
            f"recipe: the bundle's hash is not {recipe.name}'s render here"
            + (f" (it is {owner[0]}'s)" if owner else " (the recipe's render changed since)")
        )
    names = [s.name for s in result.steps]
    for name in result.plan:
        if names.count(name) != 1:
            out.append(f"step {name}: in the plan, found {names.count(name)} time(s)")
    for name in names:
        if name not in result.plan:
            out.append(f"step {name}: not in the plan")
    for step in result.steps:
        for run in step.runs:
            again = load.figures(run.records)
            for key, value in run.figures.items():
                if key not in again:
                    out.append(f"{step.name} c{run.concurrency}: {key} cannot be recomputed")
                elif not same(value, again[key]):
                    out.append(
                        f"{step.name} c{run.concurrency}: {key} is {value}, its records give "
                        f"{again[key]}"
                    )
        if step.bench is not None:
            by_c = {r.concurrency: r for r in step.runs}
            for brun in step.bench.runs:
                rr = by_c.get(brun.concurrency)
                if rr is None:
                    out.append(f"{step.name} bench c{brun.concurrency}: no records")
                    continue
                again = load.figures(rr.records)
                for key in BENCH_METRICS:
                    value = getattr(brun.metrics, key)
                    if not same(value, again.get(key)):
                        out.append(
                            f"{step.name} bench c{brun.concurrency}: {key} is {value}, its "
                            f"records give {again.get(key)}"
                        )
        if step.full_load is not None:
            fl = step.full_load
            longest = held(fl.samples, fl.per_rank_limit, fl.dp_ranks)
            if not same(fl.held_s, longest):
                out.append(f"{step.name}: held_s is {fl.held_s}, its samples give {longest}")
            if step.verdict == "pass" and longest < fl.hold_s:
                out.append(f"{step.name}: passed, but its samples hold {longest} s < {fl.hold_s} s")
    if recipe is not None and result.verdict is not None:
        by_name = dict(recipes)

        def recipe_of(step):
            return by_name.get(step.bench.recipe.name if step.bench else "", recipe)

        judged = judge(result.steps, recipe_of, result.verdict.tolerance)
        if judged.summary != result.verdict.summary:
            out.append(
                f"verdict: says {result.verdict.summary!r}, its steps give {judged.summary!r}"
            )
    elif result.verdict is None:
        out.append("verdict: none (the run did not finish)")
    for chart in result.charts:
        if not (path.parent / chart).is_file():
            out.append(f"chart {chart}: named but not in the bundle")
    extra = [p.name for p in path.parent.iterdir() if p.suffix not in (".json", ".png")]
    if extra:
        out.append(f"files: a bundle holds JSON and PNG only, not {', '.join(sorted(extra))}")
    if for_verified:
        if result.provenance.mock:
            out.append(
                "provenance: the server was sm12x mock-server: a mock's bundle never backs verified"
            )
        for step in result.steps:
            if step.verdict != "pass":
                out.append(f"step {step.name}: {step.verdict}, not pass")
        for name in incomplete(result.provenance):
            out.append(f"provenance: {name} is missing")
        nodes = recipe.hardware.nodes if recipe is not None else 1
        if nodes > 1 and len(result.provenance.nodes) < nodes:
            out.append(f"provenance: nodes lists {len(result.provenance.nodes)} of {nodes} nodes")
        if result.verdict is not None and result.verdict.summary != "qualified":
            out.append(f"verdict: {result.verdict.summary}")
    return out


def main(folder: Path, for_verified: bool = False) -> int:
    found = problems(folder, for_verified)
    for line in found:
        print(f"{folder}: {line}", file=sys.stderr)
    if not found:
        print(
            f"{folder}: complete and consistent" + (" (can back verified)" if for_verified else "")
        )
    return 1 if found else 0
