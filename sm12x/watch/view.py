"""The live view: one rich table per concern, at most 80 columns wide (an SSH
terminal's), drawn from Watch.snapshot()."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

WIDTH = 80


def _num(value: float | None, fmt: str = "{:.1f}", none: str = "-") -> str:
    return none if value is None else fmt.format(value)


def _trend(delta: float | None) -> str:
    if delta is None:
        return "trend: not yet"
    word = "steady" if abs(delta) < 0.05 else ("rising" if delta > 0 else "falling")
    return f"trend 5m: {word} ({delta:+.2f})"


def _ranks(names: list[str]) -> str:
    """(DP rank 3), (DP ranks 0-7), (DP ranks 1, 4) or nothing (the whole rig)."""
    names = [n for n in names if n]
    if not names:
        return ""
    if len(names) == 1:
        return f" (DP rank {names[0]})"
    numbers = sorted(int(n) for n in names if n.isdigit())
    if len(numbers) == len(names) and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f" (DP ranks {numbers[0]}-{numbers[-1]})"
    return f" (DP ranks {', '.join(sorted(names))})"


def render(snap: dict, url: str) -> Group:
    state = "up" if snap["up"] else f"DOWN: {snap['error']}"
    head = Text(f"sm12x watch {url}  rig {snap['rig']}  {state}"[:WIDTH], style="bold")
    speed = Table.grid(padding=(0, 2))
    speed.add_row("output tok/s", _num(snap["output_tokens_per_s"]))
    accept = snap["accept_length"]
    floor = snap["min_accept_length"]
    below = accept is not None and accept < floor
    speed.add_row(
        "acceptance",
        Text(
            f"{_num(accept, '{:.2f}')} (floor {floor:g}); {_trend(snap['accept_trend_5m'])}",
            style="bold red" if below else "",
        ),
    )
    by_context = snap["accept_by_context"]
    if by_context:
        speed.add_row("  by context", "  ".join(f"{k} {v:.2f}" for k, v in by_context.items()))
    speed.add_row("", Text(snap["accept_by_context_note"], style="dim", overflow="fold"))

    ranks = Table(title=None, box=None, padding=(0, 1), show_edge=False)
    for col in ("DP rank", "running", "queued", "KV used", "accept", "mean ctx"):
        ranks.add_column(col, justify="right")
    for name, r in snap["ranks"].items():
        ranks.add_row(
            name,
            _num(r["running"], "{:.0f}"),
            _num(r["queued"], "{:.0f}"),
            _num(None if r["kv_usage"] is None else 100 * r["kv_usage"], "{:.0f}%"),
            _num(r["accept_length"], "{:.2f}"),
            _num(r["mean_context"], "{:.0f}"),
        )

    alerts = Table.grid(padding=(0, 2))
    grouped: dict[tuple[str, str], list[str]] = {}
    for a in snap["alerts"]:
        grouped.setdefault((a["state"], a["alert"]), []).append(a["rank"] or "")
    for (state, name), ranks_of in grouped.items():
        style = "bold red" if state == "firing" else "yellow"
        alerts.add_row(Text(state.upper(), style=style), f"{name}{_ranks(ranks_of)}")
    if not snap["alerts"]:
        alerts.add_row(Text("ok", style="green"), "no alert of the shipped rules")
    errors = Text(
        "\n".join(snap["recent_errors"]) or "no error response since watch started",
        overflow="fold",
    )
    return Group(
        head,
        speed,
        Text(""),
        ranks,
        Text(""),
        Text("alerts (the shipped rules, evaluated here)", style="bold"),
        alerts,
        Text("recent errors", style="bold"),
        errors,
    )
