"""Stand-ins for the two real sglang base images, built here from Debian's archive.

No image registry is reachable from the CI machines, so the real bases
(lmsysorg/sglang:v0.5.17-cu130-runtime, v0.5.23-cu130-runtime) cannot be
pulled. Each track gets a stand-in shaped like its real base as read from
sglang's docker/Dockerfile (docs/image.md, "The real bases"):

  pinned (0.5.17)  system Python, packages pip-installed into
                   /usr/local/lib/python3.X/dist-packages, the PEP 668 marker
                   (Debian's python3 ships it), sglang an editable install of
                   a checkout: `pip install --no-deps -e` of
                   /sgl-workspace/sglang/python; WORKDIR /sgl-workspace/sglang.
  current (0.5.23) the same checkout, installed into a virtualenv at
                   /opt/sglang whose bin/ is first on PATH.

Both: root, the track's sglang dependency closure as far as this machine's
index has it (tests/support/closure.py, resolved for the stand-in's Python),
less the GPU-only packages in GPU_ONLY (each with why), plus a CPU torch and
the Triton whose interpreter runs sglang's kernels; an sglang-router of the
base's own (pinned: another release than versions.env's, so the build's
replacement shows; current: the pinned one, kept); a cache prebaked under
/root/.cache as the real bases have; a fake `cuobjdump` at
/usr/local/cuda/bin (the devel base's place) that lists a library's GPU code
in the real tool's format (tests/support/fake_cuobjdump). No `patch`
program: scripts/apply-patches must work without it.

What a stand-in cannot imitate: Ubuntu 24.04 and its Python 3.12 (bookworm's
is 3.11), CUDA, the GPU packages, the real git checkout (only sglang's
package folder and a pyproject.toml are there).

Layers, each cached under SM12X_CACHE/standin/ keyed by its inputs:
  1. the OS: `debootstrap --variant=minbase` -> os-<key>.tar -> `docker import`
  2. the Python stack: wheels downloaded on this machine (same Python 3.11 and
     glibc as the chroot) into wheels-<key>/, installed offline by a
     Dockerfile per shape (--network none).
The images persist in the daemon's data root (scripts/test keeps it under
.cache/docker), so a warm run finds them and does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from sm12x.versions import load_versions
from support import containers, wheels

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# No `patch`: the real bases do not promise it, and apply-patches must not need it.
INCLUDE = ("python3", "python3-pip", "python3-venv", "ca-certificates")
# What importing sglang's sparse-MLA path and flashinfer needs on a CPU
# (reference/upstream-facts.md, "Importing the real code on a CPU machine").
IMPORT_DEPS = (
    "numpy", "orjson", "psutil", "pybase64", "requests", "packaging", "pillow", "starlette",
    "tqdm", "ipython", "pydantic", "aiohttp", "msgspec", "nvidia-ml-py", "partial-json-parser",
    "apache-tvm-ffi>=0.1.6,<0.2,!=0.1.8,!=0.1.8.post0",
)
# What sglang 0.5.23's self-test imports beyond that (its DeepSeek-V4 model module,
# for the target's own head count), at the sglang release's own pins where it
# has them (the real base has every one): found by running the self-test in a
# virtualenv with only the above, one ImportError at a time.
MODEL_IMPORT_DEPS = ("pyzmq", "transformers", "dill", "sentencepiece", "einops",
                     "compressed-tensors", "gguf", "openai")
# Bump to rebuild every layer (a change to how they are made).
RECIPE_VERSION = "2"


def cache_dir() -> Path:
    path = Path(os.environ.get("SM12X_CACHE", wheels.ROOT / ".cache")) / "standin"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def base_flashinfer(sglang: str) -> str:
    """The flashinfer sglang's own metadata pins (what the real base ships)."""
    with zipfile.ZipFile(wheels.wheel("sglang", sglang)) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        for line in archive.read(meta).decode().splitlines():
            if line.startswith("Requires-Dist:") and "extra ==" not in line:
                spec = line.split(":", 1)[1].strip()
                name = spec.split("=")[0].split("[")[0].strip().replace("_", "-").lower()
                if name == "flashinfer-python" and "==" in spec:
                    return spec.split("==", 1)[1].split(";")[0].strip()
    raise RuntimeError(f"sglang {sglang}'s metadata pins no flashinfer-python")


class Timer:
    def __init__(self) -> None:
        self.steps: dict[str, float] = {}

    def step(self, name: str, started: float) -> None:
        self.steps[name] = round(time.monotonic() - started, 1)


def _say(message: str) -> None:
    print(f"[standin] {message}", file=sys.stderr, flush=True)


def os_image(timer: Timer) -> str:
    arch = platform.machine()
    key = _key(RECIPE_VERSION, SUITE, MIRROR, INCLUDE, "minbase", arch)
    tag = f"sm12x-standin-os:{key}"
    if containers.image_exists(tag):
        return tag
    tar = cache_dir() / f"os-{key}.tar"
    if not tar.is_file():
        if os.geteuid() != 0:
            raise RuntimeError("debootstrap needs root to build the stand-in base (CI runs as "
                               "root; elsewhere run scripts/test with sudo)")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=cache_dir(), prefix="debootstrap-") as tmp:
            root = Path(tmp) / "root"
            _say(f"debootstrap {SUITE} minbase ({', '.join(INCLUDE)})")
            proc = subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={','.join(INCLUDE)}", SUITE,
                 str(root), MIRROR], capture_output=True, text=True, timeout=1200)
            if proc.returncode != 0:
                raise RuntimeError("debootstrap failed:\n"
                                   + containers.tail(proc.stdout + proc.stderr))
            # Apt's lists and caches are not part of an image; the real base has none either.
            for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for entry in (root / junk).glob("*"):
                    if entry.is_file():
                        entry.unlink()
            partial = tar.with_suffix(".tar.partial")
            subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."],
                           check=True, timeout=600)
            partial.rename(tar)
        timer.step("debootstrap", started)
    started = time.monotonic()
    with tar.open("rb") as handle:
        proc = subprocess.run([containers.DOCKER, "import", "-", tag], stdin=handle,
                              capture_output=True, text=True, env=containers.env(), timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"docker import failed: {proc.stderr}")
    timer.step("import", started)
    return tag


def model_deps(sglang: str) -> list[str]:
    """MODEL_IMPORT_DEPS at sglang's own pins (unpinned where it pins none)."""
    own = wheels.sglang_pins(sglang)
    return [f"{name}=={own[name]}" if name in own else name for name in MODEL_IMPORT_DEPS]


def wheelhouse(timer: Timer, track: str | None = None) -> Path:
    pins = load_versions(track)
    sglang = pins["SGLANG_VERSION"]
    flashinfer = base_flashinfer(sglang)
    pinned = [f"torch=={pins['TEST_TORCH_VERSION']}", f"triton=={pins['TEST_TRITON_VERSION']}"]
    deps = [*IMPORT_DEPS, *model_deps(sglang)]
    key = _key(RECIPE_VERSION, sys.version_info[:2], platform.machine(), pinned, deps,
               sglang, flashinfer)
    house = cache_dir() / f"wheels-{key}"
    if (house / ".complete").is_file():
        return house
    started = time.monotonic()
    shutil.rmtree(house, ignore_errors=True)
    house.mkdir(parents=True)
    _say(f"downloading the stand-in's wheels into {house}")
    # This Python is the chroot's (3.11, glibc >= 2.36), so what pip picks for
    # it installs there. torch comes as a CPU build from this machine's disk.
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
         "--timeout", "120", "--retries", "3", "-d", str(house), *pinned, *deps],
        capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"pip download failed:\n{containers.tail(proc.stdout + proc.stderr)}")
    for dist, version in (("sglang", sglang), ("flashinfer-python", flashinfer)):
        try:
            source = wheels.wheel(dist, version)
        except FileNotFoundError:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--only-binary=:all:", "-d", str(wheels.cache_dir()),
                            f"{dist}=={version}"], check=True, timeout=900)
            source = wheels.wheel(dist, version)
        shutil.copy2(source, house / source.name)
    (house / ".complete").write_text("\n".join(sorted(p.name for p in house.glob("*.whl"))))
    timer.step("wheels", started)
    return house


DOCKERFILE = """\
ARG OS_IMAGE
FROM ${OS_IMAGE}
# The base image's Python stack: pip installs into /usr/local/lib/python3.X/
# dist-packages as in the real base; offline, from the pre-resolved wheels.
RUN --mount=type=bind,source=wheels,target=/tmp/wheels \\
    python3 -m pip install --break-system-packages --root-user-action=ignore \\
      --disable-pip-version-check --no-index --no-deps /tmp/wheels/*.whl
"""


def image(timer: Timer | None = None, track: str | None = None) -> str:
    """The stand-in base of a track (default: the default track's), its tag (built if
    missing)."""
    timer = timer or Timer()
    os_tag = os_image(timer)
    house = wheelhouse(timer, track)
    tag = f"sm12x-standin:{_key(RECIPE_VERSION, os_tag, house.name, DOCKERFILE)}"
    if containers.image_exists(tag):
        return tag
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sm12x-standin-") as tmp:
        context = Path(tmp)
        (context / "Dockerfile").write_text(DOCKERFILE)
        # Hard links: the context is sent as a tar; no second copy on disk.
        (context / "wheels").mkdir()
        for whl in house.glob("*.whl"):
            try:
                os.link(whl, context / "wheels" / whl.name)
            except OSError:
                shutil.copy2(whl, context / "wheels" / whl.name)
        proc = containers.build(context, tag, {"OS_IMAGE": os_tag}, network="none")
    if proc.returncode != 0:
        raise RuntimeError(f"building the stand-in failed:\n{containers.tail(proc.stderr)}")
    timer.step("standin-build", started)
    return tag
