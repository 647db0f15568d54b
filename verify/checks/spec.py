"""Speculative decoding really ran: the acceptance length the server measured.

Sources, first that answers: `/server_info`, `/get_server_info`
(`avg_spec_accept_length`, per DP rank under `internal_states`), then
`/metrics` (`sglang:spec_accept_length`). sglang-router answers
/get_server_info with its own fields and has neither /server_info nor
/metrics: then the check cannot run (not-run, never a pass) unless
--metrics-url points at a backend.
"""

from __future__ import annotations

import statistics

import httpx
from prometheus_client.parser import text_string_to_metric_families

from verify.context import Context
from verify.result import CheckSkipped, Evidence, Verdict

ACCEPT_METRICS = ("sglang:spec_accept_length", "sglang_spec_accept_length")
SPEC_FIX = (
    "launch with --speculative-algorithm DSPARK (the recipes do); the 0731 checkpoint "
    "carries its own draft"
)


def _targets(ctx: Context) -> tuple[str, list[str]]:
    url = ctx.options.metrics_url
    if url:
        if url.rstrip("/").endswith("/metrics"):
            return url.rstrip("/").removesuffix("/metrics"), [url]
        base = url.rstrip("/")
        return base, [base + "/metrics"]
    return ctx.endpoint.base_url.rstrip("/"), [ctx.endpoint.base_url.rstrip("/") + "/metrics"]


def _server_info(ctx: Context, base: str, ev: Evidence) -> dict | None:
    for path in ("/server_info", "/get_server_info"):
        try:
            r = ctx.http.get(base + path)
        except httpx.HTTPError as exc:
            ev.saw(f"GET {path}: {str(exc) or type(exc).__name__}")
            continue
        if r.status_code != 200:
            ev.saw(f"GET {path}: HTTP {r.status_code}")
            continue
        try:
            info = r.json()
        except ValueError:
            ev.saw(f"GET {path}: not JSON")
            continue
        if not isinstance(info, dict):
            continue
        if "router_manager" in info or "workers_count" in info:
            ev.saw(f"GET {path}: answered by sglang-router (its own fields, no backend figures)")
            continue
        ev.saw(f"GET {path}: speculative_algorithm={info.get('speculative_algorithm')!r}")
        return info
    return None


def _accept_from_info(info: dict) -> float | None:
    values = [
        s.get("avg_spec_accept_length")
        for s in info.get("internal_states") or []
        if isinstance(s, dict)
    ]
    values.append(info.get("avg_spec_accept_length"))
    numbers = [float(v) for v in values if isinstance(v, (int, float))]
    return statistics.fmean(numbers) if numbers else None


def _accept_from_metrics(ctx: Context, urls: list[str], ev: Evidence) -> float | None:
    for url in urls:
        try:
            r = ctx.http.get(url)
        except httpx.HTTPError as exc:
            ev.saw(f"GET {url}: {str(exc) or type(exc).__name__}")
            continue
        if r.status_code != 200:
            ev.saw(f"GET {url}: HTTP {r.status_code}")
            continue
        values = []
        try:
            for family in text_string_to_metric_families(r.text):
                for sample in family.samples:
                    if sample.name in ACCEPT_METRICS:
                        values.append(sample.value)
        except ValueError as exc:
            ev.saw(f"GET {url}: not Prometheus text ({exc})")
            continue
        if values:
            ev.saw(f"{url}: sglang:spec_accept_length {values}")
            return statistics.fmean(values)
        ev.saw(f"{url}: no spec_accept_length metric (is --enable-metrics set?)")
    return None


def spec(ctx: Context, ev: Evidence) -> None:
    floor = ctx.options.min_accept_length
    base, metric_urls = _targets(ctx)
    info = _server_info(ctx, base, ev)
    value = _accept_from_info(info) if info else None
    source = "server info"
    if value is None:
        value, source = _accept_from_metrics(ctx, metric_urls, ev), "/metrics"
    if info is not None and info.get("speculative_algorithm") in (None, "", "NONE") and not value:
        ev.fail(
            "speculative decoding is off (speculative_algorithm is null)",
            "the server was launched without DSPARK",
            SPEC_FIX,
        )
    if value is None:
        if info is None:
            raise CheckSkipped(
                "no backend figures readable here (a router in front?): pass --metrics-url "
                "http://BACKEND:PORT to read a backend's /server_info and /metrics, or --skip spec",
                Verdict.NOT_RUN,
            )
        ev.fail(
            "the server reports no acceptance length after the requests verify sent",
            "speculative decoding did not run (no DSPARK) or never accepted a draft",
            SPEC_FIX,
        )
    ev.metrics["accept_length"] = value
    ev.metrics["floor"] = floor
    ev.saw(
        f"acceptance length {value:.2f} from {source}; floor {floor:.2f} "
        f"({ctx.options.accept_floor_source})"
    )
    if value < floor:
        if value <= 1.0:
            ev.fail(
                f"acceptance length {value:.2f}: no draft token is accepted",
                "speculative decoding is off or its draft never matches",
                SPEC_FIX,
            )
        ev.fail(
            f"acceptance length {value:.2f} below the floor {floor:.2f}",
            "drafts are mostly rejected: a wrong or mismatched draft, a broken sm_12x "
            "kernel path, or a draft depth the rig does not handle",
            "check the image's patch is applied and the recipe's "
            "--speculative-dspark-block-size; compare with the recipe's expected figure",
        )
