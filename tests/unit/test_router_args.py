"""`sm12x router`: the arguments it gives sglang-router, checked by the
pinned sglang-router's own argument parser."""

from __future__ import annotations

from importlib import metadata

import pytest

from sm12x.deploy.router import (
    HEALTH_FAILURE_THRESHOLD,
    HEALTH_INTERVAL_S,
    HEALTH_SUCCESS_THRESHOLD,
    HEALTH_TIMEOUT_S,
    WORKER_STARTUP_TIMEOUT_S,
    RouterSettings,
    build_router,
    command,
    router_argv,
)
from sm12x.errors import UserError
from sm12x.settings import load
from sm12x.versions import load_versions
from tests.support.cli import assert_one_clear_error, run_sm12x

WORKERS = ("http://192.168.1.10:30000", "http://192.168.1.11:30000/")


def parse(argv: list[str]):
    from sglang_router.launch_router import parse_router_args

    assert argv[:3] == ["python3", "-m", "sglang_router.launch_router"]
    return parse_router_args(argv[3:])


def test_the_installed_router_is_the_pinned_one():
    assert metadata.version("sglang-router") == load_versions()["SGLANG_ROUTER_VERSION"]


def test_static_rigs():
    parsed = parse(command(RouterSettings(workers=WORKERS)))
    assert parsed.worker_urls == [w.rstrip("/") for w in WORKERS]
    assert parsed.service_discovery is False
    assert parsed.policy == "cache_aware"
    assert (parsed.host, parsed.port) == ("127.0.0.1", 8000)
    assert (parsed.prometheus_host, parsed.prometheus_port) == ("127.0.0.1", 29000)


def test_health_checks_are_the_tuned_ones_not_the_routers_defaults():
    parsed = parse(command(RouterSettings(workers=WORKERS)))
    assert parsed.health_check_endpoint == "/health"
    assert parsed.health_check_interval_secs == HEALTH_INTERVAL_S == 10
    assert parsed.health_check_timeout_secs == HEALTH_TIMEOUT_S == 20
    assert parsed.health_failure_threshold == HEALTH_FAILURE_THRESHOLD == 3
    assert parsed.health_success_threshold == HEALTH_SUCCESS_THRESHOLD == 2
    assert parsed.worker_startup_timeout_secs == WORKER_STARTUP_TIMEOUT_S == 7200


def test_kubernetes_discovery():
    settings = RouterSettings(
        selector=("app.kubernetes.io/name=sm12x", "sm12x.io/role=server"),
        namespace="sm12x",
        discovery_port=30000,
        host="0.0.0.0",
    )
    parsed = parse(command(settings))
    assert parsed.service_discovery is True
    assert parsed.selector == {"app.kubernetes.io/name": "sm12x", "sm12x.io/role": "server"}
    assert parsed.service_discovery_namespace == "sm12x"
    assert parsed.service_discovery_port == 30000
    assert parsed.worker_urls == []


def test_api_key_only_when_set_and_never_in_argv():
    from sglang_router.launch_router import parse_router_args

    assert "--api-key" not in command(RouterSettings(workers=WORKERS))
    settings = RouterSettings(workers=WORKERS, api_key=True)
    argv = command(settings, environ={"SM12X_API_KEY": "sk-1"})
    # The router starts through sm12x.keyed, which adds the key in memory.
    assert argv[:4] == ["python3", "-m", "sm12x.keyed", "sglang_router.launch_router"]
    assert "sk-1" not in " ".join(argv) and "--api-key" not in argv
    parsed = parse_router_args(router_argv(settings, {"SM12X_API_KEY": "sk-1"}))
    assert parsed.api_key == "sk-1"
    # A key that starts with '-' is still one value (--api-key=KEY).
    parsed = parse_router_args(router_argv(settings, {"SM12X_API_KEY": "-k3y"}))
    assert parsed.api_key == "-k3y"


def test_every_flag_has_a_reason():
    for settings in (
        RouterSettings(workers=WORKERS, api_key=True),
        RouterSettings(selector=("a=b",), namespace="n"),
    ):
        for arg in build_router(settings):
            assert len(arg.why) >= 4, arg.flag


def test_extra_flags_are_appended_and_win():
    settings = RouterSettings(workers=WORKERS, extra=("--health-check-interval-secs", "1"))
    assert parse(command(settings)).health_check_interval_secs == 1


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--api-key", "sk-x"), "sets sglang-router's api_key"),
        (("--api-key=sk-x",), "sets sglang-router's api_key"),
        # sglang-router's own parser judges prefixes too (issue 21).
        (("--api", "sk-x"), "sets sglang-router's api_key"),
        (("--control-plane-api-keys", "id:n:admin:sk-x"), "control_plane_api_keys"),
        (("--control-plane-api", "id:n:admin:sk-x"), "control_plane_api_keys"),
        (("--oracle-pass", "pw"), "oracle_password"),
        (("--prometheus-h", "0.0.0.0"), "sets --prometheus-host from SM12X_ROUTER_METRICS_BIND"),
        (("--host", "0.0.0.0"), "sets --host from SM12X_ROUTER_BIND"),
        (("--polic", "random"), "sets --policy from SM12X_ROUTER_POLICY"),
        (("--max-payload-size", "inf"), "not a finite number"),
    ],
)
def test_extra_flags_that_repeat_a_rendered_one_are_refused(extra, needle):
    from sm12x.deploy.router import check_extra

    with pytest.raises(UserError, match=needle):
        check_extra(RouterSettings(workers=WORKERS, extra=extra))


def from_environ(environ: dict[str, str]) -> RouterSettings:
    return RouterSettings.from_settings(load(environ=environ))


def test_from_settings():
    settings = from_environ(
        {
            "SM12X_ROUTER_WORKERS": "http://a:30000,http://b:30000  http://c:30000",
            "SM12X_ROUTER_BIND": "0.0.0.0",
            "SM12X_ROUTER_PORT": "8080",
            "SM12X_ROUTER_POLICY": "round_robin",
            "SM12X_API_KEY": "k",
            # The rigs' own bind and port are not the router's.
            "SM12X_BIND": "127.0.0.9",
            "SM12X_PORT": "30000",
        }
    )
    assert settings.workers == ("http://a:30000", "http://b:30000", "http://c:30000")
    assert (settings.host, settings.port, settings.policy, settings.api_key) == (
        "0.0.0.0",
        8080,
        "round_robin",
        True,
    )


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        (RouterSettings(), "SM12X_ROUTER_WORKERS"),
        (RouterSettings(workers=("192.168.1.10:30000",)), "not a rig URL"),
        (RouterSettings(workers=("http://a:30000/v1",)), "not a rig URL"),
        (RouterSettings(workers=WORKERS, selector=("a=b",)), "not both"),
        (RouterSettings(selector=("app",)), "key=value"),
        (RouterSettings(workers=WORKERS, policy="least_busy"), "cache_aware"),
    ],
)
def test_bad_settings_say_what_to_fix(settings, needle):
    with pytest.raises(UserError, match=needle):
        build_router(settings)


def test_bad_port_in_env():
    with pytest.raises(UserError, match="SM12X_ROUTER_PORT='eighty' in the environment"):
        from_environ({"SM12X_ROUTER_PORT": "eighty"})
    with pytest.raises(UserError, match="SM12X_ROUTER_POLICY='least_busy'"):
        from_environ({"SM12X_ROUTER_POLICY": "least_busy"})


def test_the_old_metrics_name_still_works():
    settings = from_environ({"SM12X_ROUTER_METRICS_HOST": "0.0.0.0"})
    assert settings.metrics_host == "0.0.0.0"


def test_cli_dry_run_prints_the_command_without_the_secret():
    result = run_sm12x(
        "router",
        "--dry-run",
        env={"SM12X_ROUTER_WORKERS": " ".join(WORKERS), "SM12X_API_KEY": "sk-secret"},
    )
    assert result.returncode == 0, result.stderr
    assert "-m sm12x.keyed sglang_router.launch_router" in result.stdout
    assert "--api-key" not in result.stdout
    assert "sk-secret" not in result.stdout


def test_cli_explain_lists_reasons():
    result = run_sm12x("router", "--explain", env={"SM12X_ROUTER_WORKERS": WORKERS[0]})
    assert result.returncode == 0, result.stderr
    assert "# --policy: cache_aware" in result.stdout
    assert "# --health-check-interval-secs:" in result.stdout


def test_cli_without_rigs_is_one_clear_error():
    assert_one_clear_error(run_sm12x("router"), "SM12X_ROUTER_WORKERS")


def test_cli_uses_the_rigs_and_key_from_dotenv(tmp_path):
    # The bug this settles: workers in .env, and `sm12x router` said to set them there.
    (tmp_path / ".env").write_text(
        f"SM12X_ROUTER_WORKERS={' '.join(WORKERS)}\nSM12X_API_KEY=sk-dotenv\n"
        "SM12X_ROUTER_PORT=8100\nSM12X_PORT=30000\n"
    )
    result = run_sm12x("router", "--dry-run", cwd=tmp_path, env={"SM12X_ENV_FILE": ""})
    assert result.returncode == 0, result.stderr
    assert "--worker-urls http://192.168.1.10:30000 http://192.168.1.11:30000" in result.stdout
    assert "-m sm12x.keyed" in result.stdout and "sk-dotenv" not in result.stdout
    assert "--port 8100" in result.stdout


def test_cli_flags_win_over_dotenv(tmp_path):
    (tmp_path / ".env").write_text(f"SM12X_ROUTER_WORKERS={WORKERS[0]}\n")
    result = run_sm12x(
        "router",
        "--dry-run",
        "--env-file",
        str(tmp_path / ".env"),
        "--router-workers",
        WORKERS[1],
        "--router-policy",
        "round_robin",
    )
    assert result.returncode == 0, result.stderr
    assert f"--worker-urls {WORKERS[1].rstrip('/')}" in result.stdout
    assert "--policy round_robin" in result.stdout


def test_cli_hands_the_dotenv_key_to_the_router_in_its_environment(tmp_path, monkeypatch):
    import argparse

    from sm12x.deploy import router

    (tmp_path / ".env").write_text(f"SM12X_ROUTER_WORKERS={WORKERS[0]}\nSM12X_API_KEY=sk-dot\n")
    calls = []
    monkeypatch.setattr(router.os, "execve", lambda *a: calls.append(a))
    parser = argparse.ArgumentParser()
    router.add_arguments(parser)
    args = parser.parse_args(["--env-file", str(tmp_path / ".env")])
    router.run(args, environ={"PATH": "/usr/bin"})
    [(_, argv, env)] = calls
    assert argv[1:4] == ["-m", "sm12x.keyed", "sglang_router.launch_router"]
    assert env["SM12X_API_KEY"] == "sk-dot" and "sk-dot" not in " ".join(argv)
