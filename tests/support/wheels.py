"""The sglang/flashinfer wheels the tests unpack, and where they are cached.

scripts/test runs `python tests/support/wheels.py --download` once; tests then
only read the cache and fail with a message naming the missing wheel.
Which versions: every sglang the patch series applies to, and every flashinfer
the series was verified against (patches/sglang/patches.toml), plus every
track's pins in versions.env.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sm12x.versions import load_versions, tracks  # noqa: E402


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
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--timeout", "120", "--retries", "3", "--only-binary=:all:",
             "-d", str(target), f"{dist}=={version}"],
            check=True,
        )
        print(f"downloaded: {wheel(dist, version).name}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--download"]:
        sys.exit("usage: python tests/support/wheels.py --download")
    download()
