"""The CLI is a registry of subcommand modules."""

from __future__ import annotations

import importlib

from sm12x import cli
from tests.support.cli import run_sm12x


def test_every_registered_module_defines_a_command():
    names = []
    for module in cli.SUBCOMMANDS:
        command = importlib.import_module(module).COMMAND
        assert isinstance(command, cli.Command)
        names.append(command.name)
    assert names == [
        "launch",
        "render",
        "healthcheck",
        "router",
        "verify",
        "bench",
        "doctor",
        "tune",
        "exposure-check",
        "mock-server",
        "watch",
        "qualify",
    ]
    assert len(set(names)) == len(names)


def test_help_lists_the_commands():
    result = run_sm12x("--help")
    assert result.returncode == 0
    for name in ("launch", "render", "healthcheck", "router", "verify", "bench", "doctor", "tune"):
        assert name in result.stdout


def test_no_command_is_a_usage_error():
    result = run_sm12x()
    assert result.returncode == 2
    assert "required: COMMAND" in result.stderr


def test_version():
    from sm12x import __version__

    assert run_sm12x("--version").stdout.strip() == f"sm12x {__version__}"


def test_verify_is_handed_its_arguments_untouched():
    """`sm12x verify ...` is `python -m verify ...`: same options, same exit codes."""
    from sm12x.mock.server import free_port

    result = run_sm12x("verify", "--help")
    assert result.returncode == 0
    assert "--base-url" in result.stdout and "--soak-concurrency" in result.stdout
    result = run_sm12x("verify", "--base-url", f"http://127.0.0.1:{free_port()}", "--no-files")
    assert result.returncode == 2
    assert "cannot reach" in result.stdout
    result = run_sm12x("verify", "--skip", "nonsense")
    assert result.returncode == 2 and "unknown check" in result.stderr


def test_every_command_s_errors_begin_with_its_name():
    """One prefix, `sm12x <cmd>: error:`, for a bad option and for bad input,
    verify included (issue 29: its errors began "verify: error:")."""
    bad_input = {
        "verify": ("--base-url", "not-a-url"),
        "exposure-check": (),
        "render": ("no-such-recipe",),
        "launch": ("--recipe", "no-such-recipe"),
    }
    env = {"SM12X_BIND": "0.0.0.0"}  # exposure-check's bad input
    for module in cli.SUBCOMMANDS:
        name = importlib.import_module(module).COMMAND.name
        result = run_sm12x(name, "--no-such-option", env=env)
        assert result.returncode == 2, (name, result.stderr)
        assert f"sm12x {name}: error: " in result.stderr, (name, result.stderr)
        assert "\nverify: " not in "\n" + result.stderr, result.stderr
        if name in bad_input:
            result = run_sm12x(name, *bad_input[name], env=env)
            assert result.returncode != 0, (name, result.stderr)
            errors = [line for line in result.stderr.splitlines() if ": error: " in line]
            assert errors and all(e.startswith(f"sm12x {name}: error: ") for e in errors), (
                name,
                result.stderr,
            )
