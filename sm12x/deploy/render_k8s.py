"""`sm12x render`, with its --k8s form: `sm12x render --k8s RECIPE|router|all`.

Without --k8s the command prints the launch command (sm12x.launch.render_cmd,
which also defines every argument of both). With it, the Kubernetes manifests
(sm12x.deploy.k8s), each written from the recipe's deployment plan
(sm12x.launch.plan.deployment). The command is registered here, on the deploy
side, because the manifests need the plan: the launcher never imports deploy.
"""

from __future__ import annotations

import argparse
import sys

from sm12x import settings
from sm12x.cli import Command
from sm12x.deploy import k8s
from sm12x.errors import UserError
from sm12x.fields import build_model
from sm12x.launch import render_cmd
from sm12x.launch.render_cmd import K8S_SWITCHES, K8S_VALUES, LAUNCH_ONLY, flag


def run_k8s(args: argparse.Namespace) -> int:
    given = [flag(n) for n in LAUNCH_ONLY if getattr(args, n) is not None]
    given += ["--no-spec"] if args.no_spec else []
    if given or args.explain:
        raise UserError(
            f"{', '.join(given) or '--explain'} does not go with --k8s: the pods take rank, "
            "address and port from Kubernetes"
        )
    if args.model_pvc and args.model_host_path:
        raise UserError("--model-pvc or --model-host-path, not both")
    if args.recipe is None:
        raise UserError("--k8s needs what to render: a recipe name, `router` or `all`")
    loaded = settings.from_args(args, "render")
    fields = {n: getattr(args, n) for n in K8S_VALUES if getattr(args, n) is not None}
    # Each recipe's own track's image unless SM12X_TRACK or SM12X_IMAGE says which
    # (an image named alone is taken as SM12X_TRACK's, as compose and launch take it).
    if loaded.settings.image is not None or loaded.settings.track is not None:
        fields["image"] = loaded.settings.image_ref()
        fields["track"] = loaded.settings.track_name
    fields.update({n: True for n in K8S_SWITCHES if getattr(args, n)})
    opts = build_model(k8s.K8sOptions, fields, flag)
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
    return run_k8s(args) if args.k8s else render_cmd.run(args)


COMMAND = Command(
    name="render",
    help="print the sglang command of a recipe (no Docker needed), or --k8s manifests",
    add_arguments=render_cmd.add_arguments,
    run=run,
)
