"""The console report: one table per concurrency, references beside each figure.

Ratios are measured / reference. A ratio against a reference that is not
comparable (another depth, parallelism or engine) is printed as `~0.95x`
and the footnote says what the source ran; latencies are better below 1.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sm12x.bench.compare import source_key
from sm12x.bench.lines import METRICS
from sm12x.bench.result import BenchResult, Comparison, FigureComparison, Run

STATUS_STYLE = {"ok": "green", "partial": "yellow", "failed": "bold red"}


def fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    if metric == "accept_length":
        return f"{value:.2f}"
    return f"{value:,.1f}"


def fmt_ratio(figure: FigureComparison | None, comparable: bool) -> Text:
    if figure is None or figure.ratio is None:
        return Text("-", style="dim")
    text = f"{figure.ratio:.2f}"
    if figure.ratio_max is not None:
        # Against a range: measured/max .. measured/min.
        text = f"{figure.ratio_max:.2f}-{figure.ratio:.2f}"
    if comparable:
        return Text(f"{text}x")
    return Text(f"~{text}x", style="dim")


def fmt_reference(figure: FigureComparison | None, metric: str) -> str:
    if figure is None:
        return "-"
    if figure.reference_max is not None:
        return f"{fmt(metric, figure.reference)}-{fmt(metric, figure.reference_max)}"
    return fmt(metric, figure.reference)


def run_title(run: Run) -> Text:
    title = Text(f"concurrency {run.concurrency}: ")
    title.append(run.status, style=STATUS_STYLE[run.status])
    if run.completed is not None and run.num_prompts is not None:
        title.append(f", {run.completed}/{run.num_prompts} requests")
    elif run.completed is not None:
        title.append(f", {run.completed} requests")
    if run.wall_s is not None:
        title.append(f", {run.wall_s:.0f} s")
    return title


def run_table(run: Run, comparisons: list[Comparison], numbers: dict[int, int]) -> Table:
    table = Table(title=run_title(run), box=box.SIMPLE_HEAVY, title_justify="left")
    table.add_column("metric")
    table.add_column("measured", justify="right")
    for comparison in comparisons:
        mark = "" if comparison.comparable else "~"
        table.add_column(f"ref {numbers[id(comparison)]}{mark}", justify="right")
        table.add_column("ratio", justify="right")
    for metric, _source, label, unit in METRICS:
        row: list[str | Text] = [
            f"{label} ({unit})" if unit else label,
            fmt(metric, getattr(run.metrics, metric)),
        ]
        for comparison in comparisons:
            figure = next((f for f in comparison.figures if f.metric == metric), None)
            row += [fmt_reference(figure, metric), fmt_ratio(figure, comparison.comparable)]
        table.add_row(*row)
    return table


def render(result: BenchResult, console: Console) -> None:
    recipe = result.recipe
    env = result.environment
    console.print(
        Text.assemble(
            ("sm12x bench", "bold"),
            f": recipe {recipe.name} ({recipe.status}), sglang {env.sglang_version or '?'}, "
            f"flashinfer {env.flashinfer_version or '?'}, "
            f"{len(env.gpus)} GPU(s) {', '.join(sorted(set(env.gpus))) or '?'}",
        ),
        soft_wrap=True,
    )
    w = result.workload
    console.print(
        f"workload: {w.dataset_name}{' (' + w.dataset_path + ')' if w.dataset_path else ''}, "
        f"{w.input_len} in / {w.output_len} out, range ratio {w.range_ratio}, "
        f"backend {w.backend}",
        highlight=False,
    )
    # One number per source (and configuration), shared by its concurrencies.
    keys: dict[tuple, int] = {}
    numbers: dict[int, int] = {}
    for comparison in result.comparisons:
        key = source_key(
            comparison.source, comparison.config, comparison.url, comparison.comparable
        )
        numbers[id(comparison)] = keys.setdefault(key, len(keys) + 1)
    for run in result.runs:
        mine = [c for c in result.comparisons if c.concurrency == run.concurrency]
        console.print(run_table(run, mine, numbers))
        for problem in run.problems:
            console.print(
                Text(f"  ! {problem}", style=STATUS_STYLE.get(run.status, "")), soft_wrap=True
            )
        if run.log and run.status != "ok":
            console.print(f"  log: {run.log}", highlight=False, markup=False, soft_wrap=True)
    if result.comparisons:
        console.print("references (ratio = measured / reference; latencies: below 1 is better):")
        shown: set[int] = set()
        for comparison in result.comparisons:
            n = numbers[id(comparison)]
            if n in shown:
                continue
            shown.add(n)
            flag = "comparable" if comparison.comparable else "NOT comparable, context only (~)"
            console.print(
                f"  ref {n}: {comparison.source} [{flag}]: {comparison.config}"
                + (f" <{comparison.url}>" if comparison.url else ""),
                highlight=False,
                markup=False,
            )
    elif result.runs:
        console.print("references: the recipe publishes none at these concurrencies")
    for warning in result.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"), soft_wrap=True)
