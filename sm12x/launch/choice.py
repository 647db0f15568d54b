"""Which recipe a launch runs, on which track and in which configuration.

The first steps of the launch plan (sm12x.launch.plan): SM12X_RECIPE (or auto
from nvidia-smi), the track (sm12x.recipe.tracks), SM12X_CONFIGURATION with
the tuned SPS table it may need (sm12x.launch.configuration), and the sglang
this Python has. tune and qualify pick their recipe with the same functions.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from dataclasses import replace
from pathlib import Path

from sm12x import __version__
from sm12x.errors import UserError
from sm12x.launch import configuration, gpus
from sm12x.recipe import Recipe, load_all, load_recipe
from sm12x.recipe.tracks import chosen_track, track_refusal
from sm12x.settings import Loaded
from sm12x.sps import tables as store
from sm12x.versions import load_versions

AUTO = "auto"


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
    (sm12x.recipe.tracks.chosen_track): a recipe that runs only on the current
    track is rendered and judged for it, as its compose profile and manifest run it."""
    track = chosen_track(recipe, loaded.settings.track)
    if track == loaded.settings.track_name:
        return loaded
    return replace(loaded, settings=loaded.settings.model_copy(update={"track": track}))


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
    """How this launch looks up a tuned SPS table (sm12x.sps.tables): for the
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


def installed_sglang() -> str | None:
    """The version of the sglang this Python runs: None when there is none, '' when
    a package is there without metadata (a source tree put on PYTHONPATH)."""
    if importlib.util.find_spec("sglang") is None:
        return None
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return ""
