"""The one settings model every command reads (sm12x.settings): where values
come from, in which order, under which names, and what each command shows."""

from __future__ import annotations

import argparse
import os
import re

import pytest

from sm12x import cli
from sm12x.errors import UserError
from sm12x.settings import COMMANDS, Settings, env_name, flag_name, for_command, load, meta
from sm12x.settings.cli import flag_settings
from tests.support.cli import run_sm12x


def write(path, text: str):
    path.write_text(text)
    return path


# --- order: default < .env < environment < flag ------------------------------------


def test_each_layer_wins_over_the_one_before(tmp_path):
    env = write(tmp_path / ".env", "SM12X_PORT=31001\nSM12X_BIND=127.0.0.2\nSM12X_DOCKER=d1\n")
    loaded = load({"port": "31003"}, env, environ={"SM12X_PORT": "31002", "SM12X_BIND": ""})
    s = loaded.settings
    assert s.port == 31003 and loaded.origin("port").kind == "flag"
    # An empty variable is unset (compose's `${VAR:-}`): .env's value stands.
    assert s.bind == "127.0.0.2" and loaded.origin("bind").kind == ".env"
    assert s.docker == "d1"
    assert s.router_port == 8000 and loaded.origin("router_port").kind == "default"
    env_only = load({}, env, environ={"SM12X_PORT": "31002"})
    assert env_only.settings.port == 31002 and str(env_only.origin("port")) == "environment"


def test_dotenv_is_found_in_the_current_folder_unless_one_is_named(tmp_path):
    write(tmp_path / ".env", "SM12X_PORT=31001\n")
    found = load(environ={}, cwd=tmp_path)
    assert found.settings.port == 31001
    assert found.env_file.path == tmp_path / ".env" and found.env_file.how == "the current folder"
    named = write(tmp_path / "site.env", "SM12X_PORT=31005\n")
    assert load(environ={"SM12X_ENV_FILE": str(named)}, cwd=tmp_path).settings.port == 31005
    assert load(env_file=named, environ={}, cwd=tmp_path).settings.port == 31005
    with pytest.raises(UserError, match="--env-file nope: no such file"):
        load(env_file="nope", environ={}, cwd=tmp_path)


def test_dotenv_parses_as_compose_writes_it(tmp_path):
    env = write(
        tmp_path / ".env",
        "# a comment\nexport SM12X_BIND=127.0.0.3\n"
        'SM12X_ROUTER_WORKERS="http://a:1 http://b:2"\n'
        "SM12X_ROUTER_POLICY=round_robin  # inline comment\nSM12X_PORT=${PORT_FROM:-31000}\n",
    )
    s = load(env_file=env, environ={}).settings
    assert s.bind == "127.0.0.3" and s.router_workers == ("http://a:1", "http://b:2")
    assert s.router_policy == "round_robin" and s.port == 31000


def test_relative_paths_are_taken_from_where_they_were_written(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    env = write(project / ".env", "SM12X_MODEL_DIR=models/x\nSM12X_CACHE_DIR=~/cache\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    loaded = load(env_file=env, environ={}, cwd=elsewhere)
    assert loaded.settings.model_dir == str(project / "models" / "x")
    assert loaded.settings.cache_dir == os.path.expanduser("~/cache")
    assert loaded.origin("model_dir").raw == "models/x"
    from_env = load(env_file=os.devnull, environ={"SM12X_MODEL_DIR": "m"}, cwd=elsewhere)
    assert from_env.settings.model_dir == str(elsewhere / "m")
    from_flag = load({"model_dir": "f"}, env_file=os.devnull, environ={}, cwd=elsewhere)
    assert from_flag.settings.model_dir == str(elsewhere / "f")


# --- one name per setting; old names with a warning -------------------------------------


def test_names_are_derived_one_way():
    for name in Settings.model_fields:
        assert env_name(name) == "SM12X_" + name.upper()
        assert flag_name(name) == "--" + name.replace("_", "-")
        for old in meta(name).old:
            assert old != env_name(name)
    olds = [o for n in Settings.model_fields for o in meta(n).old]
    assert len(olds) == len(set(olds))


@pytest.mark.parametrize(
    ("old", "new", "value"),
    [
        ("SM12X_MODEL_PATH", "model_dir", "/srv/m"),
        ("HEAD_ADDR", "head_addr", "10.0.0.1"),
        ("NODE_RANK", "node_rank", 1),
        ("RECIPE", "recipe", "rtx-pro-6000-tp4"),
        ("SM12X_ROUTER_METRICS_HOST", "router_metrics_bind", "0.0.0.0"),
    ],
)
def test_old_names_are_read_with_a_warning(tmp_path, old, new, value):
    for where in ("environment", ".env"):
        env = write(tmp_path / ".env", f"{old}={value}\n" if where == ".env" else "")
        loaded = load(env_file=env, environ={old: str(value)} if where == "environment" else {})
        assert getattr(loaded.settings, new) == value
        origin = loaded.origin(new)
        assert origin.old and origin.name == old
        (warning,) = loaded.warnings
        assert f"{old} " in warning and f"old name of {env_name(new)}: rename it" in warning
    both = load(env_file=os.devnull, environ={old: "x", env_name(new): str(value)})
    assert getattr(both.settings, new) == value
    assert any("is ignored" in w for w in both.warnings)


# --- bad values: one line, where it came from, never the key ---------------------------


def test_a_bad_value_names_its_source(tmp_path):
    env = write(tmp_path / ".env", "SM12X_INSECURE_NO_API_KEY=maybe\n")
    with pytest.raises(UserError, match=rf"SM12X_INSECURE_NO_API_KEY='maybe' in {env}"):
        load(env_file=env, environ={})
    with pytest.raises(UserError, match="--router-port='x'"):
        load({"router_port": "x"}, env_file=os.devnull, environ={})
    with pytest.raises(UserError) as caught:
        load(env_file=os.devnull, environ={"SM12X_API_KEY": "sk secret"})
    assert (
        "sk secret" not in caught.value.message
        and "SM12X_API_KEY in the environment" in caught.value.message
    )


def test_the_key_file_is_read_and_never_shown(tmp_path):
    key = write(tmp_path / "key", "sk-from-file\n")
    loaded = load(env_file=os.devnull, environ={"SM12X_API_KEY_FILE": str(key)})
    assert loaded.settings.key() == "sk-from-file"
    from sm12x.settings import explain

    assert "sk-from-file" not in explain(loaded, "router")


# --- every command: the same flags, --env-file, --explain, sources in --help ------------


def parser_of(command: str) -> argparse.ArgumentParser:
    if command == "verify":
        from verify.cli import parser

        return parser()
    return next(
        sub
        for action in cli.build_parser()._subparsers._group_actions  # noqa: SLF001
        for name, sub in action.choices.items()
        if name == command
    )


def test_every_registered_command_reads_the_settings():
    assert sorted(c.name for c in cli.commands()) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_env_file_explain_and_its_setting_flags(command):
    parser = parser_of(command)
    options = {o for action in parser._actions for o in action.option_strings}  # noqa: SLF001
    assert {"--env-file", "--explain"} <= options
    for name in flag_settings(command):
        if command == "render" and name == "recipe":
            continue  # render's RECIPE is its positional argument
        assert flag_name(name) in options, (command, name)
    text = re.sub(r"\s+", " ", parser.format_help())
    for name in flag_settings(command):
        if not (command == "render" and name == "recipe"):
            assert f"[{env_name(name)}; default: " in text, (command, name)


def test_the_key_is_a_flag_only_for_clients():
    # A key on a server's command line is readable by every user of the host.
    assert set(flag_settings("verify")) >= {"api_key"}
    for command in ("launch", "render", "router", "gate", "healthcheck"):
        assert "api_key" not in flag_settings(command)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_explains_each_setting_it_reads(command, tmp_path):
    env = write(
        tmp_path / ".env",
        "SM12X_PORT=31000\nSM12X_API_KEY=sk-hidden\nSM12X_ROUTER_WORKERS=http://127.0.0.1:30000\n",
    )
    args = {
        "render": ["render", "rtx-pro-6000-tp4"],
        "launch": ["launch", "--recipe", "rtx-pro-6000-tp4"],
    }.get(command, [command])
    result = run_sm12x(*args, "--explain", "--env-file", str(env))
    assert result.returncode == 0, result.stderr
    shown = re.findall(r"^# (SM12X_\w+)=", result.stdout, re.M)
    assert shown == [env_name(n) for n in for_command(command)]
    assert f".env: {env} (--env-file)" in result.stdout
    assert "sk-hidden" not in result.stdout + result.stderr
    if "port" in for_command(command):
        assert re.search(
            rf"^# SM12X_PORT=31000 +<- \.env \({re.escape(str(env))}\)$", result.stdout, re.M
        )


def test_readme_settings_table_names_every_setting():
    """(That it is what the model makes: tools/regen.py, tests/unit/test_generated.py.)"""
    from sm12x.settings.table import BEGIN, END
    from tests.support.cli import ROOT

    readme = (ROOT / "README.md").read_text()
    start, end = readme.index(BEGIN), readme.index(END) + len(END)
    for name in Settings.model_fields:
        assert f"| `{env_name(name)}`" in readme[start:end]
