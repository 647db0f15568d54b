"""A variable that moves a route under a prefix sglang serves without the key,
or that opens the tensor dumper's server, is refused by `sm12x launch` in one
line, from the caller's environment or the recipe's env, on both tracks
(issue 45; the variables: sm12x/launch/sglang_routes.json and
docs/listeners.md, generated from each track's whole tree)."""

from __future__ import annotations

import pytest
import yaml

from sm12x.launch import routes
from tests.support.cli import assert_one_clear_error, raw_recipe, run_sm12x

RECIPE = "rtx-pro-6000-tp4"
TRACKS = [{}, {"SM12X_TRACK": "current"}]


def _launch(env: dict, recipe: str = RECIPE):
    return run_sm12x("launch", "--dry-run", "--recipe", recipe, env=env)


@pytest.mark.parametrize("track", TRACKS, ids=["pinned", "current"])
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SGLANG_OLLAMA_CHAT_ROUTE", "/health/chat"),
        ("SGLANG_OLLAMA_GENERATE_ROUTE", "/healthz"),
        ("SGLANG_OLLAMA_GENERATE_ROUTE", "/metrics-generate"),
        ("AIP_PREDICT_ROUTE", "/health_generate2"),
        ("SGLANG_OLLAMA_ROOT_ROUTE", "/metrics/"),
    ],
)
def test_a_route_moved_under_a_keyless_prefix_is_refused(track, name, value):
    assert_one_clear_error(
        _launch({**track, name: value}), f"{name}={value} is refused", "without the key"
    )


@pytest.mark.parametrize("track", TRACKS, ids=["pinned", "current"])
def test_ready_is_keyless_on_the_current_track_and_refused_on_both(track):
    # 0.5.23 added /ready; one table serves both tracks, so the value is refused on either.
    assert "/ready" in routes.keyless_prefixes()
    assert_one_clear_error(
        _launch({**track, "SGLANG_OLLAMA_CHAT_ROUTE": "/ready/chat"}), "is refused"
    )


def test_a_route_variable_in_the_recipe_env_is_refused(tmp_path):
    data = raw_recipe(RECIPE)
    data.setdefault("env", {})["SGLANG_OLLAMA_CHAT_ROUTE"] = {
        "value": "/health/chat",
        "why": "a bad input to refuse",
    }
    path = tmp_path / "route.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert_one_clear_error(
        run_sm12x("launch", "--dry-run", "--recipe", str(path)),
        "SGLANG_OLLAMA_CHAT_ROUTE=/health/chat is refused",
    )


def test_a_route_variable_outside_the_keyless_prefixes_is_judged_not_refused():
    # Keyed where it is; the caller's variable is still refused by the built
    # environment (sm12x.launch_env), which names the recipe as the way.
    assert routes.keyless("/api/chat") is None
    assert routes.keyless("/healthy") == "/health"
    result = _launch({"SGLANG_OLLAMA_CHAT_ROUTE": "/api/chat2"})
    assert_one_clear_error(result, "SGLANG_OLLAMA_CHAT_ROUTE", "recipe's env")


@pytest.mark.parametrize("track", TRACKS, ids=["pinned", "current"])
@pytest.mark.parametrize(
    ("name", "value"), [("DUMPER_SERVER_PORT", "40000"), ("DUMPER_SERVER_PORT", "reuse"),
                        ("DUMPER_GRAFTER_ENABLE", "1")]
)  # fmt: skip
def test_the_dumper_is_refused(track, name, value):
    assert_one_clear_error(_launch({**track, name: value}), f"{name} is refused")


def test_every_route_variable_of_both_tracks_is_known():
    found = routes.route_variables()
    for name in ("SGLANG_OLLAMA_CHAT_ROUTE", "SGLANG_OLLAMA_GENERATE_ROUTE", "AIP_PREDICT_ROUTE"):
        assert name in found, name
