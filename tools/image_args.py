"""The image's build arguments, tags and name, per track, from versions.env and the checkout.

One source for everyone who builds the image: docker-bake.hcl's variables (CI
exports them with --format bake), a plain `docker build` (--format flags) and
the tests (--format json). Pins come from versions.env, resolved for the track
(sm12x.versions); SM12X_PATCHES from patches/sglang/patches.toml for the
track's sglang (its series; empty where the retirement rule retires every
patch); SM12X_REVISION from git (or $GITHUB_SHA); SM12X_SOURCE from
$GITHUB_SERVER_URL/$GITHUB_REPOSITORY.

  scripts/image-args [--track T]             # KEY=value lines: T's build args, IMAGE_REPO, TAGS
  docker build $(scripts/image-args --track current --format flags) -t sm12x:current .
  scripts/image-args --format bake >> "$GITHUB_ENV"   # every bake variable, every track

Overrides: any KEY=value argument replaces that value (e.g. IMAGE_REPO=...;
with --format bake, a bake variable such as CURRENT_SGLANG_VERSION=...).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from sm12x.patches import series as patch_series
from sm12x.versions import (
    VersionsFileError,
    default_track,
    load_versions,
    read_versions,
    track_key,
    tracks,
)

ROOT = Path(__file__).resolve().parent.parent
# The Dockerfile's build arguments that are a track's own pins (versions.env
# <TRACK>_<KEY>; docker-bake.hcl has one variable per track for each).
TRACK_ARGS = (
    "BASE_IMAGE",
    "BASE_IMAGE_DIGEST",
    "SGLANG_VERSION",
    "FLASHINFER_VERSION",
    "FLASHINFER_CUBIN_VERSION",
    "FLASHINFER_JIT_CACHE_VERSION",
    "FLASHINFER_JIT_CACHE_VERSION_AMD64",
    "FLASHINFER_JIT_CACHE_VERSION_ARM64",
)
# Build arguments every track shares, as versions.env writes them.
SHARED_ARGS = (
    "FLASHINFER_CUBIN_INDEX_URL",
    "FLASHINFER_JIT_CACHE_INDEX_URL",
    "CUDA_VERSION",
    "SGLANG_ROUTER_VERSION",
    "SM12X_VERSION",
)
# Computed per track here (docker-bake.hcl: one variable per track).
TRACK_COMPUTED = ("SM12X_PATCHES",)
# Where the source lives until the project's repository is known (docs/image.md).
PLACEHOLDER_SOURCE = "https://github.com/sm12x/sm12x"


def patches_for(sglang: str, flashinfer: str) -> str:
    """The series the image applies, comma-separated ('' when every patch is retired)."""
    plan = patch_series.plan(sglang, flashinfer)
    if not plan.complete:
        blocking = "; ".join(f"{v.file}: {v.reason}" for v in plan.unretired)
        what = "has no patch series in" if not plan.series else "has a series in"
        raise SystemExit(
            f"image-args: sglang {sglang} {what} patches/sglang/patches.toml, "
            f"and not every other patch is retired for it ({blocking}): port "
            "them, or retire them with evidence"
        )
    return ",".join(p["file"] for p in plan.series)


def revision() -> str:
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"]
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out if re.fullmatch(r"[0-9a-f]{40}", out) else "unknown"


def source() -> str:
    server, repo = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    return f"{server}/{repo}" if server and repo else PLACEHOLDER_SOURCE


def image_repo(pins: dict[str, str]) -> str:
    return (os.environ.get("SM12X_IMAGE_REPO") or pins["SM12X_IMAGE_REPO"]).lower()


def tags(repo: str, values: dict[str, str]) -> list[str]:
    """The project version and the commit, each with the track's name (and bare for the
    default track), and the sglang version."""
    track, version = values["SM12X_TRACK"], values["SM12X_VERSION"]
    bare = track == default_track()
    return [
        f"{repo}:{version}-{track}",
        *([f"{repo}:{version}"] if bare else []),
        f"{repo}:sglang-{values['SGLANG_VERSION']}",
        *commit_tags(repo, values),
    ]


def commit_tags(repo: str, values: dict[str, str]) -> list[str]:
    """What a push to main publishes: the commit, per track (bare for the default)."""
    sha = f"sha-{values['SM12X_REVISION'][:12]}"
    bare = values["SM12X_TRACK"] == default_track()
    return [f"{repo}:{sha}-{values['SM12X_TRACK']}", *([f"{repo}:{sha}"] if bare else [])]


def compute(track: str | None = None, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """One track's build args plus IMAGE_REPO, TAGS and COMMIT_TAGS (comma-separated)."""
    pins = load_versions(track)
    overrides = overrides or {}
    values = {key: pins[key] for key in (*TRACK_ARGS, *SHARED_ARGS)}
    values["SM12X_TRACK"] = pins["SM12X_TRACK"]
    values["FLASHINFER_PREBUILT"] = "1"
    values["SM12X_PATCHES"] = patches_for(
        overrides.get("SGLANG_VERSION", values["SGLANG_VERSION"]),
        overrides.get("FLASHINFER_VERSION", values["FLASHINFER_VERSION"]),
    )
    values["SM12X_REVISION"] = revision()
    values["SM12X_SOURCE"] = source()
    values["IMAGE_REPO"] = image_repo(pins)
    values.update(overrides)
    values["IMAGE_REPO"] = values["IMAGE_REPO"].lower()  # registries want lower case
    repo = values["IMAGE_REPO"]
    if "TAGS" not in overrides:
        values["TAGS"] = ",".join(tags(repo, values))
    if "COMMIT_TAGS" not in overrides:
        values["COMMIT_TAGS"] = ",".join(commit_tags(repo, values))
    return values


def build_args(values: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in values.items() if k not in ("IMAGE_REPO", "TAGS", "COMMIT_TAGS")}


def bake_variables(overrides: dict[str, str] | None = None) -> dict[str, str]:
    """docker-bake.hcl's variables: the shared ones under their names, each track's
    own under versions.env's <TRACK>_<KEY> names."""
    overrides = overrides or {}
    first = compute(default_track())
    values = {
        key: first[key]
        for key in (
            *SHARED_ARGS,
            "FLASHINFER_PREBUILT",
            "SM12X_REVISION",
            "SM12X_SOURCE",
            "IMAGE_REPO",
        )
    }
    for track in tracks():
        resolved = compute(track)
        for key in (*TRACK_ARGS, *TRACK_COMPUTED):
            values[track_key(track, key)] = resolved[key]
    unknown = sorted(set(overrides) - set(values) - {"CREATED"})
    if unknown:
        raise SystemExit(
            f"image-args: {', '.join(unknown)} is not a bake variable "
            f"(they are: {', '.join(sorted(values))}, CREATED)"
        )
    values.update(overrides)
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument(
        "--track",
        help="the track to build (versions.env SM12X_TRACKS; default SM12X_DEFAULT_TRACK)",
    )
    parser.add_argument(
        "--format",
        choices=("env", "flags", "json", "bake"),
        default="env",
        help="env: KEY=value lines; flags: --build-arg KEY=value words for "
        "docker build; json: one object; bake: every docker-bake.hcl "
        "variable, for every track, as KEY=value lines",
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=value")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
            parser.error(f"expected KEY=value, got {item!r}")
        overrides[key] = value
    try:
        read_versions()
        if args.format == "bake":
            if args.track:
                parser.error("--format bake writes every track; drop --track")
            values = bake_variables(overrides)
        else:
            values = compute(args.track, overrides)
    except VersionsFileError as err:
        parser.error(str(err))
    if args.format == "json":
        print(json.dumps(values, indent=2, sort_keys=True))
    elif args.format == "flags":
        print(" ".join(f"--build-arg {k}={v}" for k, v in build_args(values).items()))
    else:
        print("\n".join(f"{k}={v}" for k, v in values.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
