"""What a qualification runs for a recipe: the anchors' concurrencies and
workload, the long-context point, the full-load target, the steps in order."""

from __future__ import annotations

from dataclasses import dataclass, field

from sm12x.launch import configuration
from sm12x.recipe import Recipe
from sm12x.recipe.derived import attention_dp, dp_size

BASELINE = ("doctor", "verify", "full-load", "bench", "long-context")
THROUGHPUT = ("tune", "relaunch", "verify", "full-load", "bench")
CORRECTNESS = {"doctor", "verify", "full-load", "long-context", "tune", "relaunch"}
# Where no anchor says otherwise (sglang bench_serving's random 1024/512).
DEFAULT_CONCURRENCIES = (1, 16)


@dataclass(frozen=True)
class Plan:
    recipe: Recipe
    throughput: Recipe | None  # the rig's tuned configuration, when it has one
    concurrencies: tuple[int, ...]
    input_len: int
    output_len: int
    prompts_per_concurrency: int
    long_context_len: int
    long_context_output: int
    dp: int
    per_rank_limit: int
    hold_s: float
    full_load_output: int
    tolerance: float
    notes: list[str] = field(default_factory=list)

    @property
    def steps(self) -> list[str]:
        names = [f"baseline/{k}" for k in BASELINE]
        if self.throughput is not None:
            names += [f"throughput/{k}" for k in THROUGHPUT]
        return names

    def target_for(self, step: str) -> tuple[int, int]:
        """(DP ranks, requests per rank) the full-load soak of this step's recipe holds."""
        return target(self.recipe_for(step))

    def recipe_for(self, step: str) -> Recipe:
        if step.startswith("throughput/") and self.throughput is not None:
            return self.throughput
        return self.recipe


def throughput_of(recipe: Recipe) -> Recipe | None:
    """The rig's configuration that reads a tuned SPS table, if it is another recipe."""
    if configuration.reads_tuned_table(recipe):
        return None
    for other in configuration.configurations(recipe.rig).values():
        if configuration.reads_tuned_table(other) and other.name != recipe.name:
            return other
    return None


def target(recipe: Recipe) -> tuple[int, int]:
    # sglang splits --max-running-requests over its DP ranks (either spelling).
    dp = max(dp_size(recipe), attention_dp(recipe))
    return dp, max(1, recipe.max_running_requests // dp)


def make_plan(recipe: Recipe, **options) -> Plan:
    refs = recipe.references
    notes = []
    if refs:
        concurrencies = tuple(sorted({r.concurrency for r in refs}))
        input_len, output_len = refs[0].input_len, refs[0].output_len
        if any((r.input_len, r.output_len) != (input_len, output_len) for r in refs):
            notes.append(
                f"the anchors ran more than one workload: qualify runs the first's "
                f"({input_len}/{output_len})"
            )
    else:
        concurrencies, input_len, output_len = DEFAULT_CONCURRENCIES, 1024, 512
        notes.append("the recipe has no anchor: throughput is measured, not judged")
    dp, limit = target(recipe)
    return Plan(
        recipe=recipe,
        throughput=throughput_of(recipe) if options.pop("throughput_phase", True) else None,
        concurrencies=tuple(options.pop("concurrencies", None) or concurrencies),
        input_len=options.pop("input_len", None) or input_len,
        output_len=options.pop("output_len", None) or output_len,
        dp=dp,
        per_rank_limit=limit,
        notes=notes,
        **options,
    )
