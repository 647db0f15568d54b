"""`sm12x verify`: the post-deploy gate, the same as `python -m verify`.

verify has its own argument parser (verify/cli.py), so everything after
`sm12x verify` is handed to verify.cli.main() unchanged and its exit status
is returned: 0 every required check passed, 1 a check failed, 2 bad input
or no server, 3 boot mode could not start it.
"""

from __future__ import annotations

import argparse

from sm12x.cli import Command


def passthrough(argv: list[str]) -> int:
    from verify.cli import main

    return main(argv)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Only for `sm12x --help`; main() hands verify's arguments over before parsing.
    parser.add_argument("args", nargs=argparse.REMAINDER, help="see `sm12x verify --help`")


def run(args: argparse.Namespace) -> int:
    return passthrough(list(args.args))


COMMAND = Command(
    name="verify",
    help="check a running server end to end (health, chat, reasoning, tools, DSPARK, soak)",
    add_arguments=add_arguments,
    run=run,
    passthrough=passthrough,
)
