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
from sm12x.fields import HostName, HostPort, NodeRank, Port, build_model, option_type
from sm12x.launch.render import LaunchContext, build_launch
from sm12x.recipe import load_recipe, warnings_for

K8S_VALUES = (
    "namespace",
    "image",
    "model_host_path",
    "model_pvc",
    "cache_pvc",
    "rdma_resource",
    "roce_network",
    "api_key_secret",
)
K8S_SWITCHES = ("host_network", "insecure_no_api_key")
K8S_ONLY = (*K8S_VALUES, *K8S_SWITCHES, "out")
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
    fields = {n: getattr(args, n) for n in K8S_VALUES if getattr(args, n) is not None}
    fields.update({n: True for n in K8S_SWITCHES if getattr(args, n)})
    opts = build_model(k8s.K8sOptions, fields, _flag)
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
    given = [_flag(n) for n in K8S_ONLY if getattr(args, n) not in (None, False)]
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
        "--node-rank",
        type=option_type(NodeRank),
        help="multi-node: this node's rank (default $NODE_RANK)",
    )
    parser.add_argument(
        "--head-addr",
        type=option_type(HostPort),
        help="multi-node: the head node's address (default $HEAD_ADDR)",
    )
    parser.add_argument(
        "--model-path",
        help="a local checkpoint folder (default: the Hub id at the recipe's revision)",
    )
    parser.add_argument(
        "--host",
        type=option_type(HostName),
        help="address to serve on (default $SM12X_HOST or 127.0.0.1)",
    )
    parser.add_argument(
        "--port",
        type=option_type(Port),
        help="port to serve on, 1-65535 (default $SM12X_PORT or the recipe's)",
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
        "--cache-pvc",
        help="a PersistentVolumeClaim for the JIT caches, kept across pods "
        "(default: an emptyDir, recompiled when a pod is replaced)",
    )
    k8s.add_argument(
        "--rdma-resource",
        help="the RDMA device plugin resource that gives multi-node pods /dev/infiniband "
        "(default rdma/rdma_shared_device_a)",
    )
    k8s.add_argument(
        "--roce-network",
        help="the Multus network (NetworkAttachmentDefinition) on the RoCE link for "
        "multi-node pods (default sm12x-roce)",
    )
    k8s.add_argument(
        "--host-network",
        action="store_true",
        help="multi-node pods use the node's network instead of --roce-network "
        "(no NetworkPolicy applies to them: the API key is all that protects them)",
    )
    k8s.add_argument(
        "--api-key-secret",
        help="the Secret (key api-key) with the API key (default sm12x-api-key)",
    )
    k8s.add_argument(
        "--insecure-no-api-key",
        action="store_true",
        help="render an OPEN deployment: no API key, anyone in the namespace can use it",
    )
    k8s.add_argument("--out", type=Path, help="with `all`: the folder to write")


COMMAND = Command(
    name="render",
    help="print the sglang command of a recipe (no Docker needed), or --k8s manifests",
    add_arguments=add_arguments,
    run=run,
)
