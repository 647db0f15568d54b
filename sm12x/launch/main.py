"""`sm12x launch`: the image's entrypoint.

Builds the launch plan (sm12x.launch.plan: the recipe, SM12X_RECIPE=<name> or
auto from nvidia-smi, its track and configuration, the sglang command judged
by sglang's parser) from the settings (sm12x.settings: flags, environment,
.env), and replaces itself with that command (exec, so sglang is the
container's main process and gets its signals). --dry-run prints the command
instead, ready to paste; --explain also says where each value came from.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping

from sm12x import settings
from sm12x.cli import Command
from sm12x.gpucode import firstboot
from sm12x.launch import plan as launch_plan


def _say(message: str) -> None:
    print(f"sm12x launch: {message}", file=sys.stderr)


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    loaded = settings.from_args(args, "launch", environ=environ)
    dry_run = args.dry_run or args.explain
    if args.explain:
        sys.stdout.write(settings.explain(loaded, "launch"))
    plan = launch_plan.plan(
        loaded,
        command="launch",
        say=_say,
        dry_run=dry_run,
        no_spec=args.no_spec,
        sps_profile=args.sps_profile,
        sps_table=args.sps_table,
        extra=args.extra,
        environ=environ,
    )
    assert plan.loaded is not None and plan.sglang_env is not None
    loaded, extra = plan.loaded, list(plan.extra)
    python = sys.executable
    if dry_run:
        launch_plan.check_track(loaded, dry_run=True, recipe=plan.recipe, say=_say)
        if args.explain:
            sys.stdout.write(launch_plan.explain_site(plan))
            sys.stdout.write(plan.explain())
        text = plan.shell(python=python)
        if extra:
            text = text.rstrip("\n") + "".join(f" \\\n  {shlex.quote(a)}" for a in extra) + "\n"
        sys.stdout.write(text)
        return 0
    launch_plan.check_model_path(plan)
    launch_plan.check_track(loaded, dry_run=False, recipe=plan.recipe, say=_say)
    command = plan.command(python=python, environ=loaded.variables()) + extra
    firstboot.announce(plan.recipe.hardware.compute_capability, plan.sglang_env, _say)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(python, command, dict(plan.sglang_env))
    return 0  # not reached


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the environment and command (shell-quoted, ready to paste) and exit",
    )
    parser.add_argument(
        "--no-spec",
        action="store_true",
        help="the recipe without speculative decoding (its dspark flags dropped): the "
        "reference server for `sm12x verify --compare-url`",
    )
    parser.add_argument(
        "--sps-profile",
        action="store_true",
        help="the rig's configuration that reads a tuned SPS table, in the mode sglang's SPS "
        "profiler needs (static verify, per-step records, speculation accepting nothing): "
        "what `sm12x tune` boots; never for serving",
    )
    parser.add_argument(
        "--sps-table",
        metavar="PATH",
        help="with --sps-profile: the 1-D table of tune's phase 1 (its diagonal sweep), "
        "which compact verify needs to honour the budgets phase 2 pins",
    )
    settings.add_arguments(
        parser,
        "launch",
        explain_help="print each setting with where it came from, each flag and variable "
        "with why it is there, and the command; start nothing",
    )
    parser.add_argument(
        "extra",
        nargs="*",
        metavar="-- SGLANG_FLAG",
        help="after --: flags appended to the recipe's (sglang keeps the last of a repeated flag)",
    )


COMMAND = Command(
    name="launch",
    help="start sglang for a recipe (the image's entrypoint)",
    description="Start sglang for the recipe named by SM12X_RECIPE (--recipe), or with auto "
    "the one that fits the GPUs nvidia-smi lists. Multi-node recipes read SM12X_NODE_RANK and "
    "SM12X_HEAD_ADDR.",
    add_arguments=add_arguments,
    run=run,
)
