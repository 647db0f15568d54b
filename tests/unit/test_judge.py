"""sglang's own parser judges what a launch sets (issue 21): every alias,
prefix and `--flag=value` sglang accepts is judged by the dest it sets, keys
never reach a command line, a second listener needs loopback, and the
exposure rule reads the address sglang will bind.

The real parsers are built from the wheels (tools/sglang_cli.py): the
committed descriptions the launcher uses without sglang must be what they
describe, and parse each spelling as they do."""

from __future__ import annotations

import argparse
import os

import pytest

from sm12x.errors import UserError
from sm12x.launch import choice as launch_choice
from sm12x.launch import main as launch_main
from sm12x.launch import plan as launch_plan
from sm12x.launch.judge import recording
from sm12x.sglang_parser import (
    ParserError,
    from_description,
    load_description,
)
from tests.support.cli import assert_one_clear_error, run_sm12x
from tools import sglang_cli

VERSIONS = sglang_cli.track_versions()

# Spellings the issue found getting past the string checks, and more of the
# same kinds: prefixes, aliases, `=`, switches, keys, listeners, --config.
SPELLINGS = [
    ["--tensor-parallel", "2"],
    ["--tp", "2"],
    ["--tensor-parallel-size=2"],
    ["--nccl-init-addr", "10.0.0.9:5000"],
    ["--weight-loader-disable"],
    ["--cuda-graph-max-bs-dec", "99999"],
    ["--grpc-port", "31000"],
    ["--smg-grpc-mode"],
    ["--admin-api-key", "sk-admin"],
    ["--admin-api", "sk-admin"],
    ["--api", "sk-x"],
    ["--ssl-keyfile-password", "pw"],
    ["--config", "x.yaml"],
    ["--schedule-conservativeness", "nan"],
    ["--no-such-flag", "1"],
]


def _described(version: str, tokens: list[str]) -> dict:
    parser = recording(from_description(load_description(version)))
    try:
        return {"set": {k: v for k, v in vars(parser.parse_args(tokens)).items()}}
    except ParserError as exc:
        return {"error": str(exc)}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_description_parses_every_spelling_as_the_real_parser(version):
    real = sglang_cli.real_parse(version, SPELLINGS)
    for tokens, expected in zip(SPELLINGS, real, strict=True):
        got = _described(version, tokens)
        if "error" in expected:
            assert "error" in got, (tokens, got)
        else:
            # Values the description cannot type are strings; compare as text.
            assert {
                k: repr(v) if not isinstance(v, (int, float, str, bool, list)) else v
                for k, v in got["set"].items()
            }.keys() == expected["set"].keys(), tokens
            for dest, value in expected["set"].items():
                assert str(got["set"][dest]) == str(value), (tokens, dest)


def _launch(*extra: str, recipe: str = "rtx-pro-6000-tp4", env: dict | None = None):
    return run_sm12x("launch", "--dry-run", "--recipe", recipe, "--", *extra, env=env or {})


SPARK = {
    "SM12X_NODE_RANK": "1",
    "SM12X_HEAD_ADDR": "10.0.0.1",
    "NCCL_IB_HCA": "rocep1s0f0",
    "NCCL_SOCKET_IFNAME": "enp1s0f0np0",
    "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
}


@pytest.mark.parametrize(
    ("extra", "recipe", "needle"),
    [
        (["--tensor-parallel", "2"], "rtx-pro-6000-tp4", "sets --tp-size (4)"),
        (["--tensor-parallel-size=2"], "rtx-pro-6000-tp4", "sets --tp-size (4)"),
        (["--nccl-init-addr", "10.0.0.9:5000"], "dgx-spark-tp2", "--dist-init-addr is rendered"),
        (["--weight-loader-disable"], "dgx-spark-tp2", "weight-loader-mmap"),
        (["--cuda-graph-max-bs-dec", "99999"], "dgx-spark-tp2", "sets --cuda-graph-max-bs-decode"),
        (["--cuda-graph-max-bs-dec", "99999"], "rtx-pro-6000-tp4", "cuda-graph"),
        (["--config", "x.yaml"], "rtx-pro-6000-tp4", "--config merges a file"),
        (["--admin-api", "sk-admin"], "rtx-pro-6000-tp4", "admin_api_key"),
        (["--ssl-keyfile-password", "pw"], "rtx-pro-6000-tp4", "ssl_keyfile_password"),
        (["--no-such-flag", "1"], "rtx-pro-6000-tp4", "refuses it"),
        (["--a=sk-admin"], "rtx-pro-6000-tp4", "ambiguous option: --a=..."),
        (["--no-such-flag", "sk-admin"], "rtx-pro-6000-tp4", "unrecognized arguments"),
    ],
)
def test_flags_after_dashes_are_judged_by_what_sglang_parses(extra, recipe, needle):
    result = _launch(*extra, recipe=recipe, env=SPARK if recipe == "dgx-spark-tp2" else None)
    line = assert_one_clear_error(result, "after --", needle)
    for value in ("sk-admin", "pw"):
        assert value not in result.stderr + result.stdout, line


@pytest.mark.parametrize(
    ("extra", "env"),
    [
        (["--grpc-port", "31000"], {}),
        (["--smg-grpc-mode"], {}),
        (["--grpc-http-sidecar-port", "31001", "--smg-grpc-mode"], {}),
        ([], {"SGLANG_GRPC_PORT": "31000"}),
    ],
)
def test_a_second_listener_is_refused_unless_sglang_binds_loopback(extra, env):
    # Also with a key: sglang's gRPC servers check none.
    open_bind = {"SM12X_HOST": "0.0.0.0", "SM12X_API_KEY": "sk-secret", **env}
    assert_one_clear_error(_launch(*extra, env=open_bind), "second listener", "loopback")
    loopback = run_sm12x(
        "launch",
        "--dry-run",
        "--recipe",
        "rtx-pro-6000-tp4",
        *(["--", *extra] if extra else []),
        env=env,
    )
    if env:  # a variable sglang reads passes from the recipe only (sm12x.launch_env)
        assert_one_clear_error(loopback, "SGLANG_GRPC_PORT is set in the environment")
        return
    assert loopback.returncode == 0, loopback.stderr


def test_a_key_in_a_recipe_flag_is_refused_in_any_spelling(tmp_path):
    from tests.support.cli import raw_recipe

    for name in ("--api", "--admin-api-key", "--api-key"):
        data = raw_recipe("rtx-pro-6000-tp4")
        data["flags"][name] = {"value": "sk-from-recipe", "why": "a bad input to refuse"}
        import yaml

        path = tmp_path / "keyed.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        result = run_sm12x("render", str(path))
        assert result.returncode != 0, name
        assert "sk-from-recipe" not in result.stdout + result.stderr, name


def test_a_nan_string_in_a_recipe_flag_is_refused(tmp_path):
    import yaml

    from tests.support.cli import raw_recipe

    data = raw_recipe("rtx-pro-6000-tp4")
    data["flags"]["--schedule-conservativeness"] = {"value": "nan", "why": "a bad input to refuse"}
    path = tmp_path / "nan-string.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert_one_clear_error(run_sm12x("render", str(path)), "not a finite number")


def test_sm12x_options_are_never_abbreviated_and_never_echo_a_value():
    result = run_sm12x("launch", "--api-key", "sk-secret-value", "--dry-run")
    assert result.returncode == 2
    assert "sk-secret-value" not in result.stderr + result.stdout
    assert "unrecognized arguments: --api-key" in result.stderr


# --- the exposure rule -----------------------------------------------------------------


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    launch_main.add_arguments(parser)
    return parser.parse_args(list(argv))


def _run_launch(monkeypatch, tmp_path, environ: dict, container: bool, veth: bool):
    """`sm12x launch` in-process (exec captured) on bare metal or in a container."""
    calls = []
    monkeypatch.setattr(os, "execvpe", lambda *a: calls.append(a))
    monkeypatch.setattr(launch_choice, "installed_sglang", lambda: "")
    marker = tmp_path / "dockerenv"
    if container:
        marker.write_text("")
    monkeypatch.setattr(launch_plan, "CONTAINER_MARKERS", (str(marker),))
    net = tmp_path / "net"
    for name, (index, link) in {"lo": ("1", "1"), "eth0": ("7", "8" if veth else "7")}.items():
        (net / name).mkdir(parents=True)
        (net / name / "ifindex").write_text(index)
        (net / name / "iflink").write_text(link)
    monkeypatch.setattr(launch_plan, "NET_CLASS", net)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    env = {
        "SM12X_RECIPE": "rtx-pro-6000-tp4",
        "SM12X_MODEL_DIR": str(tmp_path / "model"),
        "SM12X_ENV_FILE": os.devnull,
        **environ,
    }
    launch_main.run(_args(), env)
    return calls


# .env.example's SM12X_BIND=127.0.0.1, with SM12X_HOST=0.0.0.0: what sglang binds.
EXAMPLE_BIND = {"SM12X_BIND": "127.0.0.1", "SM12X_HOST": "0.0.0.0"}


def test_on_bare_metal_the_address_sglang_binds_is_judged(monkeypatch, tmp_path):
    with pytest.raises(UserError, match="would listen on 0.0.0.0 with no API key"):
        _run_launch(monkeypatch, tmp_path, EXAMPLE_BIND, container=False, veth=False)


def test_a_host_network_container_is_judged_like_bare_metal(monkeypatch, tmp_path):
    with pytest.raises(UserError, match="would listen on 0.0.0.0 with no API key"):
        _run_launch(monkeypatch, tmp_path, EXAMPLE_BIND, container=True, veth=False)


def test_in_a_bridged_container_the_published_address_is_judged(monkeypatch, tmp_path):
    (call,) = _run_launch(monkeypatch, tmp_path, EXAMPLE_BIND, container=True, veth=True)
    argv = call[1]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"


def test_with_a_key_bare_metal_may_listen_anywhere(monkeypatch, tmp_path):
    (call,) = _run_launch(
        monkeypatch,
        tmp_path,
        {**EXAMPLE_BIND, "SM12X_API_KEY": "sk-k"},
        container=False,
        veth=False,
    )
    assert "sk-k" not in " ".join(call[1])
