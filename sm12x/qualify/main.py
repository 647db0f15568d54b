"""`sm12x qualify`: one command from a rig to a checked, shareable result.

    sm12x qualify rtx-pro-6000-tp4 --boot-command "sm12x launch"   # boot, qualify, stop
    sm12x qualify auto --url http://127.0.0.1:30000                # a server already up
    sm12x qualify --check qualify-rtx-pro-6000-tp4                 # check a bundle

It runs doctor (failing fast with its fixes), verify's baseline (chat,
streaming, tools, reasoning, acceptance, soak), a full-load soak (passing only
when num_running_reqs holds the recipe's per-rank limit on every DP rank for
--hold seconds), bench at the anchors' concurrencies with their workload plus
one long-context point, then the rig's throughput configuration (tune, a
relaunch with the table, verify, the full-load soak and bench again). The
bundle (a folder of JSON and PNG) holds every step's verdict and per-request
records, verify's JUnit, the charts and the provenance; run the same command
again after a kill or --deadline and it resumes where it stopped.

Exit status: 0 qualified; 2 qualified, slow (throughput below the anchor by
more than --tolerance); 1 not qualified, bad input, or stopped by --deadline.
`--check`: 0 the bundle is complete and consistent, 1 one line per failure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sm12x import settings
from sm12x.cli import Command
from sm12x.fields import NonNegativeFloat, PositiveFloat, PositiveFraction, count, option_type

EXIT = {"qualified": 0, "qualified, slow": 2, "not qualified": 1}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target", nargs="?", metavar="RECIPE|auto",
        help="the recipe to qualify, or auto (from the GPUs here); default SM12X_RECIPE",
    )  # fmt: skip
    parser.add_argument(
        "--check", type=Path, metavar="BUNDLE",
        help="check a bundle: recompute its figures from its records, its schema, "
        "recipe hash, steps and provenance; one line per failure",
    )  # fmt: skip
    parser.add_argument(
        "--for-verified", action="store_true",
        help="with --check: also refuse what cannot back status: verified (a mock's "
        "bundle, a step skipped, provenance incomplete)",
    )  # fmt: skip
    server = parser.add_argument_group("server")
    server.add_argument("--url", help="qualify the server there (no boot, no relaunch)")
    server.add_argument(
        "--boot-command",
        help="the command that starts the baseline server (default: the recipe's compose "
        "service, as tune boots)",
    )
    server.add_argument("--compose-file", help="compose file for the compose boot")
    server.add_argument(
        "--tune-boot-command", help="the command that starts it in profiling mode (for tune)"
    )
    server.add_argument(
        "--throughput-boot-command",
        help="the command that starts the throughput configuration (reading the table)",
    )
    server.add_argument(
        "--tune-args", metavar="ARGS",
        help="more flags for sm12x tune in the throughput phase, one string "
        "(e.g. \"--max-batch-size 8\")",
    )  # fmt: skip
    server.add_argument(
        "--ssh", metavar="HOST",
        help="multi-node: start the other node's command there over ssh (BatchMode) "
        "and read its GPUs; without it qualify prints the command to run there",
    )  # fmt: skip
    server.add_argument("--boot-timeout", type=option_type(PositiveFloat), default=5400.0)
    server.add_argument(
        "--no-doctor", action="store_true",
        help="skip doctor (the step reads skipped: such a bundle cannot back verified)",
    )  # fmt: skip
    run = parser.add_argument_group("measuring")
    run.add_argument(
        "--tolerance", type=option_type(PositiveFraction), default=0.10,
        help="throughput below anchor x (1 - this) reads 'qualified, slow' (default 0.10)",
    )  # fmt: skip
    run.add_argument(
        "--hold", type=option_type(PositiveFloat), default=30.0,
        help="seconds every DP rank must hold its request limit in the full-load soak",
    )  # fmt: skip
    run.add_argument("--full-load-output", type=count, default=1024, metavar="TOKENS")
    run.add_argument(
        "--prompts-per-concurrency", type=count, default=5, metavar="N",
        help="requests per run: N x the concurrency (default 5)",
    )  # fmt: skip
    run.add_argument("--concurrency", type=count, nargs="+", help="default: the anchors'")
    run.add_argument("--input-len", type=count, help="default: the anchors'")
    run.add_argument("--output-len", type=count, help="default: the anchors'")
    run.add_argument("--long-context-len", type=count, default=120000, metavar="TOKENS")
    run.add_argument("--long-context-output", type=count, default=256, metavar="TOKENS")
    run.add_argument("--soak-concurrency", type=count, default=64)
    run.add_argument("--soak-rounds", type=count, default=3)
    out = parser.add_argument_group("bundle, time and resumption")
    out.add_argument("--out", type=Path, help="the bundle folder (default qualify-RECIPE)")
    out.add_argument("--fresh", action="store_true", help="discard an unfinished run's steps")
    out.add_argument(
        "--deadline", type=option_type(NonNegativeFloat), default=6 * 3600.0,
        help="seconds the whole run may take (default 6 h); run it again to resume",
    )  # fmt: skip
    # --recipe, --bind/--port, --api-key, --model-dir, --track, --cache-dir, ...:
    # the settings tune reads (qualify boots and tunes as tune does).
    settings.add_arguments(parser, "qualify")


def run(args: argparse.Namespace) -> int:
    if args.target:
        args.recipe = args.target
    if args.explain:
        loaded = settings.from_args(args, "qualify")
        sys.stdout.write(settings.explain(loaded, "qualify"))
        return 0
    if args.check is not None:
        from sm12x.qualify import check

        return check.main(args.check, for_verified=args.for_verified)
    from sm12x.qualify import run as qualify_run

    return EXIT[qualify_run.qualify(args)]


COMMAND = Command(
    name="qualify",
    help="qualify a rig: doctor, verify, full load, bench, tune; a checked bundle",
    description=__doc__.split("\n\n")[0].replace("\n", " "),
    add_arguments=add_arguments,
    run=run,
)
