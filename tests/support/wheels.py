"""The sglang/flashinfer wheels the tests unpack, and where they are cached.

scripts/test runs `python tests/support/wheels.py --download` once; tests then
only read the cache and fail with a message naming the missing wheel.

Each sglang release's code runs against its own pins of the libraries whose
version decides what that code imports and how it tokenizes (OVERLAY_DISTS):
where a release pins one at another version than the test virtualenv holds
(sglang 0.5.23: transformers 5.19.0, tokenizers 0.23.2, xgrammar 0.2.7, and
deepseek-recipe, which 0.5.17 does not use), `--download` installs those pins
into an overlay folder (no dependencies, nothing else changes) that
`pythonpath(version)` puts first for that release's code.
Which versions: every sglang the patch series applies to, and every flashinfer
the series was verified against (patches/sglang/patches.toml), plus every
track's pins in versions.env.
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
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sm12x.versions import load_versions, tracks  # noqa: E402
from tests.support import tiers  # noqa: E402


def cache_dir() -> Path:
    return Path(os.environ.get("SM12X_CACHE", ROOT / ".cache")) / "wheels"


def patch_series() -> dict:
    return tomllib.loads((ROOT / "patches" / "sglang" / "patches.toml").read_text())


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


def wheel(dist: str, version: str) -> Path:
    tiers.guard(f"unpack the real wheels ({dist} {version})")
    for path in sorted(cache_dir().glob(_prefix(dist, version) + "*.whl")):
        return path
    raise FileNotFoundError(
        f"{dist}=={version} is not in {cache_dir()}: run scripts/test "
        "(or `python tests/support/wheels.py --download`) first"
    )


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
    pins = overlay_pins(version)
    if not pins:
        return None
    key = hashlib.sha256(repr(sorted(pins.items())).encode()).hexdigest()[:12]
    return cache_dir().parent / "overlay" / f"sglang-{version}-{key}"


def pythonpath(version: str) -> list[str]:
    """What goes first on PYTHONPATH for sglang `version`'s code (its overlay, if any)."""
    tiers.guard(f"run sglang {version}'s code")
    folder = overlay_dir(version)
    if folder is None:
        return []
    if not (folder / ".complete").exists():
        raise FileNotFoundError(
            f"sglang {version}'s own pins ({overlay_pins(version)}) are not installed in "
            f"{folder}: run scripts/test (or `python tests/support/wheels.py --download`) first"
        )
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
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--timeout",
                "120",
                "--retries",
                "3",
                "--only-binary=:all:",
                "--target",
                str(tmp),
                *(f"{name}=={pin}" for name, pin in sorted(pins.items())),
            ],
            check=True,
        )
        (tmp / ".complete").write_text(repr(sorted(pins.items())) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"overlay: sglang {version}: {', '.join(f'{n}=={v}' for n, v in sorted(pins.items()))}")


def download() -> None:
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    for dist, version in wanted():
        try:
            print(f"ok: {wheel(dist, version).name}")
            continue
        except FileNotFoundError:
            pass
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--timeout",
                "120",
                "--retries",
                "3",
                "--only-binary=:all:",
                "-d",
                str(target),
                f"{dist}=={version}",
            ],
            check=True,
        )
        print(f"downloaded: {wheel(dist, version).name}")
    for dist, version in wanted():
        if dist == "sglang":
            build_overlay(version)


if __name__ == "__main__":
    if sys.argv[1:] != ["--download"]:
        sys.exit("usage: python tests/support/wheels.py --download")
    download()
