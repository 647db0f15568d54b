"""The bundle's charts: bench's throughput-against-concurrency chart beside the
anchors' figures (sm12x.bench.chart, one per bench step), and acceptance
length per concurrency (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sm12x.bench.chart import matplotlib_missing, write_chart
from sm12x.qualify.bundle import QualifyResult, Step
from sm12x.recipe import Recipe


def write(result: QualifyResult, recipe_of: Callable[[Step], Recipe], folder: Path) -> list[str]:
    if matplotlib_missing():
        return []
    names = []
    accept: list[tuple[str, list[int], list[float]]] = []
    for step in result.steps:
        if step.bench is None or not step.bench.runs:
            continue
        name = step.name.replace("/", "-") + ".png"
        if write_chart(step.bench, recipe_of(step), folder / name) is None:
            names.append(name)
        pts = [(r.concurrency, r.accept_length) for r in step.runs if r.accept_length is not None]
        if pts:
            accept.append((step.name, [c for c, _ in pts], [a for _, a in pts]))
    if accept:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
        for label, xs, ys in accept:
            ax.plot(xs, ys, "o-", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("acceptance length (server, per run)")
        ax.set_title(f"{result.recipe.name}: DSPARK acceptance")
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / "acceptance.png", metadata={"Software": None})
        plt.close(fig)
        names.append("acceptance.png")
    return names
