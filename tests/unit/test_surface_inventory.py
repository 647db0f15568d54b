"""The inventory of sglang's listeners and secrets, read from the pinned wheels
(tests/support/sglang_surface.py): every candidate of both tracks' sglang and
of the pinned sglang-router is judged, and the table in docs/listeners.md is
what the source says (issue 30)."""

from __future__ import annotations

import pytest

from sm12x.deploy.router import ROUTER_SURFACE
from sm12x.launch.judge import RULES, SURFACE
from sm12x.versions import load_versions
from tests.support import sglang_surface


def test_every_candidate_of_every_pinned_release_is_judged():
    assert sglang_surface.unjudged() == []


@pytest.mark.parametrize("version", sglang_surface.versions())
def test_the_listeners_the_issue_names_are_found_in_the_source(version):
    found = sglang_surface.sglang(version)
    for name in ("kv_events_config", "disaggregation_bootstrap_port", "grpc_port", "api_key"):
        assert name in found, name
        assert ".py:" in found[name].where, found[name]
    assert "SGLANG_RUST_SERVER" in found and "SGLANG_GRPC_PORT" in found


def test_0_5_23_hides_the_watermark_config_and_the_inventory_calls_it_secret():
    found = sglang_surface.sglang("0.5.23")
    assert "watermark_config" in found
    assert SURFACE["watermark_config"].rule == "secret"


def test_the_router_inventory_is_the_pinned_router_s():
    _, version = sglang_surface.router_source()
    assert version == load_versions()["SGLANG_ROUTER_VERSION"]
    found = sglang_surface.router()
    for name in ("mini_lb", "postgres_db_url", "redis_url", "api_key", "host"):
        assert name in found, name
    assert ROUTER_SURFACE["mini_lb"].rule == "refused"


def test_every_rule_is_one_the_judge_knows():
    assert {s.rule for s in SURFACE.values()} <= set(RULES)
    assert {s.rule for s in ROUTER_SURFACE.values()} <= {"owned", "secret", "refused", "none"}


def test_a_new_listener_in_a_release_would_fail(monkeypatch):
    """The check can fail: a dest the judge has no row for is named."""
    real = sglang_surface.sglang

    def with_new(version):
        found = dict(real(version))
        found["shiny_new_port"] = sglang_surface.Found("shiny_new_port", "flag", "x.py:1")
        return found

    monkeypatch.setattr(sglang_surface, "sglang", with_new)
    problems = sglang_surface.unjudged()
    assert any("shiny_new_port (x.py:1) is not judged" in p for p in problems)
