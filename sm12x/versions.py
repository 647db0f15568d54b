"""Read versions.env, the one file that holds every pin, and resolve its tracks.

The format is the subset both bash (`source`) and this parser agree on:
KEY=value lines, `#` comments, no quoting and no spaces inside values.

A track is one image: an sglang release with its own flashinfer, torch and
base image. SM12X_TRACKS names them, SM12X_DEFAULT_TRACK picks the default,
and each track's own pins are written once, as <TRACK>_<KEY> (TRACK_KEYS);
everything else is shared. `load_versions(track)` resolves a track into the
plain names (SGLANG_VERSION, BASE_IMAGE, ...) plus SM12X_TRACK and
SM12X_IMAGE, which is what the rest of sm12x reads; `read_versions()` is the
file as written (what bash sees after `source`).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from sm12x.paths import data_path

_LINE = re.compile(r"""^(?P<key>[A-Z][A-Z0-9_]*)=(?P<value>[^\s#"']*)\s*(?:#.*)?$""")
_TRACK = re.compile(r"[a-z][a-z0-9]*")

# The pins that belong to a track, each written once per track as <TRACK>_<KEY>.
TRACK_KEYS = (
    "SGLANG_VERSION",
    "FLASHINFER_VERSION",
    "FLASHINFER_CUBIN_VERSION",
    "FLASHINFER_JIT_CACHE_VERSION",
    "FLASHINFER_JIT_CACHE_VERSION_AMD64",
    "FLASHINFER_JIT_CACHE_VERSION_ARM64",
    "TORCH_VERSION",
    "BASE_IMAGE",
    "BASE_IMAGE_DIGEST",
    "BASE_IMAGE_DIGEST_SEEN",
)


class VersionsFileError(ValueError):
    pass


class UnknownTrackError(VersionsFileError):
    pass


def parse_versions(text: str, source: str = "versions.env") -> dict[str, str]:
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise VersionsFileError(
                f"{source}:{number}: expected KEY=value (no spaces or quotes), got {raw!r}"
            )
        key = match["key"]
        if key in pins:
            raise VersionsFileError(f"{source}:{number}: {key} is set twice")
        pins[key] = match["value"]
    return pins


def track_key(track: str, key: str) -> str:
    """The versions.env name of a track's pin: ('current', 'SGLANG_VERSION') ->
    CURRENT_SGLANG_VERSION (docker-bake.hcl's variables carry the same names)."""
    return f"{track.upper()}_{key}"


def check_tracks(pins: dict[str, str], source: str = "versions.env") -> tuple[str, ...]:
    """The track names, after checking every track pin is written once, where it belongs."""
    names = tuple(t for t in pins.get("SM12X_TRACKS", "").split(",") if t)
    if not names:
        raise VersionsFileError(f"{source}: SM12X_TRACKS is missing or empty")
    for name in names:
        if not _TRACK.fullmatch(name):
            raise VersionsFileError(
                f"{source}: track name {name!r} is not lower-case letters and digits"
            )
    if len(set(names)) != len(names):
        raise VersionsFileError(f"{source}: SM12X_TRACKS names a track twice")
    default = pins.get("SM12X_DEFAULT_TRACK")
    if default not in names:
        raise VersionsFileError(
            f"{source}: SM12X_DEFAULT_TRACK={default} is not one of "
            f"SM12X_TRACKS ({', '.join(names)})"
        )
    for key in TRACK_KEYS:
        if key in pins:
            raise VersionsFileError(
                f"{source}: {key} is a track's pin: write it as "
                f"{', '.join(track_key(t, key) for t in names)}"
            )
        for name in names:
            if track_key(name, key) not in pins:
                raise VersionsFileError(f"{source}: track {name} has no {track_key(name, key)}")
    return names


@functools.cache
def read_versions(path: Path | None = None) -> dict[str, str]:
    """versions.env as written, checked: every key once, every track complete."""
    path = path or data_path("versions.env")
    pins = parse_versions(path.read_text(encoding="utf-8"), source=str(path))
    check_tracks(pins, str(path))
    return pins


def tracks(path: Path | None = None) -> tuple[str, ...]:
    return check_tracks(read_versions(path))


def default_track(path: Path | None = None) -> str:
    return read_versions(path)["SM12X_DEFAULT_TRACK"]


def resolve_track(track: str | None, path: Path | None = None) -> str:
    """The track's name, or the default's for None; an unknown name is an error
    that lists the known ones."""
    if track is None:
        return default_track(path)
    known = tracks(path)
    if track not in known:
        raise UnknownTrackError(f"unknown track {track!r}: versions.env has {', '.join(known)}")
    return track


def image_for(pins: dict[str, str], track: str) -> str:
    return f"{pins['SM12X_IMAGE_REPO']}:{pins['SM12X_VERSION']}-{track}"


@functools.cache
def _resolved(track: str, path: Path | None) -> dict[str, str]:
    pins = read_versions(path)
    prefixes = tuple(track_key(t, "") for t in tracks(path))
    view = {k: v for k, v in pins.items() if not k.startswith(prefixes)}
    view.update({key: pins[track_key(track, key)] for key in TRACK_KEYS})
    view["SM12X_TRACK"] = track
    view["SM12X_IMAGE"] = image_for(pins, track)
    return view


def load_versions(track: str | None = None, path: Path | None = None) -> dict[str, str]:
    """The pins one track sees, under their plain names (default: the default track).

    A copy: callers may not change what other callers read."""
    return dict(_resolved(resolve_track(track, path), path))


def track_of_sglang(version: str, path: Path | None = None) -> str | None:
    """The track whose sglang is `version`, if one is."""
    for name in tracks(path):
        if read_versions(path)[track_key(name, "SGLANG_VERSION")] == version:
            return name
    return None
