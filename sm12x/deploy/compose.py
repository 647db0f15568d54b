"""The compose services sm12x defines, for a tool that starts one (verify --boot).

compose.yaml has one profile per single-node recipe, one per node of a
multi-node recipe (NAME-node0 on the head, which serves the API) and `auto`.
ComposeService is what verify's boot mode asks of a launcher (verify.boot's
Launcher): the commands that start a service, follow its log and take it
down. verify itself knows nothing of compose, profiles or the settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from sm12x.recipe import Recipe, load_recipe
from sm12x.settings import Loaded

AUTO = "auto"


def profiles(recipe: Recipe) -> list[str]:
    """The recipe's compose profiles, the head's first."""
    if not recipe.is_multinode:
        return [recipe.name]
    return [f"{recipe.name}-node{rank}" for rank in range(recipe.hardware.nodes)]


@dataclass(frozen=True)
class ComposeService:
    profile: str
    up: list[str]
    logs: list[str]
    down: list[str]
    # What the caller should tell the user (the other nodes of a pair).
    notes: tuple[str, ...] = ()


def service(
    profile: str | None, recipe: str | None, loaded: Loaded, compose_file: str | None = None
) -> ComposeService:
    """The compose service for a profile, or for a recipe (its head node's; auto when
    neither is given), run with the settings' docker and .env."""
    notes: tuple[str, ...] = ()
    if profile is None:
        if recipe in (None, AUTO):
            profile = AUTO
        else:
            names = profiles(load_recipe(recipe))
            profile = names[0]
            if len(names) > 1:
                others = ", ".join(names[1:])
                notes = (
                    (
                        f"{recipe} runs on {len(names)} nodes: this starts {profile} (the "
                        f"head, which serves the API); start {others} on the other node"
                    ),
                )
    base = [loaded.settings.docker, "compose"]
    if compose_file:
        base += ["-f", compose_file]
    env = loaded.env_file
    if env.path is not None and env.how in ("--env-file", "SM12X_ENV_FILE"):
        # Compose reads the project folder's .env by itself; hand it any other.
        base += ["--env-file", str(env.path)]
    base += ["--profile", profile]
    return ComposeService(
        profile=profile,
        up=[*base, "up", "-d"],
        logs=[*base, "logs", "-f", "--no-color"],
        down=[*base, "down"],
        notes=notes,
    )


def profiling_service(
    recipe: Recipe,
    loaded: Loaded,
    compose_file: str | None = None,
    name: str | None = None,
    sps_table: str | None = None,
) -> ComposeService:
    """A one-off container of the rig's compose service running `recipe` in the
    mode sglang's SPS profiler needs (`sm12x launch --sps-profile`, for `sm12x
    tune`): `compose run`, so the rig's own service, its .env and volumes (the
    cache volume the table goes to) are used without changing compose.yaml,
    and the container is removed afterwards (it must never serve). `sps_table`:
    tune's phase 2, the diagonal's 1-D table (a path in the container)."""
    rig = load_recipe(recipe.rig) if recipe.rig != recipe.name else recipe
    service_name = profiles(rig)[0]
    container = name or f"sm12x-tune-{recipe.name}"
    base = service(service_name, None, loaded, compose_file)
    prefix = base.up[: base.up.index("up")]
    notes = base.notes
    if rig.is_multinode:
        others = ", ".join(profiles(rig)[1:])
        notes = (
            f"{recipe.name} runs on {rig.hardware.nodes} nodes: on the other node start "
            f"the same mode by hand: docker compose --profile {others} run -d "
            f"--service-ports {others} --sps-profile --recipe {recipe.name}",
        )
    docker = loaded.settings.docker
    return ComposeService(
        profile=service_name,
        up=[
            *prefix,
            "run",
            "-d",
            "--name",
            container,
            "--service-ports",
            service_name,
            "--sps-profile",
            "--recipe",
            recipe.name,
            *(["--sps-table", sps_table] if sps_table else []),
        ],
        logs=[docker, "logs", "-f", container],
        down=[docker, "rm", "--force", container],
        notes=notes,
    )
