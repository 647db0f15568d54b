"""`sm12x`: one command, subcommands registered below.

Adding a subcommand: write a module that defines
    COMMAND = Command(name=..., help=..., add_arguments=fn(parser), run=fn(args) -> int)
and add its module path to SUBCOMMANDS. Nothing else changes here.

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


SUBCOMMANDS: tuple[str, ...] = (
    "sm12x.launch.main",
    "sm12x.deploy.render_k8s",
    "sm12x.launch.health",
    "sm12x.deploy.router",
    "sm12x.verify_cmd",
    "sm12x.bench.main",
    "sm12x.doctor.main",
    "sm12x.tune.main",
    "sm12x.deploy.exposure",
    "sm12x.mock.command",
    "sm12x.watch.main",
    "sm12x.qualify.main",
)


def commands() -> list[Command]:
    return [importlib.import_module(module).COMMAND for module in SUBCOMMANDS]


def build_parser() -> argparse.ArgumentParser:
    parser = StrictParser(
        prog="sm12x",
        description="Serve DeepSeek-V4-Flash-0731 with SGLang + DSpark on sm_120/sm_121.",
    )
    parser.add_argument("--version", action="version", version=f"sm12x {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands():
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
    if argv:
        for command in commands():
            if command.passthrough is not None and argv[0] == command.name:
                try:
                    return command.passthrough(argv[1:])
                except KeyboardInterrupt:
                    return 130
    parser = build_parser()
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
