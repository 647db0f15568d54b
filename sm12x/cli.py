"""`sm12x`: one command, subcommands registered below.

Adding a subcommand: write a module that defines
    COMMAND = Command(name=..., help=..., add_arguments=fn(parser), run=fn(args) -> int)
and add its name and module path to SUBCOMMANDS. Nothing else changes here.

`sm12x NAME ...` imports only NAME's module (the twelve together take about
0.4 s of CPU to import, one 0.03 to 0.35 s): the others are imported only for
what lists them all (`sm12x --help`, no or an unknown command).

A command with its own argument parser (verify) sets `passthrough`: it is
handed everything after its name.

Bad input raises sm12x.errors.UserError anywhere below: it is printed as one
`sm12x <command>: error: ...` line on stderr, exit status 1, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from sm12x import __version__
from sm12x.argparsing import StrictParser
from sm12x.errors import UserError


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None
    # A command with its own parser (verify): gets argv after its name as is.
    passthrough: Callable[[list[str]], int] | None = None


# name -> the module defining its COMMAND (tests/unit/test_cli.py holds each name
# to its module's COMMAND.name)
SUBCOMMANDS: dict[str, str] = {
    "launch": "sm12x.launch.main",
    "render": "sm12x.deploy.render_k8s",
    "healthcheck": "sm12x.launch.health",
    "router": "sm12x.deploy.router",
    "verify": "sm12x.verify_cmd",
    "bench": "sm12x.bench.main",
    "doctor": "sm12x.doctor.main",
    "tune": "sm12x.tune.main",
    "exposure-check": "sm12x.deploy.exposure",
    "mock-server": "sm12x.mock.command",
    "watch": "sm12x.watch.main",
    "qualify": "sm12x.qualify.main",
}


def commands(names: list[str] | None = None) -> list[Command]:
    """The COMMAND of each name (all of them by default), its module imported."""
    chosen = list(SUBCOMMANDS) if names is None else names
    return [importlib.import_module(SUBCOMMANDS[name]).COMMAND for name in chosen]


def build_parser(only: list[Command] | None = None) -> argparse.ArgumentParser:
    """sm12x's parser with every command, or with `only` these (the one argv
    names: its arguments, errors and help are the same either way)."""
    parser = StrictParser(
        prog="sm12x",
        description="Serve DeepSeek-V4-Flash-0731 with SGLang + DSpark on sm_120/sm_121.",
    )
    parser.add_argument("--version", action="version", version=f"sm12x {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands() if only is None else only:
        child = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description or command.help,
            allow_abbrev=False,
        )
        command.add_arguments(child)
        child.set_defaults(_run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # argparse matches a command's name exactly (no prefixes): argv[0] names it or
    # is something only the whole parser answers (--help, --version, a typo).
    only = commands([argv[0]]) if argv and argv[0] in SUBCOMMANDS else None
    for command in only or ():
        if command.passthrough is not None:
            try:
                return command.passthrough(argv[1:])
            except KeyboardInterrupt:
                return 130
    parser = build_parser(only)
    args = parser.parse_args(argv)
    return ended(args.command, lambda: args._run(args))


def ended(command: str, run: Callable[[], int]) -> int:
    """run()'s exit code as `sm12x COMMAND` ends: a UserError is its one line and
    its code, Ctrl-C is 130 (a mock start forked from a zygote ends the same way)."""
    try:
        return run()
    except UserError as exc:
        print(f"sm12x {command}: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
