"""`sm12x render RECIPE`: the launch command for people who do not use Docker."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from sm12x.cli import Command
from sm12x.launch.render import LaunchContext, build_launch
from sm12x.recipe import load_recipe, warnings_for


def run(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe)
    for finding in warnings_for(recipe):
        print(f"sm12x render: {finding}", file=sys.stderr)
    # Same inputs as `sm12x launch` (the environment), options win.
    ctx = LaunchContext.from_environ(os.environ)
    overrides = {
        "node_rank": args.node_rank,
        "head_addr": args.head_addr,
        "model_path": args.model_path,
        "host": args.host,
        "port": args.port,
    }
    ctx = replace(ctx, **{k: v for k, v in overrides.items() if v is not None})
    plan = build_launch(recipe, ctx)
    if args.explain:
        sys.stdout.write(plan.explain())
    sys.stdout.write(plan.shell())
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", metavar="RECIPE", help="recipe name (see recipes/) or file")
    parser.add_argument(
        "--node-rank", type=int, help="multi-node: this node's rank (default $NODE_RANK)"
    )
    parser.add_argument(
        "--head-addr", help="multi-node: the head node's address (default $HEAD_ADDR)"
    )
    parser.add_argument(
        "--model-path",
        help="a local checkpoint folder (default: the Hub id at the recipe's revision)",
    )
    parser.add_argument("--host", help="address to serve on (default $SM12X_HOST or 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, help="port to serve on (default $SM12X_PORT or the recipe's)"
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="first list each flag and variable with why it is there",
    )


COMMAND = Command(
    name="render",
    help="print the sglang command of a recipe (no Docker needed)",
    add_arguments=add_arguments,
    run=run,
)
