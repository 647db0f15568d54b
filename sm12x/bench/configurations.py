"""`sm12x bench --compare-configurations`: a rig's configurations side by side.

The rig's baseline and throughput recipes (sm12x.launch.configuration finds
them among the recipes), measured one after the other in the same run with
the same workload: each is an ordinary bench run (its own result.json, chart
and logs under OUT/<kind>/), against its own server:

- attached: --url-baseline / --url-throughput (or --url for a configuration
  whose URL is not given: one server restarted between the runs is not
  supported; give each its URL, or let bench boot them);
- booted (--boot): in turn, `SM12X_CONFIGURATION=<kind> docker compose
  --profile <rig> up -d` (compose passes SM12X_CONFIGURATION to the rig's
  service, so the same service runs either configuration), health awaited as
  `verify --boot` does, the benchmark, then `down`; or --boot-command, with
  `{configuration}` replaced by the kind.

Then OUT/comparison.json, a table and OUT/comparison.png: output tokens/s of
each configuration per concurrency, the ratio, and each recipe's published
figures marked by the configuration they are comparable to (the recipe's
`comparable`; the others are context).
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from sm12x.bench.chart import matplotlib_missing
from sm12x.bench.result import BenchResult
from sm12x.errors import UserError
from sm12x.launch.configuration import configurations
from sm12x.recipe import Recipe, load_recipe
from sm12x.recipe.tracks import track_refusal
from sm12x.settings import Loaded

KINDS = ("baseline", "throughput")
BOOT_TIMEOUT_S = 5400.0


@dataclass
class Leg:
    kind: str
    recipe: Recipe
    url: str | None
    result: BenchResult | None = None
    exit_code: int | None = None
    problem: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "comparing configurations (--compare-configurations)",
        "the rig's baseline and throughput configurations, one after the other, same workload",
    )
    group.add_argument(
        "--compare-configurations",
        action="store_true",
        help="benchmark each configuration of the rig (SM12X_RECIPE) in turn and "
        "compare them: OUT/comparison.json, OUT/comparison.png",
    )
    group.add_argument("--url-baseline", metavar="URL", help="the baseline's server")
    group.add_argument("--url-throughput", metavar="URL", help="the throughput configuration's")
    group.add_argument(
        "--boot",
        action="store_true",
        help="boot each configuration in turn (compose: SM12X_CONFIGURATION=<kind> "
        "docker compose --profile <rig> up -d), then take it down",
    )
    group.add_argument(
        "--boot-command",
        metavar="CMD",
        help="boot with this command instead; {configuration} is replaced by baseline / throughput",
    )
    group.add_argument("--compose-file")


def legs_for(named: Recipe, args: argparse.Namespace) -> list[Leg]:
    found = configurations(named.rig)
    missing = [k for k in KINDS if k not in found]
    if missing:
        raise UserError(
            f"rig {named.rig} has no {' and no '.join(missing)} configuration "
            f"(its recipes: {', '.join(r.name for r in found.values())}): there is "
            "nothing to compare"
        )
    urls = {"baseline": args.url_baseline, "throughput": args.url_throughput}
    if not (args.boot or args.boot_command):
        given = [k for k in KINDS if urls[k]]
        if len(given) < 2 and not args.url:
            raise UserError(
                "--compare-configurations needs a server per configuration: "
                "--url-baseline URL and --url-throughput URL, or --boot to start "
                "each in turn"
            )
        if not given and args.url:
            raise UserError(
                "one --url cannot be both configurations: give --url-baseline and "
                "--url-throughput, or --boot"
            )
    return [Leg(k, found[k], urls[k] or args.url) for k in KINDS]


def boot_server(leg: Leg, args: argparse.Namespace, loaded: Loaded):
    from verify.boot import Server

    if args.boot_command:
        return Server.command(args.boot_command.replace("{configuration}", leg.kind))
    from sm12x.deploy import compose

    service = compose.service(None, leg.recipe.rig, loaded, args.compose_file)
    setting = f"SM12X_CONFIGURATION={leg.kind}"
    return Server(
        up=["env", setting, *service.up],
        logs=["env", setting, *service.logs],
        down=["env", setting, *service.down],
    )


def run_compare(
    args: argparse.Namespace,
    loaded: Loaded,
    console: Console,
    err: Console,
    run_one: Callable[[argparse.Namespace], int],
    named: Recipe,
) -> int:
    legs = legs_for(named, args)
    if args.boot:
        # Booted here, each leg runs on SM12X_TRACK's image: a configuration its
        # track cannot run is refused now, once, not by the launcher minutes in.
        for leg in legs:
            problem = track_refusal(leg.recipe, loaded.settings.track_name)
            if problem:
                raise UserError(f"--boot {leg.kind}: {problem}")
    out = (args.out or Path("bench-results") / f"{named.rig}-configurations").resolve()
    base_default = loaded.settings.base_url()
    for leg in legs:
        err.print(
            f"sm12x bench: configuration {leg.kind}: {leg.recipe.name}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        leg_args = copy.copy(args)
        leg_args.recipe, leg_args.out = leg.recipe.name, out / leg.kind
        leg_args.url = leg.url or base_default
        server = None
        try:
            if args.boot or args.boot_command:
                from verify.boot import BootFailure, boot

                server = boot_server(leg, args, loaded)
                try:
                    boot(server, leg_args.url, BOOT_TIMEOUT_S, err)
                except BootFailure as exc:
                    leg.problem = f"did not boot: {exc.problem} ({exc.fix})"
                    continue
            leg.exit_code = run_one(leg_args)
        except UserError as exc:
            leg.problem = exc.message
        finally:
            if server is not None:
                server.teardown()
        path = out / leg.kind / "result.json"
        if path.is_file():
            leg.result = BenchResult.model_validate_json(path.read_text(encoding="utf-8"))
    return report(legs, out, console)


def rows(legs: list[Leg]) -> list[dict]:
    """Per concurrency: each configuration's output tok/s and its comparable figures."""
    by_kind = {leg.kind: leg for leg in legs}
    concurrencies = sorted(
        {run.concurrency for leg in legs if leg.result for run in leg.result.runs}
    )
    table = []
    for c in concurrencies:
        row: dict = {"concurrency": c}
        for kind, leg in by_kind.items():
            run = (
                next((r for r in leg.result.runs if r.concurrency == c), None)
                if leg.result
                else None
            )
            row[kind] = run.metrics.output_tokens_per_s if run and run.status == "ok" else None
            row[f"{kind}_published"] = [
                {"output_tokens_per_s": ref.output_tokens_per_s, "source": ref.source}
                for ref in leg.recipe.comparable_references
                if ref.concurrency == c
            ]
        base, fast = row.get("baseline"), row.get("throughput")
        row["ratio"] = fast / base if base and fast else None
        table.append(row)
    return table


def report(legs: list[Leg], out: Path, console: Console) -> int:
    data = rows(legs)
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "schema": "sm12x-bench-configurations/1",
        "configurations": {
            leg.kind: {
                "recipe": leg.recipe.name,
                "exit_code": leg.exit_code,
                "problem": leg.problem,
                "result": f"{leg.kind}/result.json" if leg.result else None,
            }
            for leg in legs
        },
        "rows": data,
    }
    (out / "comparison.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    table = Table(title="configurations compared: output tokens/s", box=box.SIMPLE_HEAVY)
    for name in ("C", "configuration", "measured", "published*", "vs baseline"):
        table.add_column(name, justify="left" if name == "configuration" else "right")
    for row in data:
        for leg in legs:
            value = row[leg.kind]
            published = ", ".join(
                f"{p['output_tokens_per_s']:,.0f}" for p in row[f"{leg.kind}_published"]
            )
            versus = f"{row['ratio']:.2f}x" if leg.kind != "baseline" and row["ratio"] else ""
            table.add_row(
                str(row["concurrency"]),
                f"{leg.kind} ({leg.recipe.name})",
                "failed" if value is None else f"{value:,.1f}",
                published or "-",
                versus,
            )
    console.print(table)
    console.print(
        "* published figures each recipe marks comparable to that configuration "
        "(recipes' references, `comparable: true`)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    for leg in legs:
        if leg.problem:
            console.print(
                f"{leg.kind}: {leg.problem}", highlight=False, markup=False, soft_wrap=True
            )
    note = write_chart(legs, data, out / "comparison.png")
    console.print(
        f"comparison: {out / 'comparison.json'}; chart: {note}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    ok = all(leg.exit_code == 0 and leg.result is not None for leg in legs)
    return 0 if ok else 1


def write_chart(legs: list[Leg], data: list[dict], path: Path) -> str:
    """Bars per configuration and concurrency, each recipe's comparable published
    figures as markers in its configuration's colour; returns where it went or why not."""
    missing = matplotlib_missing()
    if missing:
        return f"skipped, {missing}"
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=100)
    width = 0.8 / max(1, len(legs))
    for i, leg in enumerate(legs):
        color = f"C{i}"
        xs = [n + (i - (len(legs) - 1) / 2) * width for n in range(len(data))]
        values = [row[leg.kind] or 0 for row in data]
        ax.bar(xs, values, width, color=color, label=f"{leg.kind}: {leg.recipe.name} (measured)")
        for x, row in zip(xs, data):
            published = row[f"{leg.kind}_published"]
            if published:
                ax.scatter(
                    [x] * len(published),
                    [p["output_tokens_per_s"] for p in published],
                    marker="s",
                    s=60,
                    color=color,
                    edgecolors="black",
                    zorder=4,
                )
        if leg.recipe.comparable_references:
            ax.scatter(
                [],
                [],
                marker="s",
                s=60,
                color=color,
                edgecolors="black",
                label=f"published, comparable to {leg.kind}",
            )
    ax.set_xticks(range(len(data)))
    ax.set_xticklabels([str(row["concurrency"]) for row in data])
    ax.set_xlabel("concurrency (--max-concurrency)")
    ax.set_ylabel("output tokens/s")
    ax.set_title("sm12x bench: " + " vs ".join(leg.recipe.name for leg in legs), fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return str(path)


def named_recipe(choice: str) -> Recipe:
    if choice == "auto":
        raise UserError(
            "--compare-configurations needs the rig: --recipe NAME (e.g. rtx-pro-6000-tp4)"
        )
    return load_recipe(choice)
