"""The launch plan: one recipe and its settings to what sglang runs, built once.

plan() takes the steps in order, once each: the recipe (SM12X_RECIPE, or auto
from nvidia-smi), the track (sm12x.recipe.tracks), the configuration
(SM12X_CONFIGURATION and the tuned table it may need), the recipe's warnings,
the render (sm12x.launch.render), ONE parse of the whole command by the
track's sglang parser with each token's dest kept, and the judge
(sm12x.launch.judge: ownership, keys, listeners, bounds and the lints on what
sglang reads), then the checks a launch needs (the environment, the exposure
rule). `sm12x launch` execs it, `sm12x render` prints it, `sm12x launch
--sps-profile` is tune's profiling boot, and deployment() is the plan of a
recipe as a deployment names it, which compose.yaml's services and `sm12x
render --k8s` take their facts from (sm12x.deploy); build_launch() is the
render alone, for the golden commands, qualify's hash and the stand-in server.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from sm12x import launch_env as environment
from sm12x import settings
from sm12x.apikey import ENV as KEY_ENV
from sm12x.apikey import exposure_problem
from sm12x.errors import UserError
from sm12x.launch import choice
from sm12x.launch.choice import AUTO
from sm12x.launch.judge import Judged, Parsed, judge
from sm12x.launch.render import (
    HEAD_ADDR_ENV,
    KEYED_MODULE,
    NODE_RANK_ENV,
    SGLANG_MODULE,
    EnvRef,
    LaunchContext,
    RenderedArg,
    RenderedEnv,
    render,
    shell_of,
    value_of,
)
from sm12x.patches import series as patch_series
from sm12x.recipe import Recipe, warnings_for
from sm12x.recipe.tracks import installed_fix
from sm12x.settings import Loaded, load
from sm12x.sglang_parser import description_path, parser_for
from sm12x.versions import load_versions, read_versions

Say = Callable[[str], None]


@dataclass(frozen=True)
class LaunchPlan:
    recipe: Recipe
    context: LaunchContext
    args: tuple[RenderedArg, ...]
    env: tuple[RenderedEnv, ...]
    # Set by plan(): the settings it was built from, the flags after --, the
    # one parse (each token's dest) and the judge's verdict.
    loaded: Loaded | None = None
    extra: tuple[str, ...] = ()
    parsed: Parsed | None = None
    judged: Judged | None = None
    notes: tuple[str, ...] = field(default=())
    # Exactly the environment sglang starts with (launch_env), for the exec.
    sglang_env: Mapping[str, str] | None = None

    # --- argv / env --------------------------------------------------------

    def argv(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """sglang's arguments. Without environ, placeholders print as "$NAME"."""
        out: list[str] = []
        for arg in self.args:
            out.append(arg.flag)
            if arg.value is not None:
                out.append(value_of(arg.value, environ))
        return out

    def program(self) -> list[str]:
        """What follows the interpreter: `-m sglang.launch_server`, through
        sm12x.keyed when clients must send a key."""
        if self.context.api_key:
            return ["-m", KEYED_MODULE, SGLANG_MODULE]
        return ["-m", SGLANG_MODULE]

    def command(
        self, python: str = "python3", environ: Mapping[str, str] | None = None
    ) -> list[str]:
        return [python, *self.program(), *self.argv(environ)]

    def env_dict(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        return {e.name: value_of(e.value, environ) for e in self.env}

    def unresolved(self, environ: Mapping[str, str]) -> list[EnvRef]:
        """Placeholders the environment does not fill (the launcher refuses to exec)."""
        refs = [a.value for a in self.args if isinstance(a.value, EnvRef)]
        refs += [e.value for e in self.env if isinstance(e.value, EnvRef)]
        return [r for r in refs if r.resolve(environ) is None]

    def exec_env(self, environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
        """The process environment for exec, and notes on values it replaced."""
        merged = dict(environ)
        notes = []
        for e in self.env:
            if isinstance(e.value, EnvRef) and e.value.resolve(environ) is None:
                continue  # unresolved: the launcher refuses to exec (see unresolved())
            value = value_of(e.value, environ)
            if e.fixed and environ.get(e.name) not in (None, value):
                notes.append(
                    f"recipe {self.recipe.name} sets {e.name}={value}, replacing "
                    f"{environ[e.name]!r} from the environment"
                )
            merged[e.name] = value
        return merged, notes

    def launch_env(
        self, environ: Mapping[str, str], given: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """Exactly the environment sglang starts with (sm12x.launch_env):
        the allowlisted part of `environ`, the settings' `given` and the recipe's
        rendered variables. Raises UserError naming a caller variable sglang reads
        that none of them gives."""
        rendered = {
            e.name: value_of(e.value, environ)
            for e in self.env
            if not (isinstance(e.value, EnvRef) and e.value.resolve(environ) is None)
        }
        return environment.build(environ, {**(given or {}), **rendered})

    # --- what a deployment runs (compose.yaml, Kubernetes: sm12x.deploy) -------

    @property
    def track(self) -> str:
        """The track it runs on: SM12X_TRACK, else the recipe's home track."""
        assert self.context.track is not None, "a plan() plan, not the render alone"
        return self.context.track

    def image(self) -> str:
        """The image that runs it: SM12X_IMAGE, else the track's."""
        assert self.loaded is not None, "a plan() plan, not the render alone"
        return self.loaded.settings.image_ref()

    def port(self) -> int:
        """The port sglang serves, as its parser read the command."""
        assert self.parsed is not None, "a plan() plan, not the render alone"
        return int(str(self.parsed.values["port"]))

    def site_variables(self) -> tuple[str, ...]:
        """The recipe's variables the site gives (.env, a ConfigMap), in its order:
        the ones the recipe does not fix."""
        return tuple(e.name for e in self.env if not e.fixed)

    # --- printing ------------------------------------------------------------

    def shell(self, python: str = "python3") -> str:
        """The command as a shell snippet, ready to paste (secrets stay "$NAME")."""
        lines = [f"{e.name}={shell_of(e.value)}" for e in self.env]
        lines.append(" ".join([python, *self.program()]))
        for arg in self.args:
            piece = arg.flag if arg.value is None else f"{arg.flag} {shell_of(arg.value)}"
            lines.append(f"  {piece}")
        return " \\\n".join(lines) + "\n"

    def explain(self) -> str:
        """Each flag and variable with the reason it is there."""
        rows = [f"# {e.name}: {e.why}" for e in self.env]
        rows += [f"# {a.flag}: {a.why}" for a in self.args]
        if self.context.api_key:
            rows.append(
                f"# --api-key: clients must send SM12X_API_KEY; {KEYED_MODULE} hands it to "
                "sglang in memory, never on the command line"
            )
        return "\n".join(rows) + "\n"


def build_launch(recipe: Recipe, context: LaunchContext | None = None) -> LaunchPlan:
    """The render alone: the sglang argv and environment for one node of a recipe."""
    ctx, args, env = render(recipe, context)
    return LaunchPlan(recipe=recipe, context=ctx, args=args, env=env)


def plan(
    loaded: Loaded,
    *,
    command: str,
    say: Say,
    dry_run: bool = False,
    no_spec: bool = False,
    sps_profile: bool = False,
    sps_table: str | None = None,
    extra: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    recipe: Recipe | None = None,
) -> LaunchPlan:
    """THE launch plan of `command`, each step once: "launch", "render", or
    DEPLOY, a deployment's `recipe` (deployment()): no configuration choice,
    which the launcher in the container makes when it starts."""
    launching = command == "launch"
    named = loaded.settings.recipe
    if recipe is None:
        recipe, why = choice.select_recipe(named, origin=loaded.origin("recipe"))
        if launching or named == AUTO:
            say(why)
    # The recipe's own track unless SM12X_TRACK names one, and a track that
    # cannot run it refused first (its flags would fail in the other parser).
    loaded = choice.following(loaded, recipe)
    choice.refuse_track(recipe, loaded)
    if sps_profile and no_spec:
        raise UserError(
            "--sps-profile profiles speculative decoding: it does not go with --no-spec"
        )
    # A throughput configuration without its tuned table is refused (one line,
    # non-zero); a dry run shows the command it would have run, with the refusal.
    if command != DEPLOY:
        recipe = choice.choose_configuration(
            recipe, loaded, profiling=sps_profile, dry_run=dry_run, say=say
        )
    if launching and named != AUTO and not dry_run:
        mismatch = choice.gpu_mismatch(recipe)
        if mismatch:
            say(f"warning: {mismatch}")
    for finding in warnings_for(recipe):
        say(str(finding))
    ctx = LaunchContext.from_settings(loaded)
    if no_spec:
        ctx = replace(ctx, speculative=False)
        if launching:
            say("--no-spec: speculative decoding off (the reference for verify --compare-url)")
    if sps_table and not sps_profile:
        raise UserError("--sps-table names tune's phase-2 table: it goes with --sps-profile")
    if sps_profile:
        ctx = replace(ctx, sps_profile=True, sps_table=sps_table)
    tokens = list(extra)
    if tokens and tokens[0] == "--":
        tokens = tokens[1:]
    plan = replace(build_launch(recipe, ctx), loaded=loaded, extra=tuple(tokens))
    variables = loaded.variables()
    if launching:
        judge_env, notes = plan.exec_env(process_env(environ or {}, loaded))
    else:
        judge_env, notes = {e.name: str(e.value) for e in plan.env}, []
    # sglang's own parser (here, where sglang is seldom installed, the track's
    # description of it) judges the recipe and the flags after -- together, once.
    parser, source = parser_for(
        load_versions(loaded.settings.track_name)["SGLANG_VERSION"], choice.installed_sglang()
    )
    judged, parsed = judge(parser, source, plan, tokens, variables, judge_env)
    plan = replace(plan, judged=judged, parsed=parsed, notes=tuple(notes))
    if not launching:
        return plan
    # Exactly what sglang gets: refused here, in a dry run too, when the caller
    # set a variable sglang reads that the recipe and the allowlist do not give.
    plan = replace(plan, sglang_env=plan.launch_env(environ or {}, settings_env(loaded)))
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
            say(f"warning: {exc.message}")
    for note in notes:
        say(note)
    if tokens:
        say(f"appending flags not in the recipe: {' '.join(tokens)}")
    return plan


DEPLOY = "deploy"
# Deployment plans by everything that can change one (_deployment_key): compose's
# generator, every Kubernetes manifest and the router's ask for the same recipes.
_DEPLOYMENTS: dict[tuple, LaunchPlan] = {}


def deployment(recipe: Recipe, track: str | None = None, image: str | None = None) -> LaunchPlan:
    """The plan of `recipe` as a deployment runs it (a compose profile, a
    Kubernetes pod): SM12X_TRACK and SM12X_IMAGE as given, nothing else of this
    machine (no .env, GPUs or tuned table: the configuration is the launcher's
    choice in the container). Refused, with the track's one line, when the
    track cannot run it. Built once per process for each key."""
    key = _deployment_key(recipe, track, image)
    found = _DEPLOYMENTS.get(key)
    if found is None:
        environ = {"SM12X_ENV_FILE": os.devnull, "SM12X_RECIPE": recipe.name}
        environ |= {"SM12X_TRACK": track} if track is not None else {}
        environ |= {"SM12X_IMAGE": image} if image is not None else {}
        loaded = load(environ=environ)
        found = plan(loaded, command=DEPLOY, say=lambda _: None, environ=environ, recipe=recipe)
        _DEPLOYMENTS[key] = found
    return found


def _deployment_key(recipe: Recipe, track: str | None, image: str | None) -> tuple:
    """Everything a deployment plan reads: the recipe (every field), the track and
    image named, versions.env (the track's pins and sglang), the sglang this Python
    has and the parser description that stands in for it, the patch series the
    lints read."""
    pins = read_versions()
    sglangs = sorted({v for k, v in pins.items() if k.endswith("_SGLANG_VERSION")})
    return (
        recipe.model_dump_json(),
        track,
        image,
        tuple(sorted(pins.items())),
        choice.installed_sglang(),
        tuple(_digest(description_path(v)) for v in sglangs),
        _digest(patch_series.patches_toml()),
    )


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def explain_site(plan: LaunchPlan) -> str:
    """settings' --explain of the recipe's site variables."""
    assert plan.loaded is not None
    site = [n for n, var in plan.recipe.env.items() if var.from_host]
    return settings.explain_variables(plan.loaded, site, f"{plan.recipe.name}'s site variables")


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


def check_track(
    loaded: Loaded, dry_run: bool, recipe: Recipe | None = None, say: Say = print
) -> None:
    """The track (SM12X_TRACK) names an sglang release; refuse to serve another.

    In the image the track's image is the track (the Dockerfile sets SM12X_TRACK);
    compose passes SM12X_TRACK from .env, so an SM12X_IMAGE of another track is
    caught here rather than served under the wrong name."""
    track = loaded.settings.track_name
    pins = load_versions(track)
    want, image = pins["SGLANG_VERSION"], pins["SM12X_IMAGE"]
    have = choice.installed_sglang()
    if have is None:
        if not dry_run:
            raise UserError(
                f"sglang is not installed for {sys.executable}: run sm12x launch in "
                f"the {track} track's image ({image}), or install sglang {want}"
            )
        return
    if have == "":
        say(
            f"warning: this sglang has no package metadata: cannot tell whether it is the "
            f"{track} track's sglang {want}"
        )
        return
    if have != want:
        fix = installed_fix(recipe, track, have)
        message = (
            f"SM12X_TRACK={track} (from {loaded.origin('track')}) serves sglang {want}, "
            f"but this Python has sglang {have}: run the {track} track's image "
            f"({image}; compose picks it from SM12X_TRACK unless SM12X_IMAGE names "
            f"another), or {fix}"
        )
        if not dry_run:
            raise UserError(message)
        say(f"warning: {message}")


def settings_env(loaded: Loaded) -> dict[str, str]:
    """What the settings give sglang's environment: the key, where it came from the
    environment, .env or a file (sm12x.keyed reads it from SM12X_API_KEY)."""
    key = loaded.settings.key()
    return {KEY_ENV: key} if key else {}


def process_env(environ: Mapping[str, str], loaded: Loaded) -> dict[str, str]:
    """This process's environment with the settings' variables over it: what the
    judge reads (the environment sglang gets is LaunchPlan.launch_env)."""
    return {**environ, **settings_env(loaded)}
