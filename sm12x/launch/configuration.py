"""Which configuration of a rig runs (SM12X_CONFIGURATION), and whether it may.

A rig has a baseline recipe (named after the rig) and may have a throughput
configuration (`configuration: {rig: <rig>, kind: throughput}`), found among
whatever recipes exist. When SM12X_RECIPE names the rig (its baseline):

- baseline: the baseline;
- throughput: the throughput recipe, refused when it reads a tuned SPS table
  and `sm12x tune` has made none that matches this launch (sm12x.sps.tables:
  another gamma, layout, image or GPU is stale), with what that costs;
- auto: the throughput recipe when it may run, else the baseline with one
  notice saying what it leaves on the table and how to tune.

Naming a throughput recipe directly means throughput. A recipe whose
`tracks` exclude SM12X_TRACK is refused (auto falls back instead).
Profiling (`sm12x launch --sps-profile`, which `sm12x tune` boots) runs the
configuration that reads the table, without one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sm12x.errors import UserError
from sm12x.recipe import Recipe, load_all
from sm12x.recipe.tracks import track_refusal
from sm12x.sps.tables import Lookup

CHOICES = ("auto", "baseline", "throughput")
TUNE_HINT = "run `sm12x tune` once on this rig (docs/tune.md)"


def configurations(rig: str, recipes: Sequence[Recipe] | None = None) -> dict[str, Recipe]:
    """The rig's recipes by configuration kind (the first of a kind wins)."""
    found: dict[str, Recipe] = {}
    for recipe in load_all() if recipes is None else recipes:
        if recipe.rig == rig:
            found.setdefault(recipe.configuration_kind, recipe)
    return found


def reads_tuned_table(recipe: Recipe) -> bool:
    return recipe.dspark.sps_table == "tuned" and recipe.dspark.sps_table_path is None


def cost(throughput: Recipe, baseline: Recipe | None) -> str:
    """What running the baseline instead leaves on the table, from the recipes'
    references: the throughput configuration's comparable figures beside the
    baseline's at the same concurrency (its comparable ones when it has any)."""
    ours = sorted(throughput.comparable_references, key=lambda r: r.concurrency)
    if not ours:
        return "no published figure is comparable to it yet"
    theirs: dict[int, float] = {}
    if baseline is not None:
        pool = baseline.comparable_references or baseline.references
        for ref in pool:
            theirs.setdefault(ref.concurrency, ref.output_tokens_per_s)
    parts = []
    for ref in ours:
        against = theirs.get(ref.concurrency)
        vs = f" vs {against:,.0f}" if against is not None else ""
        parts.append(f"C{ref.concurrency} {ref.output_tokens_per_s:,.0f}{vs}")
    label = ", throughput vs baseline" if theirs else ""
    return f"published output tok/s{label}: {', '.join(parts)} ({ours[0].source})"


@dataclass(frozen=True)
class Resolved:
    recipe: Recipe
    notice: str | None = None  # one line for the user, when the choice was not plain
    warning: str | None = None  # a refusal a dry run shows instead of refusing


Finder = Callable[[Recipe], Lookup]


def resolve(
    named: Recipe,
    choice: str,
    track: str,
    find: Finder,
    *,
    profiling: bool = False,
    dry_run: bool = False,
    recipes: Sequence[Recipe] | None = None,
) -> Resolved:
    """The recipe this launch runs. Raises UserError where it must refuse; a dry
    run gets the refusal as `warning` and the recipe it would have run."""
    siblings = configurations(named.rig, recipes)
    baseline = siblings.get("baseline")

    def refuse(message: str, recipe: Recipe) -> Resolved:
        if dry_run:
            return Resolved(recipe, warning=message)
        raise UserError(message)

    if named.configuration_kind != "baseline":
        notice = None
        if choice == "baseline":
            notice = (
                f"SM12X_CONFIGURATION=baseline does not apply: {named.name} is itself "
                f"the {named.configuration_kind} configuration of {named.rig}"
            )
        problem = track_refusal(named, track)
        if problem:
            raise UserError(problem)  # a track refusal is an error, in a dry run too
        if reads_tuned_table(named) and not profiling:
            lookup = find(named)
            if lookup.table is None:
                return refuse(refusal(named, baseline, lookup, "SM12X_RECIPE"), named)
        return Resolved(named, notice)

    problem = track_refusal(named, track)
    if problem:
        raise UserError(problem)
    throughput = siblings.get("throughput")
    if profiling:
        if throughput is None or not reads_tuned_table(throughput):
            raise UserError(
                f"rig {named.rig} has no configuration that reads a tuned SPS "
                "table: there is nothing to profile for it"
            )
        problem = track_refusal(throughput, track)
        if problem:
            raise UserError(problem)
        return Resolved(
            throughput,
            f"--sps-profile: {throughput.name} in the mode sglang's "
            "SPS profiler needs (for `sm12x tune` only: speculation accepts "
            "nothing while it runs)",
        )
    if throughput is None:
        if choice == "throughput":
            kinds = ", ".join(sorted(siblings))
            raise UserError(
                f"SM12X_CONFIGURATION=throughput but rig {named.rig} has no "
                f"throughput configuration (its recipes: {kinds}): set "
                "SM12X_CONFIGURATION=auto or baseline"
            )
        return Resolved(named)
    if choice == "baseline":
        return Resolved(named)

    problem = track_refusal(throughput, track)
    if problem is None and reads_tuned_table(throughput):
        lookup = find(throughput)
        if lookup.table is None:
            problem = lookup.problem()
            if choice == "throughput":
                return refuse(refusal(throughput, named, lookup, "SM12X_CONFIGURATION"), throughput)
        else:
            return Resolved(
                throughput,
                f"SM12X_CONFIGURATION={choice}: running {throughput.name}, "
                f"the throughput configuration of {named.rig} (tuned SPS table "
                f"{lookup.table})",
            )
    elif problem is None:
        return Resolved(
            throughput,
            f"SM12X_CONFIGURATION={choice}: running {throughput.name}, "
            f"the throughput configuration of {named.rig}",
        )
    if choice == "throughput":
        raise UserError(f"SM12X_CONFIGURATION=throughput: {problem}, or SM12X_CONFIGURATION=auto")
    return Resolved(
        named,
        f"SM12X_CONFIGURATION=auto: running the baseline {named.name}, not "
        f"its throughput configuration {throughput.name}: {_reason(problem)}. What that "
        f"leaves on the table: {cost(throughput, named)}; {_fix(problem)}",
    )


def _reason(problem: str) -> str:
    """A track refusal without its fix, which the notice says once, last."""
    return problem.rsplit(": set ", 1)[0] if "runs only on" in problem else problem


def _fix(problem: str) -> str:
    if "runs only on" in problem:
        return f"set {problem.rsplit('set ', 1)[1]} to use it"
    return TUNE_HINT


def refusal(throughput: Recipe, baseline: Recipe | None, lookup: Lookup, by: str) -> str:
    """The one line a throughput launch without a usable table refuses with."""
    fallback = (
        (
            f"SM12X_RECIPE={baseline.name} with SM12X_CONFIGURATION=auto falls back to "
            "the baseline by itself"
        )
        if baseline is not None
        else "or run the baseline"
    )
    return (
        f"{throughput.name} ({by}) reads a tuned SPS table and {lookup.problem()}: without "
        "one its ragged verify budget degenerates to verify-all, so it is refused rather "
        "than run slow. What running the baseline instead costs: "
        f"{cost(throughput, baseline)}. "
        f"{TUNE_HINT[0].upper() + TUNE_HINT[1:]}; or {fallback}"
    )
