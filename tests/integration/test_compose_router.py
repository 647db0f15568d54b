"""The `router` compose profile, through the real Compose v2 binary and the
real sglang-router argument parser.

compose.yaml gives the router container its environment; `sm12x router`
turns that environment into sglang-router's arguments. These tests run both
halves on the same data: the environment compose renders from a .env goes
into the settings (sm12x.settings) and RouterSettings, and the resulting argv
is parsed by the pinned sglang_router's own parser. `sm12x router` run on the
host with the same .env must come to the same arguments.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from sm12x.deploy.router import RouterSettings, command, router_argv, shell
from sm12x.settings import load
from sm12x.versions import load_versions
from tests.support.cli import assert_one_clear_error, run_sm12x
from tests.support.compose import compose, config, secrets_as_files, with_values

ROOT = Path(__file__).resolve().parents[2]
ENV_EXAMPLE = ROOT / ".env.example"


@pytest.fixture(scope="module")
def env_file(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("env")
    (tmp / "model").mkdir()
    text = re.sub(
        r"(?m)^SM12X_MODEL_DIR=.*$", f"SM12X_MODEL_DIR={tmp / 'model'}", ENV_EXAMPLE.read_text()
    )
    path = tmp / ".env"
    path.write_text(text)
    return path


def router_service(env_file: Path) -> dict:
    services = config("router", env_file=env_file)["services"]
    assert sorted(services) == ["exposure-check", "router"]
    return services["router"]


def router_env(env_file: Path, folder: Path) -> dict[str, str]:
    """The router container's environment, its key secret written as a file."""
    return secrets_as_files(config("router", env_file=env_file), "router", env_file, folder)


def from_environ(env: dict[str, str]) -> RouterSettings:
    """The router's settings from the container's environment alone (no .env there)."""
    return RouterSettings.from_settings(load(environ=env, env_file=os.devnull))


def parse_with_sglang_router(argv: list[str]):
    from sglang_router.launch_router import parse_router_args

    return parse_router_args(argv)


def test_router_profile_validates_and_runs_only_the_router(env_file):
    service = router_service(env_file)
    assert service["profiles"] == ["router"]
    assert service["entrypoint"] == ["sm12x", "router"]
    # The same image as the rigs: it carries sglang-router at SGLANG_ROUTER_VERSION.
    assert service["image"] == load_versions()["SM12X_IMAGE"]


def test_router_needs_no_gpu_no_model_and_uses_host_networking(env_file):
    service = router_service(env_file)
    assert service["network_mode"] == "host"
    assert "ports" not in service  # it binds SM12X_ROUTER_BIND itself
    assert "deploy" not in service and "volumes" not in service and "devices" not in service


def test_router_defaults_from_env_example(env_file):
    env = router_service(env_file)["environment"]
    assert env == {
        "SM12X_ROUTER_WORKERS": "",
        "SM12X_ROUTER_POLICY": "cache_aware",
        "SM12X_ROUTER_BIND": "127.0.0.1",
        "SM12X_ROUTER_PORT": "8000",
        "SM12X_ROUTER_METRICS_BIND": "127.0.0.1",
        "SM12X_ROUTER_METRICS_PORT": "29000",
        "SM12X_API_KEY_FILE": "",
        "SM12X_INSECURE_NO_API_KEY": "",
    }
    # The key travels as a secret file, never in the environment.
    assert router_service(env_file)["secrets"] == [
        {"source": "api-key", "target": "/run/secrets/sm12x-api-key"}
    ]


def test_router_healthcheck_is_one_token_through_it(env_file):
    health = router_service(env_file)["healthcheck"]
    # The same probe as the rigs (one generated token), pointed at the router
    # (SM12X_ROUTER_BIND/SM12X_ROUTER_PORT in its environment) by --router.
    assert health["test"] == ["CMD", "sm12x", "healthcheck", "--router"]
    assert (health["interval"], health["timeout"], health["retries"]) == ("30s", "1m0s", 3)
    assert health["start_period"] == "2h0m0s"
    assert router_service(env_file)["restart"] == "on-failure"


@pytest.mark.parametrize(
    "workers",
    [
        '"http://192.168.1.10:30000 http://192.168.1.11:30000"',
        "http://192.168.1.10:30000 http://192.168.1.11:30000  # two rigs",  # unquoted works too
    ],
)
def test_env_values_become_the_routers_arguments(env_file, tmp_path, workers):
    custom = with_values(
        env_file,
        tmp_path,
        SM12X_ROUTER_WORKERS=workers,
        SM12X_ROUTER_BIND="0.0.0.0",
        SM12X_ROUTER_PORT="8080",
        SM12X_ROUTER_METRICS_PORT="29100",
        SM12X_API_KEY="sk-shared",
    )
    assert "sk-shared" not in str(router_service(custom))
    env = router_env(custom, tmp_path)
    settings = from_environ(env)
    # The key is not on the command line; sm12x.keyed adds it in memory.
    assert "sk-shared" not in " ".join(command(settings, environ=env))
    parsed = parse_with_sglang_router(router_argv(settings, env))
    assert parsed.worker_urls == ["http://192.168.1.10:30000", "http://192.168.1.11:30000"]
    assert (parsed.host, parsed.port) == ("0.0.0.0", 8080)
    assert (parsed.prometheus_host, parsed.prometheus_port) == ("127.0.0.1", 29100)
    assert parsed.policy == "cache_aware"
    assert parsed.api_key == "sk-shared"  # passed through to the router


def test_no_key_in_env_means_no_api_key_flag(env_file, tmp_path):
    # sglang-router given --api-key "" answers every request 401: the flag must
    # be absent, which is why the entrypoint is `sm12x router`.
    custom = with_values(env_file, tmp_path, SM12X_ROUTER_WORKERS="http://127.0.0.1:30000")
    env = router_service(custom)["environment"]
    argv = command(from_environ(env), environ=env)
    assert "--api-key" not in argv
    assert parse_with_sglang_router(argv[3:]).api_key is None


def test_policy_can_be_changed(env_file, tmp_path):
    custom = with_values(
        env_file,
        tmp_path,
        SM12X_ROUTER_WORKERS="http://127.0.0.1:30000",
        SM12X_ROUTER_POLICY="power_of_two",
    )
    env = router_service(custom)["environment"]
    argv = command(from_environ(env), environ=env)
    assert parse_with_sglang_router(argv[3:]).policy == "power_of_two"


def test_router_without_rigs_stops_with_one_clear_error(env_file):
    # .env.example as copied: no rigs listed yet.
    env = router_service(env_file)["environment"]
    result = run_sm12x("router", env={k: v for k, v in env.items() if v})
    assert_one_clear_error(result, "SM12X_ROUTER_WORKERS")


def test_router_starts_beside_a_rig_when_both_profiles_are_named(env_file):
    result = compose(
        "--profile", "router", "--profile", "auto", "config", "--services", env_file=env_file
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == ["auto", "exposure-check", "router"]


def test_bare_up_does_not_start_the_router(env_file):
    assert "router" not in config(env_file=env_file)["services"]


def test_router_port_does_not_clash_with_a_rig_on_the_same_machine(env_file):
    # Host networking: the router and a local rig share the host's ports.
    router = router_service(env_file)["environment"]
    rig_port = config("auto", env_file=env_file)["services"]["auto"]["ports"][0]["published"]
    assert router["SM12X_ROUTER_PORT"] != rig_port
    assert router["SM12X_ROUTER_METRICS_PORT"] not in (rig_port, router["SM12X_ROUTER_PORT"])


def test_the_router_on_the_host_reads_the_same_dotenv_as_the_container(env_file, tmp_path):
    # One .env: compose renders the container's environment from it; `sm12x
    # router` run by hand on the host reads it directly. Same router.
    custom = with_values(
        env_file,
        tmp_path,
        SM12X_ROUTER_WORKERS='"http://192.168.1.10:30000 http://192.168.1.11:30000"',
        SM12X_ROUTER_PORT="8080",
        SM12X_ROUTER_METRICS_BIND="0.0.0.0",
        SM12X_API_KEY="sk-both",
        SM12X_ROUTER_POLICY="round_robin",
    )
    in_container = from_environ(router_env(custom, tmp_path))
    on_host = RouterSettings.from_settings(load(env_file=custom, environ={}))
    assert on_host == in_container
    result = run_sm12x("router", "--dry-run", "--env-file", str(custom))
    assert result.returncode == 0, result.stderr
    assert result.stdout == shell(in_container)
