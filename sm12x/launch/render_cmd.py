"""`sm12x render RECIPE`: the launch command for people who do not use Docker.

`sm12x render --k8s RECIPE|router|all`: Kubernetes manifests (sm12x.k8s).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from sm12x.cli import Command
from sm12x.errors import UserError
from sm12x.launch.render import LaunchContext, build_launch
from sm12x.recipe import load_recipe, warnings_for

K8S_ONLY = ("namespace", "image", "model_host_path", "model_pvc", "rdma_resource", "out")
LAUNCH_ONLY = ("node_rank", "head_addr", "model_path", "host", "port")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def run_k8s(args: argparse.Namespace) -> int:
    from sm12x import k8s

    given = [_flag(n) for n in LAUNCH_ONLY if getattr(args, n) is not None]
    given += ["--no-spec"] if args.no_spec else []
    if given or args.explain:
        raise UserError(
            f"{', '.join(given) or '--explain'} does not go with --k8s: the pods take rank, "
            "address and port from Kubernetes"
        )
    if args.model_pvc and args.model_host_path:
        raise UserError("--model-pvc or --model-host-path, not both")
    fields = {n: getattr(args, n) for n in K8S_ONLY[:-1] if getattr(args, n) is not None}
    opts = k8s.K8sOptions(**fields)
    if args.recipe == k8s.ALL:
        if args.out is None:
            raise UserError("--k8s all writes a folder: add --out DIR (e.g. deploy/k8s)")
        for path in k8s.write_tree(args.out, opts):
            print(f"wrote {path}")
        return 0
    if args.out is not None:
        raise UserError("--out goes with --k8s all; one recipe prints to stdout")
    sys.stdout.write(k8s.render(args.recipe, opts))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.k8s:
        return run_k8s(args)
    given = [_flag(n) for n in K8S_ONLY if getattr(args, n) is not None]
    if given:
        raise UserError(f"{', '.join(given)} only goes with --k8s")
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
    if args.no_spec:
        ctx = replace(ctx, speculative=False)
    plan = build_launch(recipe, ctx)
    if args.explain:
        sys.stdout.write(plan.explain())
    sys.stdout.write(plan.shell())
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "recipe",
        metavar="RECIPE",
        help="recipe name (see recipes/) or file; with --k8s also `router` or `all`",
    )
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
        "--no-spec",
        action="store_true",
        help="without speculative decoding (the reference for `sm12x verify --compare-url`)",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="first list each flag and variable with why it is there",
    )
    k8s = parser.add_argument_group(
        "Kubernetes (--k8s)",
        "Manifests instead of a command: a Deployment per single-node recipe, a "
        "LeaderWorkerSet for a multi-node one, `router` for sglang-router with service "
        "discovery, `all --out DIR` for every one (deploy/k8s/ is this, checked in).",
    )
    k8s.add_argument("--k8s", action="store_true", help="print Kubernetes manifests")
    k8s.add_argument("--namespace", help="namespace of every object (default sm12x)")
    k8s.add_argument("--image", help="the sm12x image (default: SM12X_IMAGE in versions.env)")
    k8s.add_argument(
        "--model-host-path",
        help="the checkpoint folder on each GPU node, mounted read-only "
        "(default /srv/models/DeepSeek-V4-Flash-0731)",
    )
    k8s.add_argument(
        "--model-pvc", help="a PersistentVolumeClaim with the checkpoint instead, read-only"
    )
    k8s.add_argument(
        "--rdma-resource",
        help="an RDMA device plugin resource (e.g. rdma/rdma_shared_device_a) for multi-node "
        "pods instead of the host's /dev/infiniband and privileged mode",
    )
    k8s.add_argument("--out", type=Path, help="with `all`: the folder to write")


COMMAND = Command(
    name="render",
    help="print the sglang command of a recipe (no Docker needed), or --k8s manifests",
    add_arguments=add_arguments,
    run=run,
)
