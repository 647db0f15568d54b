"""The Grafana dashboards of the `monitoring` profile, one per question an
operator asks, built in code with grafana-foundation-sdk (Grafana Labs' own
builders, generated from Grafana's schema for the pinned Grafana line; chosen
over grafanalib, whose last release is from January 2024).

tools/regen.py writes each to deploy/monitoring/grafana/dashboards/<uid>.json;
Grafana provisions them from there (deploy/monitoring/grafana/provisioning/).
Every query names only metrics in deploy/monitoring/metrics.json (read from
sglang's and sglang-router's code) or recorded by the rules
(sm12x.deploy.monitoring); `PANELS` is also what the suite evaluates against a
real Prometheus scraping the stand-in server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sm12x.deploy import monitoring

FOLDER = monitoring.FOLDER / "grafana" / "dashboards"
DATASOURCE_UID = "sm12x-prometheus"
R = 'rig=~"$rig"'
RATE = "[$__rate_interval]"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    question: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def _q(expr: str, legend: str = "{{rig}}") -> Query:
    return Query(expr, legend)


def _quantiles(metric: str) -> tuple[Query, ...]:
    return tuple(
        _q(
            f"histogram_quantile({q}, sum by (le, rig) (rate({metric}_bucket{{{R}}}{RATE})))",
            f"p{int(q * 100)} {{{{rig}}}}",
        )
        for q in (0.5, 0.95, 0.99)
    )


def _share_5xx() -> str:
    errors = f'sum by (rig) (rate(sglang:http_responses_total{{{R}, status_code=~"5.."}}{RATE}))'
    total = f"sum by (rig) (rate(sglang:http_responses_total{{{R}}}{RATE}))"
    # No 5xx series yet is a share of 0, not an empty panel.
    return f"({errors} or {total} * 0) / {total}"


BOARDS: tuple[Board, ...] = (
    Board(
        "sm12x-serving",
        "sm12x / Is it serving",
        "Is the rig up, answering, and without server errors?",
        (
            Panel(
                "Scrape up",
                "1 while Prometheus reads the rig's /metrics (RigDown fires after 2 minutes of 0).",
                (_q(f'up{{job="sglang", {R}}}', "{{rig}} {{instance}}"),),
                kind="stat",
            ),
            Panel(
                "5xx share of responses",
                "Server errors over all HTTP responses (ServerErrors fires above 5%).",
                (_q(_share_5xx()),),
                unit="percentunit",
            ),
            Panel(
                "Responses by status",
                "HTTP responses per second by status code (sglang's HTTP middleware).",
                (
                    _q(
                        f"sum by (rig, status_code) (rate(sglang:http_responses_total{{{R}}}{RATE}))",
                        "{{rig}} {{status_code}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "Finished requests",
                "Requests finished per second.",
                (_q(f"sum by (rig) (rate(sglang:num_requests_total{{{R}}}{RATE}))"),),
                unit="reqps",
            ),
        ),
    ),
    Board(
        "sm12x-speed",
        "sm12x / How fast",
        "How many tokens per second, and how long does a user wait?",
        (
            Panel(
                "Output tokens/s",
                "Generated tokens per second (the figure `sm12x bench` reports).",
                (_q(f"sum by (rig) (rate(sglang:generation_tokens_total{{{R}}}{RATE}))"),),
            ),
            Panel(
                "Input tokens/s",
                "Prompt tokens prefilled per second.",
                (_q(f"sum by (rig) (rate(sglang:prompt_tokens_total{{{R}}}{RATE}))"),),
            ),
            Panel(
                "Generation throughput per DP rank",
                "sglang's own last-interval figure per scheduler (one series per DP rank "
                "under DP attention).",
                (_q(f"sglang:gen_throughput{{{R}}}", "{{rig}} dp {{dp_rank}}"),),
            ),
            Panel(
                "Time to first token",
                "Quantiles of the time to the first token.",
                _quantiles("sglang:time_to_first_token_seconds"),
                unit="s",
            ),
            Panel(
                "Inter-token latency",
                "Quantiles of the time between tokens of a stream.",
                _quantiles("sglang:inter_token_latency_seconds"),
                unit="s",
            ),
            Panel(
                "End-to-end latency",
                "Quantiles of a request's whole time.",
                _quantiles("sglang:e2e_request_latency_seconds"),
                unit="s",
            ),
        ),
    ),
    Board(
        "sm12x-dspark",
        "sm12x / Is DSPARK paying",
        "Does the draft model still earn its keep, against the recipe's floor?",
        (
            Panel(
                "Acceptance length against the recipe's floor",
                "Accepted tokens per decode step (the bonus token counts) per DP rank, and the "
                "recipe's verify.min_accept_length. Below the floor while generating is "
                "DsparkAcceptanceCollapse: run `sm12x verify`.",
                (
                    _q(f"sglang:spec_accept_length{{{R}}}", "{{rig}} dp {{dp_rank}}"),
                    _q(f"sm12x:recipe_min_accept_length{{{R}}}", "{{rig}} floor"),
                ),
            ),
            Panel(
                "Acceptance rate",
                "The share of drafted tokens the target model accepts.",
                (_q(f"sglang:spec_accept_rate{{{R}}}", "{{rig}} dp {{dp_rank}}"),),
                unit="percentunit",
            ),
            Panel(
                "Verify width",
                "Draft tokens verified per step (speculative_num_draft_tokens in use).",
                (_q(f"sglang:spec_num_draft_tokens{{{R}}}", "{{rig}} dp {{dp_rank}}"),),
            ),
        ),
    ),
    Board(
        "sm12x-capacity",
        "sm12x / Is it full",
        "How close is the rig to its recipe's limits?",
        (
            Panel(
                "Running requests against the recipe's max",
                "Requests running over every DP rank, and the recipe's effective "
                "--max-running-requests (QueueSaturated fires near it with a queue).",
                (
                    _q(f"sum by (rig) (sglang:num_running_reqs{{{R}}})", "{{rig}} running"),
                    _q(f"sm12x:recipe_max_running_requests{{{R}}}", "{{rig}} max"),
                ),
            ),
            Panel(
                "Queued requests",
                "Requests waiting for a slot.",
                (_q(f"sum by (rig) (sglang:num_queue_reqs{{{R}}})"),),
            ),
            Panel(
                "KV cache token usage per DP rank",
                "The share of the KV pool in use.",
                (_q(f"sglang:token_usage{{{R}}}", "{{rig}} dp {{dp_rank}}"),),
                unit="percentunit",
            ),
            Panel(
                "Full-rank share",
                "The share of DP ranks whose KV pool is at least 95% used: the full-load "
                "regime where padding and retraction start.",
                (_q(f"avg by (rig) (sglang:token_usage{{{R}}} >= bool 0.95)"),),
                unit="percentunit",
            ),
        ),
    ),
    Board(
        "sm12x-router",
        "sm12x / The router's view",
        "How does sglang-router spread requests over the rigs, and are they healthy?",
        (
            Panel(
                "Worker health",
                "1 healthy, 0 unhealthy, per worker (the router's health checks).",
                (_q("smg_worker_health", "{{worker}}"),),
            ),
            Panel(
                "Running requests per worker",
                "Requests the router has in flight on each rig.",
                (_q("smg_worker_requests_active", "{{worker}}"),),
            ),
            Panel(
                "Routed requests/s",
                "Requests the router accepted per second.",
                (_q(f"sum(rate(smg_router_requests_total{RATE}))", "routed"),),
                unit="reqps",
            ),
            Panel(
                "Router HTTP responses by status",
                "Responses the router sent per second, by status code.",
                (
                    _q(
                        f"sum by (status_code) (rate(smg_http_responses_total{RATE}))",
                        "{{status_code}}",
                    ),
                ),
                unit="reqps",
            ),
        ),
    ),
)


def build(board: Board) -> dict:
    """The dashboard's JSON model, through grafana-foundation-sdk's builders."""
    from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh

    source = DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)
    rigs = (
        dashboard.QueryVariable("rig")
        .label("Rig")
        .datasource(source)
        .query('label_values(up{job="sglang"}, rig)')
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    builder = (
        dashboard.Dashboard(board.title)
        .uid(board.uid)
        .description(board.question)
        .tags(["sm12x", "generated"])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .readonly()
        .with_variable(rigs)
    )
    for panel in board.panels:
        made = (stat.Panel() if panel.kind == "stat" else timeseries.Panel()).title(panel.title)
        made = made.description(panel.description).unit(panel.unit).datasource(source).span(12)
        for ref, query in zip("ABCDEFGH", panel.queries, strict=False):
            made = made.with_target(
                prometheus.Dataquery().expr(query.expr).legend_format(query.legend).ref_id(ref)
            )
        builder = builder.with_panel(made)
    return json.loads(JSONEncoder(sort_keys=True, indent=2).encode(builder.build()))


def queries() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, expr) for every query of every panel."""
    return [(b.uid, p.title, q.expr) for b in BOARDS for p in b.panels for q in p.queries]


def tree() -> dict[Path, str]:
    out = {}
    for board in BOARDS:
        text = json.dumps(build(board), indent=2, sort_keys=True) + "\n"
        out[FOLDER / f"{board.uid}.json"] = text
    monitoring.check_names(
        "\n".join(expr for _, _, expr in queries()), recorded=monitoring.recorded_names()
    )
    return out
