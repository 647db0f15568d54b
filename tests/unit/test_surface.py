"""Every listener sglang can open and every secret it can be handed, refused
with one line unless it is loopback-only or authenticated (issue 30): the
flags after --, recipe flags and env, the environment, and the router."""

from __future__ import annotations

import pytest
import yaml

from tests.support.cli import assert_one_clear_error, raw_recipe, run_sm12x

RECIPE = "rtx-pro-6000-tp4"
ZMQ = '{"publisher": "zmq"}'


def _launch(*extra: str, env: dict | None = None):
    return run_sm12x("launch", "--dry-run", "--recipe", RECIPE, "--", *extra, env=env or {})


@pytest.mark.parametrize(
    "extra",
    [
        ["--kv-events-config", ZMQ],
        ["--kv-events-c", ZMQ],
        [f"--kv-events-config={ZMQ}"],
        ["--kv-events-config", '{"publisher": "zmq", "endpoint": "tcp://0.0.0.0:5557"}'],
        [
            "--kv-events-config",
            '{"publisher": "zmq", "endpoint": "tcp://127.0.0.1:5557", '
            '"replay_endpoint": "tcp://*:5558"}',
        ],
        ["--kv-events-config", "not json"],
    ],
)
def test_the_kv_event_publisher_is_refused_unless_it_binds_loopback(extra):
    # Even while sglang binds loopback: the publisher binds its own address.
    assert_one_clear_error(_launch(*extra), "kv-events-config is refused", "loopback endpoint")


def test_the_kv_event_publisher_on_loopback_or_null_is_allowed():
    for config in (
        '{"publisher": "zmq", "endpoint": "tcp://127.0.0.1:5557"}',
        '{"publisher": "zmq", "endpoint": "ipc:///tmp/kv", "replay_endpoint": "tcp://[::1]:5558"}',
        '{"publisher": "null"}',
    ):
        result = _launch("--kv-events-config", config)
        assert result.returncode == 0, (config, result.stderr)


def test_the_kv_event_publisher_in_a_recipe_is_refused(tmp_path):
    data = raw_recipe(RECIPE)
    data["flags"]["--kv-events-config"] = {"value": ZMQ, "why": "a bad input to refuse"}
    path = tmp_path / "kv.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert_one_clear_error(run_sm12x("render", str(path)), "kv-events-config is refused")


def test_the_load_publisher_is_refused_unless_loopback():
    # 0.5.23's flag: the current track.
    current = {"SM12X_TRACK": "current"}
    assert_one_clear_error(
        _launch("--load-publish-endpoint", "tcp://*:6000", env=current),
        "load-publish-endpoint is refused",
    )
    assert _launch("--load-publish-endpoint", "tcp://127.0.0.1:6000", env=current).returncode == 0


@pytest.mark.parametrize(
    "extra", [["--disaggregation-mode", "prefill"], ["--disaggregation-m", "prefill"]]
)
def test_disaggregation_s_bootstrap_server_on_its_default_port_needs_loopback(extra):
    open_bind = {"SM12X_HOST": "0.0.0.0", "SM12X_API_KEY": "sk-secret-0123456789"}
    line = assert_one_clear_error(_launch(*extra, env=open_bind), "second listener", "8998")
    assert "sk-secret" not in line
    assert _launch(*extra).returncode == 0


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_sglang_s_rust_server_is_refused_from_the_environment(value):
    env = {"SGLANG_RUST_SERVER": value}
    assert_one_clear_error(
        run_sm12x("launch", "--dry-run", "--recipe", RECIPE, env=env),
        "SGLANG_RUST_SERVER is refused",
        "without the API key",
    )
    # Off from the shell is refused too: the launch environment is built, and a
    # variable sglang reads passes only from the recipe (sm12x.launch_env).
    off = run_sm12x("launch", "--dry-run", "--recipe", RECIPE, env={"SGLANG_RUST_SERVER": "0"})
    assert_one_clear_error(off, "SGLANG_RUST_SERVER is set in the environment", "recipe's env:")


def test_sglang_s_rust_server_is_refused_from_a_recipe_env(tmp_path):
    data = raw_recipe(RECIPE)
    data.setdefault("env", {})["SGLANG_RUST_SERVER"] = {
        "value": "1",
        "why": "a bad input to refuse",
    }
    path = tmp_path / "rust.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = run_sm12x("launch", "--dry-run", "--recipe", str(path))
    assert_one_clear_error(result, "SGLANG_RUST_SERVER is refused")


def test_an_http_app_swap_is_refused():
    env = {"SGLANG_HTTP_SERVER_APP_PATH": "evil:app"}
    assert_one_clear_error(
        run_sm12x("launch", "--dry-run", "--recipe", RECIPE, env=env),
        "SGLANG_HTTP_SERVER_APP_PATH is refused",
    )


@pytest.mark.parametrize(
    "extra",
    [
        ["--watermark-config", '{"key": "wm-secret-123", "key_b": "wm-secret-456"}'],
        ['--watermark-config={"key": "wm-secret-123"}'],
        ["--watermark-c", '{"key": "wm-secret-123"}'],
    ],
)
def test_a_watermark_key_on_the_command_line_is_refused(extra):
    result = run_sm12x(
        "launch",
        "--dry-run",
        "--recipe",
        "rtx-pro-6000-tp8-v41",
        "--",
        *extra,
        env={"SM12X_TRACK": "current"},
    )
    line = assert_one_clear_error(result, "watermark", "JSON file path")
    assert "wm-secret" not in result.stdout + result.stderr, line


def test_a_watermark_config_file_is_the_route(tmp_path):
    config = tmp_path / "wm.json"
    config.write_text('{"key": "wm-secret-123"}')
    result = run_sm12x(
        "launch",
        "--dry-run",
        "--recipe",
        "rtx-pro-6000-tp8-v41",
        "--",
        "--watermark-config",
        str(config),
        env={"SM12X_TRACK": "current"},
    )
    assert result.returncode == 0, result.stderr


def _router(*extra: str):
    env = {"SM12X_ROUTER_WORKERS": "http://127.0.0.1:30000"}
    return run_sm12x("router", "--dry-run", "--", *extra, env=env)


def test_the_router_s_mini_load_balancer_is_refused():
    for extra in (["--mini-lb"], ["--mini-lb", "--pd-disaggregation"], ["--mini"]):
        assert_one_clear_error(
            _router(*extra), "mini-lb" if extra[0] != "--mini" else "--mini", "no API key check"
        )


@pytest.mark.parametrize(
    ("extra", "route"),
    [
        (["--postgres-db-url", "postgres://u:PW-secret@db:5432/x"], "POSTGRES_DB_URL"),
        (["--redis-url", "redis://:PW-secret@cache:6379/0"], "REDIS_URL"),
        (["--redis-u=redis://:PW-secret@cache:6379/0"], "REDIS_URL"),
        (["--oracle-password", "PW-secret"], "ATP_PASSWORD"),
    ],
)
def test_router_store_credentials_on_the_command_line_are_refused(extra, route):
    result = _router(*extra)
    assert_one_clear_error(result, "is refused", route)
    assert "PW-secret" not in result.stdout + result.stderr
