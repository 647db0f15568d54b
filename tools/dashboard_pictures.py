"""Pictures of the Grafana dashboards, drawn with matplotlib from the panels'
own queries over a recorded run (no Grafana renderer runs here).

    python -m tools.dashboard_pictures --record   a run against the stand-in
        through Debian's Prometheus; writes docs/monitoring/series.json
    python -m tools.regen --only dashboard-pictures   the PNGs from it

The recording: two stand-ins (`python -m sm12x.mock`), one healthy on two DP
ranks behind the real sglang-router, labelled rtx-pro-6000-tp4, one under
`--fault low-accept` labelled auto; Prometheus scraping and evaluating the
shipped rules every second; a streamed load stepping 2, 8 and 16 concurrent
requests; then every panel target's query over the run (`query_range`, a
2 s step; `$rig` as every rig, `$__rate_interval` as 15s), its times made
relative to the start and its values rounded to 4 significant figures.

The regen entry rebuilds series.json from the dashboards' current queries
and the recording (a target whose query changed since the recording comes out
as `"series": null` with the command to record again, so `--check` fails), and
draws one PNG per dashboard from it (Agg, no metadata): `--check` compares the
series, never PNG bytes.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "monitoring"
SERIES = DOCS / "series.json"
DASHBOARDS = ROOT / "deploy" / "monitoring" / "grafana" / "dashboards"
RATE_WINDOW = "15s"
STEP_S = 2
RECORD = "python -m tools.dashboard_pictures --record"
PAIR = re.compile(r"\[\s+(-?[0-9.e+-]+),\s+(-?[0-9.e+-]+|null)\s+\]")


# The rigs the recording labels its two stand-ins with: the `rig` variable's choice.
RIGS = ("rtx-pro-6000-tp4", "auto")


def concrete(expr: str) -> str:
    """A panel's query as Grafana sends it here: the recorded rigs, a rate window."""
    rigs = "|".join(RIGS)
    return expr.replace('rig=~"$rig"', f'rig=~"{rigs}"').replace("$__rate_interval", RATE_WINDOW)


def boards() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))]


def _round(v: float) -> float | None:
    if not math.isfinite(v):
        return None
    return float(f"{v:.4g}")


# --- the series file --------------------------------------------------------------


def series_text(recorded: dict | None = None) -> str:
    """series.json for the dashboards as they are now, from the recording."""
    if recorded is None:
        recorded = json.loads(SERIES.read_text()) if SERIES.is_file() else {"queries": {}}
    by_query = recorded.get("queries", {})
    out: dict = {"about": recorded.get("about", ""), "queries": {}}
    for board in boards():
        for panel in board["panels"]:
            for target in panel["targets"]:
                q = concrete(target["expr"])
                out["queries"][q] = by_query.get(q, {"series": None, "record": RECORD})
    text = json.dumps(out, indent=1, sort_keys=True)
    return PAIR.sub(r"[\1, \2]", text) + "\n"  # a sample per line, not four


# --- the pictures -------------------------------------------------------------------


def _legend(fmt: str, labels: dict) -> str:
    """Grafana's legend format with the series' labels; a word before a label the
    series lacks goes with it ("dp {{dp_rank}}" on a rig without DP)."""
    text = fmt
    for key, value in labels.items():
        text = text.replace("{{" + key + "}}", value)
    return re.sub(r"\s*\w*\s*\{\{\w+\}\}", "", text).strip() or "value"


def _unit(ax, unit: str | None) -> None:
    from matplotlib.ticker import FuncFormatter, PercentFormatter

    if unit == "percentunit":
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    elif unit == "s":
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v * 1000:g} ms"))


def picture(board: dict, queries: dict) -> bytes:
    """One dashboard's panels laid out as its gridPos places them, as PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = board["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) // 9
    fig = plt.figure(figsize=(11, 3.1 * rows), dpi=72)
    fig.suptitle(board["title"], fontsize=12, x=0.01, ha="left")
    grid = fig.add_gridspec(rows, 2, hspace=0.55, wspace=0.18)
    for panel in panels:
        pos = panel["gridPos"]
        ax = fig.add_subplot(grid[pos["y"] // 9, pos["x"] // 12])
        ax.set_title(panel["title"], fontsize=9, loc="left")
        ax.tick_params(labelsize=7)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        drawn = 0
        for target in panel["targets"]:
            found = queries.get(concrete(target["expr"]), {}).get("series")
            for s in found or []:
                xs = [p[0] for p in s["values"] if p[1] is not None]
                ys = [p[1] for p in s["values"] if p[1] is not None]
                label = _legend(target.get("legendFormat", ""), s["labels"])
                if panel["type"] == "stat":
                    ax.text(
                        0.5, 0.5 - 0.25 * drawn, f"{label}: {ys[-1]:g}", ha="center", fontsize=14
                    )
                    ax.set_axis_off()
                else:
                    style = "--" if "floor" in label or "max" in label else "-"
                    ax.plot(xs, ys, style, linewidth=1.1, label=label)
                drawn += 1
        if panel["type"] != "stat":
            _unit(ax, unit)
            ax.set_xlabel("seconds into the recorded run", fontsize=7)
            ax.grid(alpha=0.3)
            if drawn:
                ax.legend(fontsize=6, loc="upper left", ncol=2, frameon=False)
            else:
                ax.text(0.5, 0.5, "no data", ha="center", transform=ax.transAxes)
    out = io.BytesIO()
    fig.savefig(out, format="png", metadata={"Software": None})
    plt.close(fig)
    return out.getvalue()


def picture_paths() -> list[Path]:
    return [DOCS / f"{b['uid']}.png" for b in boards()]


def pictures() -> dict[Path, bytes]:
    queries = json.loads(series_text())["queries"]
    return {DOCS / f"{b['uid']}.png": picture(b, queries) for b in boards()}


# --- the recording ------------------------------------------------------------------


def record(seconds_per_step: float) -> dict:
    import shutil
    import tempfile
    import time

    import httpx
    import yaml

    from tests.integration.test_monitoring_stack import Prometheus, laid_out
    from tests.support.router import Backend, Router, load, wait_until

    started: list = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        try:
            healthy = Backend(args=("--dp-size", "2")).start()
            faulty = Backend(args=("--fault", "low-accept")).start()
            started += [healthy, faulty]
            healthy.wait_ready()
            faulty.wait_ready()
            router = Router([healthy.url]).start()
            started.append(router)
            router.wait_ready(1)
            targets = {
                "sglang.yml": yaml.safe_dump(
                    [
                        {
                            "targets": [f"127.0.0.1:{healthy.port}"],
                            "labels": {"rig": "rtx-pro-6000-tp4"},
                        },
                        {"targets": [f"127.0.0.1:{faulty.port}"], "labels": {"rig": "auto"}},
                    ]
                ),
                "router.yml": yaml.safe_dump([{"targets": [f"127.0.0.1:{router.metrics_port}"]}]),
            }
            etc = laid_out(tmp, targets)
            cfg = yaml.safe_load((etc / "prometheus.yml").read_text())
            cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
            (etc / "prometheus.yml").write_text(yaml.safe_dump(cfg))
            prom = Prometheus(etc, tmp / "data", tmp / "prometheus.log").start()
            started.append(prom)
            wait_until(
                lambda: httpx.get(prom.url + "/-/ready", timeout=2).status_code == 200,
                60,
                "Prometheus ready",
            )
            begin = time.time()
            time.sleep(5)
            for concurrency in (2, 8, 16):
                load(router.url, concurrency, seconds=seconds_per_step, max_tokens=64)
                load(
                    faulty.url,
                    max(1, concurrency // 4),
                    seconds=seconds_per_step / 3,
                    max_tokens=32,
                )
            time.sleep(5)
            end = time.time()
            queries = {}
            for board in boards():
                for panel in board["panels"]:
                    for target in panel["targets"]:
                        q = concrete(target["expr"])
                        body = httpx.get(
                            prom.url + "/api/v1/query_range",
                            params={"query": q, "start": begin, "end": end, "step": STEP_S},
                            timeout=30,
                        ).json()
                        assert body["status"] == "success", (q, body)
                        queries[q] = {
                            "series": [
                                {
                                    "labels": {
                                        k: v
                                        for k, v in sorted(r["metric"].items())
                                        if k != "__name__"
                                    },
                                    "values": [
                                        [round(float(t) - begin), _round(float(v))]
                                        for t, v in r["values"]
                                    ],
                                }
                                for r in sorted(
                                    body["data"]["result"],
                                    key=lambda r: sorted(r["metric"].items()),
                                )
                            ]
                        }
        finally:
            for thing in reversed(started):
                thing.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    about = (
        f"Recorded by `{RECORD} --seconds {seconds_per_step:g}`: the stand-in through "
        f"Debian's Prometheus, {round(end - begin)} s, query_range step {STEP_S} s; see "
        "tools/dashboard_pictures.py."
    )
    return {"about": about, "queries": queries}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.dashboard_pictures", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--record", action="store_true", help="record a run (minutes), write series.json"
    )
    parser.add_argument(
        "--seconds", type=float, default=30.0, help="seconds of load per step (default 30)"
    )
    args = parser.parse_args(argv)
    if not args.record:
        parser.error("say --record (the pictures come from `python -m tools.regen`)")
    recorded = record(args.seconds)
    DOCS.mkdir(parents=True, exist_ok=True)
    SERIES.write_text(series_text(recorded))
    print(
        f"wrote {SERIES.relative_to(ROOT)}; now `python -m tools.regen --only dashboard-pictures`"
    )
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main())
