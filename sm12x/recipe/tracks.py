"""The track's home: which tracks a recipe runs on, and every decision that follows.

A track (versions.env: SM12X_TRACKS) is an sglang release and its image. A
recipe names the tracks it runs on; everything that decides a track for a
recipe or refuses one asks here, so the rule is written once: the lints, the
launch plan, `render --k8s`, tune, bench's boot and the stand-in server.
Settings only read the value (SM12X_TRACK); sm12x.versions holds the pins.
"""

from __future__ import annotations

from sm12x.recipe.lines import serves
from sm12x.recipe.model import Recipe
from sm12x.versions import default_track, load_versions, track_of_sglang, tracks


def recipe_tracks(recipe: Recipe) -> tuple[str, ...]:
    """The tracks a recipe runs on: its own list, else every track (unknown names
    are the `tracks` lint's to report, and skipped here)."""
    known = tracks()
    return known if recipe.tracks is None else tuple(t for t in recipe.tracks if t in known)


def home_track(recipe: Recipe) -> str:
    """The track a recipe runs on where SM12X_TRACK does not say: the default
    track, unless the recipe runs only on others (then its first). What compose's
    profile, `sm12x render` and `render --k8s` use for it."""
    default = default_track()
    own = recipe_tracks(recipe)
    return default if default in own or not own else own[0]


def chosen_track(recipe: Recipe, named: str | None) -> str:
    """The track a command runs the recipe on: the one SM12X_TRACK names, else
    the recipe's home (a recipe that runs only on the current track is rendered
    and judged for it, as its compose profile and manifest run it)."""
    return named if named is not None else home_track(recipe)


def track_refusal(recipe: Recipe, track: str) -> str | None:
    """Why the recipe cannot run on `track` (its sglang lacks what the recipe
    needs), ending in the one setting that lets it; None when it can. Every
    command that refuses a recipe for its track says this line, once, first."""
    own = recipe_tracks(recipe)
    if track in own or not own:
        return None
    have = load_versions(track)["SGLANG_VERSION"]
    want = load_versions(own[0])["SGLANG_VERSION"]
    line = recipe.model.model_line
    need = f"; {line.title} needs sglang >= {line.min_sglang}" if not serves(line, have) else ""
    return (
        f"{recipe.name} runs only on the {' and '.join(own)} track (sglang {want}), not on "
        f"SM12X_TRACK={track} (sglang {have}{need}): set SM12X_TRACK={own[0]}"
    )


def installed_fix(recipe: Recipe | None, track: str, installed: str) -> str:
    """What to change when this Python's sglang `installed` is not `track`'s: the
    track that sglang is, where that track can run the recipe; else the image (an
    SM12X_IMAGE of the pinned track under a current-only profile); else sglang."""
    other = track_of_sglang(installed)
    if other and (recipe is None or track_refusal(recipe, other) is None):
        return f"set SM12X_TRACK={other}"
    if other:
        return f"point SM12X_IMAGE at the {track} track's image (or unset it)"
    return f"install sglang {load_versions(track)['SGLANG_VERSION']}"
