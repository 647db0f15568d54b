"""`sm12x launch`: the image's entrypoint.

Picks the recipe (SM12X_RECIPE=<name>, or auto from nvidia-smi), renders the
sglang command from it and the settings (sm12x.settings: flags, environment,
.env), and replaces itself with that command (exec, so sglang is the
container's main process and gets its signals). --dry-run prints the command
instead, ready to paste; --explain also says where each value came from.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from sm12x import __version__, settings
from sm12x import sps_tables as store
from sm12x.apikey import ENV as KEY_ENV
from sm12x.apikey import exposure_problem
from sm12x.cli import Command
from sm12x.errors import UserError
from sm12x.gpucode import firstboot
from sm12x.launch import configuration, gpus
from sm12x.launch.judge import Judged, judge
from sm12x.launch.render import (
    HEAD_ADDR_ENV,
    NODE_RANK_ENV,
    LaunchContext,
    LaunchPlan,
    build_launch,
)
from sm12x.recipe import Recipe, load_all, load_recipe, warnings_for
from sm12x.recipe.lints import home_track, track_refusal
from sm12x.settings import Loaded
from sm12x.sglang_parser import parser_for
from sm12x.versions import load_versions, track_of_sglang

AUTO = "auto"


def _say(message: str) -> None:
    print(f"sm12x launch: {message}", file=sys.stderr)


def select_recipe(
    choice: str, nvidia_smi: str | None = None, origin: object = "default"
) -> tuple[Recipe, str]:
    """The recipe to run and a sentence saying why (origin: where the choice came from)."""
    if choice != AUTO:
        return load_recipe(choice), f"recipe {choice} (SM12X_RECIPE, from {origin})"
    pick = gpus.pick_recipe(gpus.query_gpus(nvidia_smi), load_all())
    return pick.recipe, f"SM12X_RECIPE=auto picked {pick.recipe.name}: {pick.reason}"


def following(loaded: Loaded, recipe: Recipe) -> Loaded:
    """The settings with the recipe's own track where SM12X_TRACK does not say one
    (sm12x.recipe.lints.home_track): a recipe that runs only on the current
    track is rendered and judged for it, as its compose profile and manifest run it."""
    if loaded.settings.track is not None:
        return loaded
    home = home_track(recipe)
    if home == loaded.settings.track_name:
        return loaded
    return replace(loaded, settings=loaded.settings.model_copy(update={"track": home}))


def refuse_track(recipe: Recipe, loaded: Loaded) -> None:
    """The track refusal, first and once: a recipe whose `tracks` exclude
    SM12X_TRACK, before anything else is judged (its flags would only fail
    later, in the other sglang's parser)."""
    problem = track_refusal(recipe, loaded.settings.track_name)
    if problem:
        raise UserError(problem)


def gpu_name() -> str | None:
    """The name nvidia-smi gives this machine's GPUs (the first), None when it cannot
    tell: a tuned table is then not judged by its GPU."""
    try:
        found = gpus.query_gpus()
    except gpus.GpuQueryError:
        return None
    return found[0].name if found else None


def table_finder(loaded: Loaded) -> configuration.Finder:
    """How this launch looks up a tuned SPS table (sm12x.sps_tables): for the
    track's image as this Python has it, this sm12x and these GPUs."""
    s = loaded.settings
    have = installed_sglang()
    sglang = have or load_versions(s.track_name)["SGLANG_VERSION"]

    def find(recipe: Recipe) -> store.Lookup:
        key = store.key_for(
            recipe, track=s.track_name, sglang=sglang, sm12x=__version__, gpu=gpu_name()
        )
        return store.lookup(s.cache_dir, key)

    return find


def choose_configuration(
    recipe: Recipe, loaded: Loaded, *, profiling: bool, dry_run: bool, say
) -> Recipe:
    """SM12X_CONFIGURATION applied to the recipe picked (sm12x.launch.configuration)."""
    s = loaded.settings
    resolved = configuration.resolve(
        recipe,
        s.configuration,
        s.track_name,
        table_finder(loaded),
        profiling=profiling,
        dry_run=dry_run,
    )
    if resolved.warning:
        say(f"warning: {resolved.warning}")
    if resolved.notice:
        say(resolved.notice)
    if not profiling and configuration.reads_tuned_table(resolved.recipe):
        found = table_finder(loaded)(resolved.recipe)
        problem = found.table and profiled_without_table(found.table)
        if problem:
            say(f"warning: {problem}")
    return resolved.recipe


def profiled_without_table(table: Path) -> str | None:
    """Why the tuned table may be flat, from its sidecar's record of the table the
    profiling server ran with (sm12x tune's `profiled_with`): on compact verify
    without one sglang verifies every row, so every budget the profiler pinned timed
    the same full-width step (docs/tune.md)."""
    try:
        record = json.loads(store.meta_path(table).read_text(encoding="utf-8")).get("profiled_with")
    except (OSError, ValueError, AttributeError):
        record = None
    if not isinstance(record, dict):
        said = "does not record which table the profiling server ran with"
    elif record.get("kind") == "none":
        said = "was profiled on a server without an SPS table"
    else:
        return None
    return (
        f"the tuned SPS table {table} {said}: sglang then ignores the pinned budgets and "
        "the table may be flat; run `sm12x tune --fresh` to measure it anew"
    )


def gpu_mismatch(recipe: Recipe) -> str | None:
    """A warning when an explicitly named recipe does not fit the GPUs seen.

    Only a warning: the user named the recipe, and nvidia-smi may be absent
    (a dry run on a laptop) or see other GPUs than sglang will use.
    """
    try:
        found = gpus.query_gpus()
    except gpus.GpuQueryError:
        return None
    hw = recipe.hardware
    fits = len(found) >= hw.gpus_per_node and all(
        g.model == hw.gpu and g.compute_capability == hw.compute_capability for g in found
    )
    if fits:
        return None
    return (
        f"{recipe.name} expects {hw.gpus_per_node}x {hw.gpu} ({hw.sm}) per node but this "
        f"machine has {gpus.describe_gpus(found)}: check SM12X_RECIPE"
    )


def check_multinode(recipe: Recipe, ctx: LaunchContext) -> None:
    if not recipe.is_multinode:
        return
    missing = [
        name
        for name, value in ((NODE_RANK_ENV, ctx.node_rank), (HEAD_ADDR_ENV, ctx.head_addr))
        if value is None
    ]
    if missing:
        raise UserError(
            f"{recipe.name} runs on {recipe.hardware.nodes} nodes: set {' and '.join(missing)} "
            f"({NODE_RANK_ENV} 0 on the head, 1 on the other; {HEAD_ADDR_ENV} the head's "
            f"address on the RoCE link). With compose use the profiles {recipe.name}-node0 and "
            f"{recipe.name}-node1, one per machine"
        )


def check_env(plan: LaunchPlan, environ: Mapping[str, str]) -> None:
    # Rank and head address placeholders are check_multinode's to explain.
    missing = [ref for ref in plan.unresolved(environ) if ref.name in plan.recipe.env]
    if not missing:
        return
    parts = []
    for ref in missing:
        example = plan.recipe.env[ref.name].example
        parts.append(ref.name + (f" (e.g. {example})" if example else ""))
    them = "it" if len(parts) == 1 else "them"
    raise UserError(
        f"{plan.recipe.name} needs {', '.join(parts)} in the environment: set {them} in .env"
    )


def check_model_path(plan: LaunchPlan) -> None:
    path = plan.context.model_path
    if path is None:
        return
    if not (Path(path) / "config.json").is_file():
        model = plan.recipe.model
        raise UserError(
            f"no checkpoint at {path} (config.json is missing): point SM12X_MODEL_DIR in .env at "
            f"the folder from `{model.download_command()}`"
        )


# Files a container runtime puts in every container (Docker, Podman).
CONTAINER_MARKERS = ("/.dockerenv", "/run/.containerenv")
NET_CLASS = Path("/sys/class/net")


def in_container() -> bool:
    return any(Path(marker).exists() for marker in CONTAINER_MARKERS)


def own_network() -> bool:
    """True when every interface but loopback is one end of a veth pair (its
    iflink, the peer on the host, differs from its ifindex): the network
    namespace of a bridged container. A host's own namespace, which a
    host-network container shares, has a physical NIC or a bridge, whose
    iflink is itself."""
    try:
        interfaces = [p for p in NET_CLASS.iterdir() if p.name != "lo"]
        links = [
            ((p / "ifindex").read_text().strip(), (p / "iflink").read_text().strip())
            for p in interfaces
        ]
    except OSError:
        return False
    return bool(links) and all(index != link for index, link in links)


def exposed_address(bound: str, loaded: Loaded) -> str:
    """Where clients can reach sglang: the address it binds (read from its
    parsed arguments, after recipe, settings and flags after --).

    One exception: inside a bridged container sglang must bind the
    unspecified address of the container's own network, and what the host
    exposes is compose's published address, SM12X_BIND. That is trusted only
    inside a container on a network of its own: on bare metal (or a
    host-network container) SM12X_BIND, which .env.example always sets, says
    nothing about what sglang binds.
    """
    unspecified = bound.strip("[]") in ("0.0.0.0", "::")
    if unspecified and loaded.given("bind") and in_container() and own_network():
        return loaded.settings.bind
    return bound


def check_exposure(plan: LaunchPlan, loaded: Loaded, judged: Judged) -> None:
    """Refuse to serve beyond loopback without a key (sm12x.apikey)."""
    address = exposed_address(judged.host, loaded)
    problem = exposure_problem(
        address, plan.context.api_key, loaded.settings.insecure_no_api_key, plan.recipe.name
    )
    if problem:
        raise UserError(problem)


def installed_sglang() -> str | None:
    """The version of the sglang this Python runs: None when there is none, '' when
    a package is there without metadata (a source tree put on PYTHONPATH)."""
    if importlib.util.find_spec("sglang") is None:
        return None
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return ""


def check_track(loaded: Loaded, dry_run: bool, recipe: Recipe | None = None) -> None:
    """The track (SM12X_TRACK) names an sglang release; refuse to serve another.

    In the image the track's image is the track (the Dockerfile sets SM12X_TRACK);
    compose passes SM12X_TRACK from .env, so an SM12X_IMAGE of another track is
    caught here rather than served under the wrong name."""
    track = loaded.settings.track_name
    pins = load_versions(track)
    want, image = pins["SGLANG_VERSION"], pins["SM12X_IMAGE"]
    have = installed_sglang()
    if have is None:
        if not dry_run:
            raise UserError(
                f"sglang is not installed for {sys.executable}: run sm12x launch in "
                f"the {track} track's image ({image}), or install sglang {want}"
            )
        return
    if have == "":
        _say(
            f"warning: this sglang has no package metadata: cannot tell whether it is the "
            f"{track} track's sglang {want}"
        )
        return
    if have != want:
        other = track_of_sglang(have)
        if other and (recipe is None or track_refusal(recipe, other) is None):
            fix = f"set SM12X_TRACK={other}"
        elif other:
            # That image's track cannot run the recipe (an SM12X_IMAGE of the
            # pinned track under a current-only profile): the image must change.
            fix = f"point SM12X_IMAGE at the {track} track's image (or unset it)"
        else:
            fix = f"install sglang {want}"
        message = (
            f"SM12X_TRACK={track} (from {loaded.origin('track')}) serves sglang {want}, "
            f"but this Python has sglang {have}: run the {track} track's image "
            f"({image}; compose picks it from SM12X_TRACK unless SM12X_IMAGE names "
            f"another), or {fix}"
        )
        if not dry_run:
            raise UserError(message)
        _say(f"warning: {message}")


def settings_env(loaded: Loaded) -> dict[str, str]:
    """What the settings give sglang's environment: the key, where it came from the
    environment, .env or a file (sm12x.keyed reads it from SM12X_API_KEY)."""
    key = loaded.settings.key()
    return {KEY_ENV: key} if key else {}


def process_env(environ: Mapping[str, str], loaded: Loaded) -> dict[str, str]:
    """This process's environment with the settings' variables over it: what the
    judge reads (the environment sglang gets is LaunchPlan.launch_env)."""
    return {**environ, **settings_env(loaded)}


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    loaded = settings.from_args(args, "launch", environ=environ)
    dry_run = args.dry_run or args.explain
    if args.explain:
        sys.stdout.write(settings.explain(loaded, "launch"))
    choice = loaded.settings.recipe
    recipe, why = select_recipe(choice, origin=loaded.origin("recipe"))
    _say(why)
    loaded = following(loaded, recipe)
    refuse_track(recipe, loaded)
    if args.sps_profile and args.no_spec:
        raise UserError(
            "--sps-profile profiles speculative decoding: it does not go with --no-spec"
        )
    recipe = choose_configuration(
        recipe, loaded, profiling=args.sps_profile, dry_run=dry_run, say=_say
    )
    if choice != AUTO and not dry_run:
        mismatch = gpu_mismatch(recipe)
        if mismatch:
            _say(f"warning: {mismatch}")
    for finding in warnings_for(recipe):
        _say(str(finding))

    ctx = LaunchContext.from_settings(loaded)
    if args.no_spec:
        ctx = replace(ctx, speculative=False)
        _say("--no-spec: speculative decoding off (the reference for verify --compare-url)")
    if args.sps_table and not args.sps_profile:
        raise UserError("--sps-table names tune's phase-2 table: it goes with --sps-profile")
    if args.sps_profile:
        ctx = replace(ctx, sps_profile=True, sps_table=args.sps_table)
    plan = build_launch(recipe, ctx)
    extra = list(args.extra)
    if extra and extra[0] == "--":
        extra = extra[1:]
    variables = loaded.variables()
    exec_env, notes = plan.exec_env(process_env(environ, loaded))
    # sglang's own parser judges the recipe and the flags after -- together.
    parser, source = parser_for(
        load_versions(loaded.settings.track_name)["SGLANG_VERSION"], installed_sglang()
    )
    judged = judge(parser, source, plan, extra, variables, exec_env)
    # Exactly what sglang gets: refused here, in a dry run too, when the caller
    # set a variable sglang reads that the recipe and the allowlist do not give.
    launch_env = plan.launch_env(environ, settings_env(loaded))
    # A dry run shows what is missing as "$NAME" placeholders; a launch refuses.
    for check in (
        lambda: check_multinode(recipe, ctx),
        lambda: check_env(plan, variables),
        lambda: check_exposure(plan, loaded, judged),
    ):
        try:
            check()
        except UserError as exc:
            if not dry_run:
                raise
            _say(f"warning: {exc.message}")
    for note in notes:
        _say(note)
    if extra:
        _say(f"appending flags not in the recipe: {' '.join(extra)}")

    python = sys.executable
    if dry_run:
        check_track(loaded, dry_run=True, recipe=recipe)
        if args.explain:
            site = [n for n, var in recipe.env.items() if var.from_host]
            sys.stdout.write(
                settings.explain_variables(loaded, site, f"{recipe.name}'s site variables")
            )
            sys.stdout.write(plan.explain())
        text = plan.shell(python=python)
        if extra:
            import shlex

            text = text.rstrip("\n") + "".join(f" \\\n  {shlex.quote(a)}" for a in extra) + "\n"
        sys.stdout.write(text)
        return 0
    check_model_path(plan)
    check_track(loaded, dry_run=False, recipe=recipe)
    command = plan.command(python=python, environ=variables) + extra
    firstboot.announce(recipe.hardware.compute_capability, launch_env, _say)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(python, command, launch_env)
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
