"""The PNG chart: output tokens/s and latency against concurrency.

matplotlib is optional (`pip install 'sm12x[bench]'`); the runtime image
does not carry it. Without it write_chart() returns the reason the chart was
skipped and bench says so; nothing else depends on it.

Left: measured output throughput, the recipe's references as markers
(filled: comparable; hollow: context only; a vertical bar: a published
range). Right: mean and p99 ITL and mean TTFT (log scale), with reference
ITLs. A failed concurrency is a red x on the axis, a partial run
(some requests failed) is ringed in orange.
"""

from __future__ import annotations

from pathlib import Path

from sm12x.bench.compare import reference_groups
from sm12x.bench.result import BenchResult
from sm12x.recipe.model import Recipe

INSTALL_HINT = (
    "pip install 'sm12x[bench]' (or pip install matplotlib), then `sm12x bench --report "
    "RESULT.json` draws it"
)


def matplotlib_missing() -> str | None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"matplotlib is not installed: {INSTALL_HINT}"
    return None


def write_chart(result: BenchResult, recipe: Recipe, path: Path) -> str | None:
    """Write the PNG; returns None, or why no chart was written."""
    missing = matplotlib_missing()
    if missing:
        return missing
    import matplotlib.pyplot as plt

    fig = draw(result, recipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return None


def draw(result: BenchResult, recipe: Recipe):
    """The chart as a matplotlib Figure (matplotlib must be installed)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    ok_runs = [r for r in result.runs if r.status != "failed"]
    failed = [r.concurrency for r in result.runs if r.status == "failed"]
    partial = [r for r in result.runs if r.status == "partial"]
    fig, (ax_tps, ax_lat) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=100, sharex=True)
    env = result.environment
    gpus = f"{len(env.gpus)}x {env.gpus[0]}" if env.gpus else "GPUs unknown"
    fig.suptitle(
        f"sm12x bench: {recipe.name} ({gpus}, sglang {env.sglang_version or '?'}), "
        f"{result.workload.input_len} in / {result.workload.output_len} out",
        fontsize=11,
    )

    xs = [r.concurrency for r in ok_runs]
    ax_tps.plot(
        xs, [r.metrics.output_tokens_per_s for r in ok_runs], "o-", color="C0", lw=2,
        label="measured", zorder=3,
    )  # fmt: skip
    for i, refs in enumerate(reference_groups(recipe).values()):
        color = f"C{i % 8 + 1}"
        comparable = refs[0].comparable
        label = _short(refs[0].source) + ("" if comparable else " (context)")
        refs = sorted(refs, key=lambda r: r.concurrency)
        if len(refs) > 1:
            ax_tps.plot(
                [r.concurrency for r in refs],
                [r.output_tokens_per_s for r in refs],
                ":",
                color=color,
                lw=1,
                zorder=2,
            )
        ax_tps.scatter(
            [r.concurrency for r in refs], [r.output_tokens_per_s for r in refs], marker="s",
            s=60, facecolors=color if comparable else "none", edgecolors=color, label=label,
            zorder=4,
        )  # fmt: skip
        for ref in refs:
            if ref.output_tokens_per_s_max:
                ax_tps.vlines(
                    ref.concurrency, ref.output_tokens_per_s, ref.output_tokens_per_s_max,
                    colors=color, lw=2, zorder=2,
                )  # fmt: skip
    if partial:
        ax_tps.scatter(
            [r.concurrency for r in partial],
            [r.metrics.output_tokens_per_s for r in partial],
            s=220,
            facecolors="none",
            edgecolors="orange",
            linewidths=2,
            zorder=5,
            label="partial run (some requests failed)",
        )
    ax_tps.set_ylabel("output tokens/s")
    ax_tps.set_ylim(bottom=0)

    for metric, style, label in (
        ("mean_itl_ms", "o-", "mean ITL"),
        ("p99_itl_ms", "o--", "p99 ITL"),
        ("mean_ttft_ms", "s:", "mean TTFT"),
    ):
        points = [(r.concurrency, getattr(r.metrics, metric)) for r in ok_runs]
        points = [(x, y) for x, y in points if y]
        if points:
            ax_lat.plot(*zip(*points), style, lw=2, label=f"{label} (measured)")
    itl_refs = [r for r in recipe.references if r.mean_itl_ms]
    if itl_refs:
        ax_lat.scatter(
            [r.concurrency for r in itl_refs], [r.mean_itl_ms for r in itl_refs], marker="s",
            s=60, facecolors=["C0" if r.comparable else "none" for r in itl_refs],
            edgecolors="C0", label="mean ITL, references", zorder=4,
        )  # fmt: skip
    ax_lat.set_ylabel("latency (ms, log scale)")
    if any(line.get_ydata().size for line in ax_lat.get_lines()) or itl_refs:
        ax_lat.set_yscale("log")

    ticks = sorted(
        {r.concurrency for r in result.runs} | {r.concurrency for r in recipe.references}
    )
    for ax in (ax_tps, ax_lat):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks or [1])
        ax.set_xticklabels([str(t) for t in ticks] or ["1"])
        ax.set_xlabel("concurrency (--max-concurrency)")
        ax.grid(True, which="both", alpha=0.3)
        for c in failed:
            ax.plot(
                [c],
                [0.02],
                marker="x",
                color="red",
                ms=12,
                mew=3,
                clip_on=False,
                transform=ax.get_xaxis_transform(),
                zorder=5,
            )
            ax.annotate(
                "failed",
                (c, 0.05),
                xycoords=("data", "axes fraction"),
                color="red",
                ha="center",
                fontsize=8,
            )
    note = "hollow markers: published figures of another configuration (context, not comparable)"
    fig.text(0.5, 0.01, note, ha="center", fontsize=8, color="0.35")
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    for ax in (ax_tps, ax_lat):
        place_legend(ax, measured_points(ax))
    return fig


# Inside corners and edges first; outside, right of the axes, when every one covers a point.
LOCATIONS = ("upper left", "upper right", "lower right", "lower left", "center left",
             "center right", "upper center", "lower center")  # fmt: skip
MARGIN_PX = 8.0  # a marker's radius and a little: a point at the legend's edge is hidden too


def measured_points(ax) -> list[tuple[float, float]]:
    """The measured points of an axes, in display pixels (every line drawn with a
    marker; the references are scatter collections and may sit under the legend)."""
    points = []
    for line in ax.get_lines():
        if line.get_marker() in (None, "None", "", " ") or line.get_transform() != ax.transData:
            continue
        xy = list(zip(line.get_xdata(), line.get_ydata()))
        points += [tuple(p) for p in ax.transData.transform(xy)] if xy else []
    return points


def covered(box, points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points inside a display-pixel box grown by MARGIN_PX."""
    return [
        (x, y)
        for x, y in points
        if box.x0 - MARGIN_PX <= x <= box.x1 + MARGIN_PX
        and box.y0 - MARGIN_PX <= y <= box.y1 + MARGIN_PX
    ]


def place_legend(ax, points: list[tuple[float, float]]):
    """The legend where it covers no measured point."""
    renderer = ax.figure.canvas.get_renderer()
    for _headroom in range(4):
        for loc in LOCATIONS:
            legend = ax.legend(fontsize=7, loc=loc)
            if not covered(legend.get_window_extent(renderer), points):
                return legend
        # No free place: raise the top of the y axis, so the points sit lower.
        bottom, top = ax.get_ylim()
        log = ax.get_yscale() == "log"
        ax.set_ylim(bottom, top * (top / bottom) ** 0.5 if log else bottom + (top - bottom) * 1.5)
        points = measured_points(ax)
    return ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _short(source: str, width: int = 38) -> str:
    text = source.split(",")[0].strip()
    return text if len(text) <= width else text[: width - 1] + "…"
