"""The CLI is a registry of subcommand modules."""

from __future__ import annotations

import importlib

from sm12x import cli
from tests.support.cli import run_sm12x


def test_every_registered_module_defines_a_command():
    names = []
    for name, module in cli.SUBCOMMANDS.items():
        command = importlib.import_module(module).COMMAND
        assert isinstance(command, cli.Command)
        assert command.name == name, (module, command.name)
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
    for name in cli.SUBCOMMANDS:
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


def test_a_command_imports_its_own_module_only():
    """`sm12x NAME` imports the command modules NAME's own module imports and no
    other (their imports were most of a short command's start); `--help`
    imports them all to list them."""
    import json
    import subprocess
    import sys

    listed = "print(json.dumps(sorted(m for m in cli.SUBCOMMANDS.values() if m in sys.modules)))"
    by_cli = (
        "import json, sys; from sm12x import cli\n"
        "try:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n" + listed
    )
    by_module = (
        "import importlib, json, sys; from sm12x import cli\n"
        "importlib.import_module(cli.SUBCOMMANDS[sys.argv[1]])\n" + listed
    )

    def imported(code: str, *argv: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return json.loads(done.stdout.strip().splitlines()[-1])

    everything = sorted(cli.SUBCOMMANDS.values())
    for name, argv in (("launch", ("--help",)), ("exposure-check", ("--no-such-option",))):
        alone = imported(by_cli, name, *argv)
        assert cli.SUBCOMMANDS[name] in alone and alone != everything, (name, alone)
        assert alone == imported(by_module, name), name
    assert imported(by_cli, "--help") == everything


def test_each_command_s_parser_is_the_same_alone_and_among_all():
    """The parser main builds for one named command gives that command the same
    arguments, help and usage as the parser with every command."""
    import argparse

    def child(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
        return sub.choices[name]

    everything = cli.build_parser()
    for name in cli.SUBCOMMANDS:
        alone = cli.build_parser(cli.commands([name]))
        assert child(alone, name).format_help() == child(everything, name).format_help(), name
        assert alone.format_usage() == everything.format_usage(), name
