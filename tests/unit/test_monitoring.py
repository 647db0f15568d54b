"""The monitoring profile's rules and dashboards, against the recipes and the
metric table read from sglang's and the router's code (deploy/monitoring/metrics.json).

The real Prometheus (promtool, a scraping process) judges them in
tests/integration/test_monitoring_stack.py; this holds what needs no process: every
name a query uses is one sglang or sglang-router exports, each rig's
thresholds are its recipe's, and the stand-in exports sglang's names with
sglang's types and labels.
"""

from __future__ import annotations

import json

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sm12x.deploy import dashboards, monitoring
from sm12x.mock.metrics import SCHEDULER_LABELS, TOKENIZER_LABELS, Finished, Metrics
from sm12x.recipe import load_all

RECIPES = load_all()
TABLE = monitoring.known_metrics()


def rule_file(rig: str) -> dict:
    return yaml.safe_load((monitoring.FOLDER / "rules" / f"{rig}.yml").read_text())


def alerts_of(rig: str) -> dict[str, dict]:
    (group,) = rule_file(rig)["groups"]
    return {r["alert"]: r for r in group["rules"] if "alert" in r}


def recorded_of(rig: str) -> dict[str, str]:
    (group,) = rule_file(rig)["groups"]
    return {r["record"]: r["expr"] for r in group["rules"] if "record" in r}


@pytest.mark.parametrize("uid,title,expr", dashboards.queries(), ids=lambda v: str(v)[:40])
def test_every_panel_query_names_only_exported_metrics(uid, title, expr):
    names = monitoring.names_in(expr)
    # `up` is Prometheus's own; every other query reads sglang's or the router's
    assert names or expr.startswith("up{"), f"{uid} / {title}: no metric in {expr!r}"
    monitoring.check_names(expr)


def test_every_rule_names_only_exported_metrics():
    for path in sorted((monitoring.FOLDER / "rules").glob("*.yml")):
        for rule in yaml.safe_load(path.read_text())["groups"][0]["rules"]:
            monitoring.check_names(rule["expr"])


def test_a_name_neither_exports_is_refused():
    with pytest.raises(ValueError, match="sglang:spec_accept_len "):
        monitoring.check_names("sglang:spec_accept_len < 2")
    # a counter is scraped with _total, a gauge never with a histogram's suffix
    monitoring.check_names("rate(sglang:generation_tokens_total[1m])")
    with pytest.raises(ValueError, match="sglang:num_running_reqs_bucket"):
        monitoring.check_names("sglang:num_running_reqs_bucket")


def test_the_table_has_both_tracks_and_the_router():
    table = json.loads(monitoring.METRICS_TABLE.read_text())
    versions = {v for spec in table["sglang"].values() for v in spec["versions"]}
    from sm12x.versions import load_versions, tracks

    assert versions == {load_versions(t)["SGLANG_VERSION"] for t in tracks()}
    assert table["sglang"]["sglang:spec_accept_length"]["type"] == "gauge"
    assert table["sglang"]["sglang:time_to_first_token_seconds"]["type"] == "histogram"
    assert "smg_worker_requests_active" in table["sglang-router"]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_each_rigs_thresholds_are_its_recipes(recipe):
    alerts = alerts_of(recipe.name)
    assert set(alerts) == {
        "DsparkAcceptanceCollapse",
        "ThroughputDrop",
        "ServerErrors",
        "QueueSaturated",
        "RigDown",
    }
    floor = recipe.verify.min_accept_length
    assert (
        f'sglang:spec_accept_length{{rig="{recipe.name}"}} < {floor:g} '
        in (alerts["DsparkAcceptanceCollapse"]["expr"])
    )
    assert f">= 0.95 * {recipe.max_running_requests}" in alerts["QueueSaturated"]["expr"]
    recorded = recorded_of(recipe.name)
    assert recorded["sm12x:recipe_min_accept_length"] == f"vector({floor:g})"
    assert recorded["sm12x:recipe_max_running_requests"] == f"vector({recipe.max_running_requests})"
    for alert in alerts.values():
        assert f'rig="{recipe.name}"' in alert["expr"]
        assert "docs/monitoring.md" in alert["annotations"]["runbook"]


def test_the_auto_service_gets_the_loosest_floor_and_no_max():
    alerts = alerts_of("auto")
    lowest = min(r.verify.min_accept_length for r in RECIPES)
    assert f"< {lowest:g} " in alerts["DsparkAcceptanceCollapse"]["expr"]
    assert "sm12x:recipe_max_running_requests" not in recorded_of("auto")
    assert "* " not in alerts["QueueSaturated"]["expr"]


def test_the_dashboards_use_the_provisioned_datasource():
    source = yaml.safe_load(
        (monitoring.FOLDER / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    (only,) = source["datasources"]
    assert only["uid"] == dashboards.DATASOURCE_UID
    for board in dashboards.BOARDS:
        model = json.loads((dashboards.FOLDER / f"{board.uid}.json").read_text())
        assert len(model["panels"]) == len(board.panels)
        for panel in model["panels"]:
            assert panel["datasource"]["uid"] == dashboards.DATASOURCE_UID


# --- the stand-in's /metrics is sglang's -----------------------------------------


def exposition(dp: int, accept: float = 3.4, in_flight: int = 60) -> dict:
    metrics = Metrics("m", dp=dp, gamma=4, max_running=48, spec=True)
    metrics.finished(Finished(100, 50, True, 0.2, 1.0))
    metrics.response("/v1/chat/completions", "POST", 500)
    text = metrics.render(in_flight=in_flight, accept_length=accept).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


@pytest.mark.parametrize("dp", [1, 4])
def test_the_mock_exports_sglangs_names_types_and_labels(dp):
    families = exposition(dp)
    base = set(SCHEDULER_LABELS) | set(TOKENIZER_LABELS) | {"dp_rank", "le"}
    # prometheus_client's `_created` timestamps (sglang's too) parse as families of their own
    for name, family in {n: f for n, f in families.items() if not n.endswith("_created")}.items():
        spec = TABLE.get(name) or TABLE[f"{name}_total"]  # the parser drops a counter's _total
        assert family.type == spec["type"], name
        for sample in family.samples:
            extra = set(sample.labels) - base
            assert extra <= set(spec["labels"]), (name, extra)
            if name in ("sglang:spec_accept_length", "sglang:num_running_reqs"):
                assert ("dp_rank" in sample.labels) == (dp > 1)


def test_the_mock_values_follow_load_and_faults():
    families = exposition(dp=4, accept=1.1, in_flight=40)
    running = {s.labels["dp_rank"]: s.value for s in families["sglang:num_running_reqs"].samples}
    queued = sum(s.value for s in families["sglang:num_queue_reqs"].samples)
    assert sum(running.values()) == 40 and queued == 0 and len(running) == 4
    accept = {s.value for s in families["sglang:spec_accept_length"].samples}
    assert accept == {1.1}
    full = exposition(dp=1, in_flight=60)
    assert [s.value for s in full["sglang:num_running_reqs"].samples] == [48]
    assert [s.value for s in full["sglang:num_queue_reqs"].samples] == [12]
    statuses = {s.labels["status_code"] for s in full["sglang:http_responses"].samples}
    assert statuses == {"500"}
