"""The sglang/flashinfer wheels the mock server and the test suite unpack, and their cache.

The mock server (`sm12x mock-server`) runs sglang's serving code from a wheel
of the release it serves (sm12x.mock.serving), fetched from PyPI into the
cache on first use: `cache_dir()`, $SM12X_CACHE/wheels (default: the
checkout's .cache/, else ~/.cache/sm12x). Two switches:

- SM12X_OFFLINE=1: never download. A wheel or overlay that is not in the
  cache is one error naming it and the command that fetches it.
- SM12X_FORBID_WHEELS=WHY: never read a wheel, build a tree or an overlay, or
  run sglang's code at all; each attempt fails with WHY. For CI jobs that must
  not reach sglang: the test suite's fast tier sets it (tests/support/tiers.py).

scripts/test runs `python3 -m sm12x.mock.wheels --download` once: every
version below (`wanted`), so the tests (which run with SM12X_OFFLINE=1) only
read the cache. This module reads only versions.env and patches.toml, with the
standard library and `packaging`: the system Python runs it.

Each sglang release's code runs against its own pins of the libraries whose
version decides what that code imports and how it tokenizes (OVERLAY_DISTS):
where a release pins one at another version than this environment holds
(sglang 0.5.23: transformers 5.19.0, tokenizers 0.23.2, xgrammar 0.2.7, and
deepseek-recipe, which 0.5.17 does not use), `build_overlay` installs those
pins into an overlay folder (no dependencies, nothing else changes) that
`pythonpath(version)` puts first for that release's code.
Which versions `--download` fetches: every sglang the patch series applies to,
and every flashinfer the series was verified against
(patches/sglang/patches.toml), plus every track's pins in versions.env.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.requirements import Requirement

from sm12x.paths import checkout_root, data_path
from sm12x.versions import load_versions, tracks

OFFLINE_ENV = "SM12X_OFFLINE"
FORBID_ENV = "SM12X_FORBID_WHEELS"


class Forbidden(RuntimeError):
    """SM12X_FORBID_WHEELS is set: nothing here may reach sglang's code."""


def guard(what: str) -> None:
    """Refuse `what` (unpack a wheel, run sglang's code) when SM12X_FORBID_WHEELS says so."""
    why = os.environ.get(FORBID_ENV)
    if why:
        raise Forbidden(f"refused to {what}: {why} ({FORBID_ENV} is set)")


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def cache_root() -> Path:
    """$SM12X_CACHE; else the checkout's .cache/ (scripts/test's); else ~/.cache/sm12x."""
    if os.environ.get("SM12X_CACHE"):
        return Path(os.environ["SM12X_CACHE"])
    root = checkout_root()
    if root is not None:
        return root / ".cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sm12x"


def cache_dir() -> Path:
    return cache_root() / "wheels"


def patch_series() -> dict:
    return tomllib.loads((data_path("patches") / "sglang" / "patches.toml").read_text())


def wanted() -> list[tuple[str, str]]:
    series = patch_series()
    sglang = {load_versions(t)["SGLANG_VERSION"] for t in tracks()}
    flashinfer = {load_versions(t)["FLASHINFER_VERSION"] for t in tracks()}
    flashinfer.add(load_versions()["FLASHINFER_CANARY_VERSION"])
    for patch in series["patch"]:
        sglang.update(patch["sglang"])
        flashinfer.update(patch.get("flashinfer_verified", []))
    return sorted(("sglang", v) for v in sglang) + sorted(
        ("flashinfer-python", v) for v in flashinfer
    )


def _prefix(dist: str, version: str) -> str:
    return f"{dist.replace('-', '_')}-{version}-"


def _pip(*args: str) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            *args,
            "--quiet",
            "--no-deps",
            "--timeout",
            "120",
            "--retries",
            "3",
            "--only-binary=:all:",
        ],
        check=True,
    )


def _cached(dist: str, version: str) -> Path | None:
    return next(iter(sorted(cache_dir().glob(_prefix(dist, version) + "*.whl"))), None)


def fetch(dist: str, version: str) -> Path:
    """The wheel `dist==version`, downloaded from PyPI into the cache if it is not there."""
    path = _cached(dist, version)
    if path is not None:
        return path
    cache_dir().mkdir(parents=True, exist_ok=True)
    print(f"sm12x: downloading {dist}=={version} into {cache_dir()}", file=sys.stderr)
    _pip("download", "-d", str(cache_dir()), f"{dist}=={version}")
    path = _cached(dist, version)
    if path is None:
        raise FileNotFoundError(f"pip downloaded no {dist}=={version} wheel into {cache_dir()}")
    return path


def wheel(dist: str, version: str) -> Path:
    """The cached wheel; downloaded first unless SM12X_OFFLINE=1 (then a missing
    wheel is a FileNotFoundError naming the command that fetches it)."""
    guard(f"unpack the real wheels ({dist} {version})")
    path = _cached(dist, version)
    if path is not None:
        return path
    if offline():
        raise FileNotFoundError(
            f"{dist}=={version} is not in {cache_dir()} and {OFFLINE_ENV}=1 forbids "
            f"downloading it: fetch it where PyPI is reachable with `pip download --no-deps "
            f"--only-binary=:all: -d {cache_dir()} {dist}=={version}` (scripts/test: "
            "`python3 -m sm12x.mock.wheels --download`), or unset SM12X_OFFLINE"
        )
    return fetch(dist, version)


def unpack(dist: str, version: str, dest: Path, members: tuple[str, ...] = ()) -> Path:
    """Unzip a wheel into dest (a site-packages-like folder); members limits it."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel(dist, version)) as archive:
        names = archive.namelist()
        if members:
            names = [n for n in names if n.startswith(members) or ".dist-info/" in n]
        archive.extractall(dest, members=names)
    return dest


# transformers: its image-processor registry decides whether sglang >= 0.5.23's
# configs import without torchvision; tokenizers: the runtime transformers drives;
# xgrammar: the grammar library the serving code imports names from;
# deepseek-recipe: sglang 0.5.23's DeepSeek-V4 prompt and output path.
OVERLAY_DISTS = ("transformers", "tokenizers", "xgrammar", "deepseek-recipe")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def sglang_pins(version: str) -> dict[str, str]:
    """sglang `version`'s exact requirements (`name==pin`) that apply on this machine."""
    with zipfile.ZipFile(wheel("sglang", version)) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(meta).decode().splitlines()
    pins = {}
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            pins[_norm(req.name)] = exact[0]
    return pins


def overlay_pins(version: str) -> dict[str, str]:
    """The OVERLAY_DISTS sglang `version` pins at another version than this environment's."""
    pins = sglang_pins(version)
    wanted_here = {}
    for name in OVERLAY_DISTS:
        if name not in pins:
            continue
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have != pins[name]:
            wanted_here[name] = pins[name]
    return wanted_here


def overlay_dir(version: str) -> Path | None:
    """The overlay folder of sglang `version`'s pins, named by the pins alone: its
    content is `pip install --target --no-deps` of exactly them, so releases that pin
    the same versions (0.5.16, 0.5.17 and 0.5.18 pin the same transformers and
    xgrammar) share one, installed once."""
    pins = overlay_pins(version)
    if not pins:
        return None
    key = hashlib.sha256(repr(sorted(pins.items())).encode()).hexdigest()[:12]
    return cache_dir().parent / "overlay" / f"pins-{key}"


def pythonpath(version: str) -> list[str]:
    """What goes first on PYTHONPATH for sglang `version`'s code (its overlay, if any),
    built first unless SM12X_OFFLINE=1."""
    guard(f"run sglang {version}'s code")
    folder = overlay_dir(version)
    if folder is None:
        return []
    if not (folder / ".complete").exists():
        if offline():
            raise FileNotFoundError(
                f"sglang {version}'s own pins ({overlay_pins(version)}) are not installed in "
                f"{folder} and {OFFLINE_ENV}=1 forbids downloading them: run "
                "`python3 -m sm12x.mock.wheels --download` (scripts/test does), or unset "
                "SM12X_OFFLINE"
            )
        build_overlay(version)
    return [str(folder)]


def build_overlay(version: str) -> None:
    folder = overlay_dir(version)
    if folder is None or (folder / ".complete").exists():
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    pins = overlay_pins(version)
    # Into a folder beside it, renamed into place: never half an overlay.
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".overlay-"))
    try:
        _pip("install", "--target", str(tmp), *(f"{n}=={pin}" for n, pin in sorted(pins.items())))
        (tmp / ".complete").write_text(repr(sorted(pins.items())) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"overlay: sglang {version}: {', '.join(f'{n}=={v}' for n, v in sorted(pins.items()))}")


def download(jobs: int = 4) -> None:
    """Every wheel `wanted()` names, and each sglang's overlay (scripts/test runs this).

    Side by side, `jobs` pips at a time: each download is a pip of its own that
    mostly waits on the network, and these are the setup's last step. Overlays
    run after the wheels (an overlay reads its sglang wheel's pins), one per
    folder: releases that pin the same versions share one."""
    wanted_ = wanted()
    cached = {w: _cached(*w) is not None for w in wanted_}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        paths = list(pool.map(lambda w: fetch(*w), wanted_))
    for w, path in zip(wanted_, paths, strict=True):
        print(f"{'ok' if cached[w] else 'downloaded'}: {path.name}")
    firsts: dict[Path | None, str] = {}
    for dist, version in wanted_:
        if dist == "sglang":
            firsts.setdefault(overlay_dir(version), version)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(build_overlay, firsts.values()))


if __name__ == "__main__":
    if sys.argv[1:] != ["--download"]:
        sys.exit("usage: python3 -m sm12x.mock.wheels --download")
    download()
