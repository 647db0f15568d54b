"""A track's full pinned sglang closure, resolved from sglang's own metadata.

The real base carries hundreds of packages at the versions sglang's pins pull
in (upstream-facts.md); the image's `install-app` step installs sm12x and the
router against all of them as constraints. This resolves that set here, from
the Requires-Dist of the sglang wheel the tests already download
(sm12x/mock/wheels.py), for the real base's Python (3.12) and each image
architecture, so a test can resolve sm12x's own requirements and the router
pin against it and a conflict shows up in the suite instead of as a
ResolutionImpossible in a real build.

The resolver is uv's (`uv pip compile`): it reads each candidate's metadata
with HTTP range requests, so torch's CUDA build and the nvidia-* wheels are
resolved without downloading gigabytes (pip on this machine downloads whole
wheels to read their metadata). A requirement the index has no version for is
dropped, and named with uv's reason (`Closure.lacking`), and the rest is
resolved without it: "as far as the index has it".

Results are cached under $SM12X_CACHE/closure, keyed by their inputs.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement

from sm12x.mock import wheels
from sm12x.versions import load_versions

ROOT = Path(__file__).resolve().parents[2]

# The real bases' Python and glibc (Ubuntu 24.04: glibc 2.39) per image arch.
PYTHON = "3.12"
PLATFORMS = {"amd64": "x86_64-manylinux_2_39", "arm64": "aarch64-manylinux_2_39"}
# A requirement uv cannot satisfy from the index: "there is no version of
# llguidance>=1.7.6" (and "... of NAME==X").
NO_VERSION = re.compile(
    r"(?:there is no version of|no versions of) ([A-Za-z0-9_.\-]+)"
    r"|\b([A-Za-z0-9_.\-]+) was not found in the package registry"
)


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def cache_dir() -> Path:
    path = wheels.cache_root() / "closure"
    path.mkdir(parents=True, exist_ok=True)
    return path


def uv() -> str:
    """uv, at versions.env's TEST_UV_VERSION, in a virtualenv of its own."""
    version = load_versions()["TEST_UV_VERSION"]
    venv = cache_dir().parent / f"uv-{version}"
    binary = venv / "bin" / "uv"
    if binary.is_file():
        return str(binary)
    # Under a lock: the two tracks' image tests resolve their closures in two
    # workers at once (tests/support/schedule.py), and two pips installing
    # into one new virtualenv break it.
    with open(cache_dir() / f"uv-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.is_file():
            _install_uv(venv, version)
    return str(binary)


def _install_uv(venv: Path, version: str) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--timeout",
            "120",
            "--retries",
            "3",
            f"uv=={version}",
        ],
        check=True,
        timeout=600,
    )


def sglang_requirements(sglang: str) -> list[str]:
    """sglang's Requires-Dist lines without an extra, as written in its wheel."""
    with zipfile.ZipFile(wheels.wheel("sglang", sglang)) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(meta).decode().splitlines()
    found = []
    for line in lines:
        if line.startswith("Requires-Dist:"):
            text = line.split(":", 1)[1].strip()
            req = Requirement(text)
            if req.marker is None or "extra" not in str(req.marker):
                found.append(text)
    return found


@dataclass
class Compiled:
    ok: bool
    pins: dict[str, str]
    log: str


def compile_(
    requirements: list[str], constraints: dict[str, str], platform: str, python: str = PYTHON
) -> Compiled:
    """`uv pip compile` of requirements under constraints, for the real base's Python."""
    with tempfile.TemporaryDirectory(prefix="sm12x-closure-") as tmp:
        req_file, con_file, out = Path(tmp, "in.txt"), Path(tmp, "con.txt"), Path(tmp, "out.txt")
        req_file.write_text("\n".join(requirements) + "\n")
        con_file.write_text("".join(f"{n}=={v}\n" for n, v in sorted(constraints.items())))
        proc = subprocess.run(
            [
                uv(),
                "pip",
                "compile",
                str(req_file),
                "-c",
                str(con_file),
                "-o",
                str(out),
                "--python-version",
                python,
                "--python-platform",
                platform,
                "--only-binary",
                ":all:",
                "--no-header",
                "--no-annotate",
                "--quiet",
                "--no-python-downloads",
                "--index-url",
                "https://pypi.org/simple",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "UV_HTTP_TIMEOUT": "120", "UV_NO_CONFIG": "1"},
        )
        pins = {}
        if proc.returncode == 0:
            for line in out.read_text().splitlines():
                name, sep, version = line.strip().partition("==")
                if sep:
                    pins[norm(name)] = version.split(";")[0].strip()
        return Compiled(proc.returncode == 0, pins, proc.stdout + proc.stderr)


@dataclass
class Closure:
    sglang: str
    arch: str
    pins: dict[str, str]  # every package of the closure, name -> version
    lacking: dict[str, str] = field(default_factory=dict)  # requirement -> uv's reason


def closure(
    track: str | None, arch: str, python: str = PYTHON, platform: str | None = None
) -> Closure:
    """The track's sglang closure for one image arch (cached); python and platform
    default to the real base's (the stand-in asks for its own)."""
    sglang = load_versions(track)["SGLANG_VERSION"]
    requirements = sglang_requirements(sglang)
    platform = platform or PLATFORMS[arch]
    key = hashlib.sha256(
        json.dumps(
            [requirements, arch, python, platform, load_versions()["TEST_UV_VERSION"]]
        ).encode()
    ).hexdigest()
    cached = cache_dir() / f"sglang-{sglang}-{arch}-py{python}-{key[:12]}.json"
    if cached.is_file():
        data = json.loads(cached.read_text())
        return Closure(sglang, arch, data["pins"], data["lacking"])
    lacking: dict[str, str] = {}
    wanted = list(requirements)
    for _ in range(len(requirements)):
        result = compile_(wanted, {}, platform, python)
        if result.ok:
            break
        missing = {norm(a or b) for a, b in NO_VERSION.findall(result.log)}
        dropped = [r for r in wanted if norm(Requirement(r).name) in missing]
        if not dropped:
            raise RuntimeError(
                f"sglang {sglang}'s requirements do not resolve for {arch} "
                f"(not a missing package):\n{result.log[-3000:]}"
            )
        reason = " ".join(
            line.strip() for line in result.log.splitlines() if NO_VERSION.search(line)
        )
        for requirement in dropped:
            lacking[requirement] = reason[:300]
            wanted.remove(requirement)
    else:
        raise RuntimeError(f"sglang {sglang}'s closure for {arch} never resolved")
    partial = cached.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps({"pins": result.pins, "lacking": lacking}, indent=1) + "\n")
    partial.replace(cached)  # a reader in another worker never sees half of it
    return Closure(sglang, arch, result.pins, lacking)


def sm12x_requirements() -> list[str]:
    """sm12x's own runtime requirements (pyproject.toml [project] dependencies)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def conflict_names(log: str) -> list[str]:
    """The package names uv's explanation of an unsatisfiable resolution mentions."""
    names = re.findall(r"\b([A-Za-z][A-Za-z0-9_.\-]*)(?:==|>=|<=|!=|~=|<|>)[0-9]", log)
    return sorted({norm(n) for n in names})
