"""`sm12x render RECIPE`: the launch command for people who do not use Docker.

The same settings as `sm12x launch` (sm12x.settings: flags, environment,
.env), so with SM12X_MODEL_DIR in .env it serves that folder. A comment
first says which patches a stock sglang needs for the command to work
(patches/sglang/patches.toml, for the sglang version it targets).

`sm12x render --k8s RECIPE|router|all`: Kubernetes manifests, run by
sm12x.deploy.render_k8s, where the `render` command is registered: the
manifests are written from the launch plan, so the deploy side calls this
module, never the other way round. The arguments of both are defined here.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from sm12x import settings
from sm12x.errors import UserError
from sm12x.launch import plan as launch_plan
from sm12x.patches import series as patch_series
from sm12x.versions import load_versions, track_of_sglang

K8S_VALUES = (
    "namespace",
    "model_host_path",
    "model_pvc",
    "cache_pvc",
    "rdma_resource",
    "roce_network",
    "api_key_secret",
)
K8S_SWITCHES = ("host_network", "insecure_no_api_key")
K8S_ONLY = (*K8S_VALUES, *K8S_SWITCHES, "out")
LAUNCH_ONLY = ("node_rank", "head_addr", "model_dir", "host", "port", "bind", "cache_dir", "sglang")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def run(args: argparse.Namespace) -> int:
    """`sm12x render RECIPE`: the launch command (the --k8s form is render_k8s's)."""
    given = [flag(n) for n in K8S_ONLY if getattr(args, n) not in (None, False)]
    if given:
        raise UserError(f"{', '.join(given)} only goes with --k8s")
    # Same settings as `sm12x launch`; the RECIPE argument is its --recipe.
    loaded = settings.from_args(
        args, "render", extra={"recipe": args.recipe}, flag_names={"recipe": "RECIPE"}
    )
    if args.explain:
        sys.stdout.write(settings.explain(loaded, "render"))
    say = lambda text: print(f"sm12x render: {text}", file=sys.stderr)  # noqa: E731
    # As the launch plans it, once: a throughput configuration without its tuned
    # table is refused here (`sm12x launch --dry-run` shows it with the refusal).
    plan = launch_plan.plan(loaded, command="render", say=say, no_spec=args.no_spec)
    assert plan.loaded is not None
    loaded = plan.loaded
    track = loaded.settings.track_name
    sglang = args.sglang or load_versions(track)["SGLANG_VERSION"]
    if args.explain:
        sys.stdout.write(launch_plan.explain_site(plan))
    source = "--sglang" if args.sglang else f"the {track} track, versions.env"
    sys.stdout.write(patches_comment(sglang, source))
    if args.explain:
        sys.stdout.write(plan.explain())
    sys.stdout.write(plan.shell())
    return 0


def patches_comment(version: str, source: str) -> str:
    """Shell comments: the patches a stock sglang `version` needs for this command."""
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", version):
        raise UserError(f"--sglang {version!r}: expected a version such as 0.5.16")
    track = track_of_sglang(version)
    flashinfer = load_versions(track)["FLASHINFER_VERSION"] if track else None
    try:
        plan = patch_series.plan(version, flashinfer)
    except patch_series.PatchSeriesError as exc:
        raise UserError(str(exc)) from None
    series = plan.series
    known = sorted({v for p in patch_series.load_patches() for v in p["sglang"]})
    if not plan.known:
        return (
            f"# sglang {version} ({source}): sm12x has no patch series for it (it has one for "
            f"{', '.join(known)}), and not every patch is retired for it. A stock sglang "
            "crashes with DSPARK on sm_12x; run it in the sm12x image, or a version sm12x "
            "patches.\n"
        )
    if not series:
        return (
            f"# A stock sglang {version} ({source}) with flashinfer {flashinfer} needs no "
            "patch of sm12x's series for this command: patches/sglang/patches.toml retires "
            "each one for it.\n"
        )
    lines = [
        (
            f"# A stock sglang {version} ({source}) needs these patches for this command "
            "(patches/sglang/patches.toml):"
        ),
        (
            "# the sm12x image has them; on this machine run python3 scripts/apply-patches "
            "from an sm12x checkout."
        ),
    ]
    lines += [f"#   {p['file']}: {p['title']}" for p in series]
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "recipe",
        metavar="RECIPE",
        nargs="?",
        help="recipe name (see recipes/) or file (default: SM12X_RECIPE, else auto: the one "
        "that fits the GPUs nvidia-smi lists); with --k8s also `router` or `all`",
    )
    parser.add_argument(
        "--no-spec",
        action="store_true",
        help="without speculative decoding (the reference for `sm12x verify --compare-url`)",
    )
    parser.add_argument(
        "--sglang",
        metavar="VERSION",
        help="the sglang version the command is for, which decides the patches it needs "
        "(default: the track's, versions.env: the image's)",
    )
    settings.add_arguments(
        parser,
        "render",
        explain_help="first list each setting with where it came from, then each flag and "
        "variable with why it is there",
        skip=("recipe",),
    )
    k8s = parser.add_argument_group(
        "Kubernetes (--k8s)",
        "Manifests instead of a command: a Deployment per single-node recipe, a "
        "LeaderWorkerSet for a multi-node one, `router` for sglang-router with service "
        "discovery, `all --out DIR` for every one (deploy/k8s/ is this, checked in).",
    )
    k8s.add_argument("--k8s", action="store_true", help="print Kubernetes manifests")
    k8s.add_argument("--namespace", help="namespace of every object (default sm12x)")
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
