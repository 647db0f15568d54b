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
replacement shows; current: the pinned one, kept); a cache prebaked in root's
home cache folder as the real bases have; a fake `cuobjdump` at
/usr/local/cuda/bin (the devel base's place) that lists a library's GPU code
in the real tool's format (tests/support/fake_cuobjdump). No `patch`
program: scripts/apply-patches must work without it.

What a stand-in cannot imitate: Ubuntu 24.04 and its Python 3.12 (bookworm's
is 3.11), CUDA, the GPU packages, the real git checkout (only sglang's
package folder and a pyproject.toml are there). And one thing it does
differently to build it once: the CPU torch and Triton (SHARED, which stand in
for the real bases' CUDA builds and are the same pins on both tracks) are one
layer below both shapes, in the system Python's dist-packages; the venv shape
sees them through `--system-site-packages` (every other package of its
closure is inside /opt/sglang, as the real base has it:
test_the_stand_in_base_is_shaped_like_the_real_one checks both). And one
thing it does differently to build it faster: the closure is installed by uv
(TEST_UV_VERSION, the binary closure.py already runs, bind-mounted into the
build), not pip: the same files in the same scheme, compiled to bytecode as
pip compiles them (`--compile-bytecode`), so the image's imports run from
bytecode as on the real base; only each dist-info's INSTALLER says `uv`. The
editable sglang is still pip's, as sglang's Dockerfile has it.

Layers, each cached under SM12X_CACHE/standin/ keyed by its inputs and made
under a lock of its own (`locked`: the tracks' image tests run side by side):
  1. the OS: `debootstrap --variant=minbase` -> os-<key>.tar -> `docker import`
  2. torch and Triton, the two tracks' largest packages (1.2 GB installed):
     one image both tracks' stand-ins start FROM (`shared_image`), so the
     second track neither installs nor exports them again
  3. the rest of the track's Python stack: wheels downloaded on this machine
     (same Python 3.11 and glibc as the chroot) into wheels-<key>/, installed
     offline by uv from a Dockerfile per shape (--network none).
The images persist in the daemon's data root (scripts/test keeps it under
.cache/docker), so a warm run finds them and does nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
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

from sm12x.mock import wheels
from sm12x.versions import load_versions
from tests.support import calibrate, closure, containers

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# No `patch`: the real bases do not promise it, and apply-patches must not need it.
INCLUDE = ("python3", "python3-pip", "python3-venv", "ca-certificates")
# The closure's packages a stand-in leaves out, each with why (docs/image.md).
# Everything else of the track's closure is installed at the closure's version.
GPU_ONLY = {
    "torch": "a CUDA build of several GB; the stand-in has the CPU torch TEST_TORCH_VERSION",
    "triton": "the stand-in has TEST_TRITON_VERSION, whose CPU interpreter runs sglang's kernels",
    "torchvision": "pulls a CUDA torch; sglang's import chain only needs it to exist",
    "torchaudio": "built against the CUDA torch of its release",
    "torchcodec": "built against the CUDA torch of its release",
    "torchao": "C++ ops built against the CUDA torch of its release",
    "torch-memory-saver": "a CUDA allocator hook",
    "torch-c-dlpack-ext": "built against the CUDA torch of its release",
    "sglang-kernel": "sglang's CUDA kernels (383 MB on x86_64), no GPU here",
    "sgl-kernel": "sglang's CUDA kernels, no GPU here",
    "sgl-deep-gemm": "CUDA kernels",
    "flash-attn-4": "CUDA kernels (CuTe DSL)",
    "humming-kernels": "CUDA kernels",
    "quack-kernels": "CUDA kernels (CuTe DSL)",
    "tokenspeed-mla": "CUDA kernels",
    "tokenspeed-triton": "a GPU compiler build (Triton fork)",
    "tilelang": "a GPU kernel compiler bundling CUDA/TVM libraries",
    "helion": "a GPU kernel compiler on CUDA torch",
    "nccl4py": "NCCL bindings, no GPU here",
}
GPU_ONLY_PREFIXES = {
    "nvidia-": "CUDA libraries and toolchain wheels (GBs), no GPU here",
    "cuda-": "CUDA Python bindings and toolkit wheels, no GPU here",
}
# CPU-only exceptions to the prefixes: pure Python, and what the self-test imports.
KEEP = {"nvidia-ml-py"}
# The base's own sglang-router (the real bases build one in-tree): for pinned
# another release than versions.env's, so the build's replacement shows; for
# current the pinned release itself, reinstalled from PyPI by the build.
BASE_ROUTER = {"pinned": "0.3.1"}
# What the real bases prebake in root's home cache folder (reference/real-bases.md:
# sglang's kernels.lock among them); the runtime user must find it.
PREBAKED = "sglang/kernels.lock"
# Bump to rebuild every layer (a change to how they are made).
RECIPE_VERSION = "4"
# What both tracks' stand-ins install at one version (the pins TEST_TORCH_VERSION
# and TEST_TRITON_VERSION), made once as the layer below both (`shared_image`).
SHARED = ("torch", "triton")


def cache_dir() -> Path:
    path = wheels.cache_root() / "standin"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def locked(name: str):
    """One builder of a layer at a time across processes: the two tracks' image
    tests run in two workers (tests/conftest.py, work_unit) and share the OS
    layer; the second waits, then finds the first one's layer made."""
    with open(cache_dir() / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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


def os_tag() -> str:
    """The OS layer's tag, from what it is made of (nothing is built)."""
    return f"sm12x-standin-os:{_key(RECIPE_VERSION, SUITE, MIRROR, INCLUDE, 'minbase', platform.machine())}"


def os_image(timer: Timer) -> str:
    tag = os_tag()
    key = tag.partition(":")[2]
    if containers.image_exists(tag):
        return tag
    with locked(f"os-{key}"):
        return _os_image(timer, key, tag)


def _os_image(timer: Timer, key: str, tag: str) -> str:
    if containers.image_exists(tag):  # made by another process while this one waited
        return tag
    tar = cache_dir() / f"os-{key}.tar"
    if not tar.is_file():
        if os.geteuid() != 0:
            raise RuntimeError(
                "debootstrap needs root to build the stand-in base (CI runs as "
                "root; elsewhere run scripts/test with sudo)"
            )
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=cache_dir(), prefix="debootstrap-") as tmp:
            root = Path(tmp) / "root"
            _say(f"debootstrap {SUITE} minbase ({', '.join(INCLUDE)})")
            proc = subprocess.run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(INCLUDE)}",
                    SUITE,
                    str(root),
                    MIRROR,
                ],
                capture_output=True,
                text=True,
                timeout=calibrate.scaled(1200),
            )
            if proc.returncode != 0:
                raise RuntimeError(
                    "debootstrap failed:\n" + containers.tail(proc.stdout + proc.stderr)
                )
            # Apt's lists and caches are not part of an image; the real base has none either.
            for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for entry in (root / junk).glob("*"):
                    if entry.is_file():
                        entry.unlink()
            partial = tar.with_suffix(".tar.partial")
            subprocess.run(
                ["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."],
                check=True,
                timeout=600,
            )
            partial.rename(tar)
        timer.step("debootstrap", started)
    started = time.monotonic()
    with tar.open("rb") as handle:
        proc = subprocess.run(
            [containers.DOCKER, "import", "-", tag],
            stdin=handle,
            capture_output=True,
            text=True,
            env=containers.env(),
            timeout=600,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"docker import failed: {proc.stderr}")
    timer.step("import", started)
    return tag


def left_out(name: str) -> str | None:
    """Why the stand-in leaves a closure package out (None: it installs it)."""
    if name in KEEP:
        return None
    if name in GPU_ONLY:
        return GPU_ONLY[name]
    return next((why for prefix, why in GPU_ONLY_PREFIXES.items() if name.startswith(prefix)), None)


# The stand-in's own Python and glibc (bookworm: 3.11, 2.36), for its closure.
STANDIN_PYTHON, STANDIN_PLATFORM = "3.11", f"{platform.machine()}-manylinux_2_36"


def track_closure(track: str | None) -> closure.Closure:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
    return closure.closure(track, arch, STANDIN_PYTHON, STANDIN_PLATFORM)


def contents(track: str | None) -> dict[str, dict[str, str]]:
    """What a track's stand-in installs ('installed': name -> version) and leaves out
    ('left_out': requirement -> why), as docs/image.md and the tests read it."""
    pins = load_versions(track)
    found = track_closure(track)
    installed, skipped = {}, {}
    for name, version in sorted(found.pins.items()):
        why = left_out(name)
        if name == "sglang":
            continue
        if why:
            skipped[f"{name}=={version}"] = why
        else:
            installed[name] = version
    for requirement, why in found.lacking.items():
        skipped[requirement] = f"not on this machine's index ({why})"
    installed["torch"] = pins["TEST_TORCH_VERSION"]
    installed["triton"] = pins["TEST_TRITON_VERSION"]
    installed["sglang-router"] = BASE_ROUTER.get(pins["SM12X_TRACK"], pins["SGLANG_ROUTER_VERSION"])
    return {"installed": installed, "left_out": skipped}


def _house(track: str | None) -> tuple[Path, dict[str, str], str]:
    """A track's wheelhouse folder (named by what it holds), the wheels it holds
    and the sglang version; nothing is downloaded."""
    sglang = load_versions(track)["SGLANG_VERSION"]
    wanted = {k: v for k, v in contents(track)["installed"].items() if k not in SHARED}
    key = _key(
        RECIPE_VERSION, sys.version_info[:2], platform.machine(), sorted(wanted.items()), sglang
    )
    return cache_dir() / f"wheels-{key}", wanted, sglang


def wheelhouse(timer: Timer, track: str | None = None) -> Path:
    house, wanted, sglang = _house(track)
    if (house / ".complete").is_file():
        return house
    with locked(house.name):
        return _wheelhouse(timer, house, wanted, sglang)


def _wheelhouse(timer: Timer, house: Path, wanted: dict[str, str], sglang: str) -> Path:
    if (house / ".complete").is_file():
        return house
    started = time.monotonic()
    shutil.rmtree(house, ignore_errors=True)
    house.mkdir(parents=True)
    _say(f"downloading the stand-in's {len(wanted)} wheels into {house}")
    # This Python is the chroot's (3.11, glibc >= 2.36), so what pip picks for
    # it installs there. torch comes as a CPU build from this machine's disk.
    _download(house, wanted)
    source = wheels.wheel("sglang", sglang)
    shutil.copy2(source, house / source.name)
    (house / ".complete").write_text("\n".join(sorted(p.name for p in house.glob("*.whl"))))
    timer.step("wheels", started)
    return house


def checkout(house: Path, sglang: str, dest: Path) -> None:
    """sglang's checkout as the real bases have it: /sgl-workspace/sglang/python holds
    the package and a pyproject.toml (setuptools, as sglang's own), from the wheel."""
    python = dest / "python"
    with zipfile.ZipFile(next(house.glob(f"sglang-{sglang}-*.whl"))) as archive:
        archive.extractall(
            python, members=[n for n in archive.namelist() if n.startswith("sglang/")]
        )
    requirements = closure.sglang_requirements(sglang)
    deps = "".join(f"  {json.dumps(r)},\n" for r in requirements)
    (python / "pyproject.toml").write_text(
        "# The stand-in's: sglang's real python/pyproject.toml builds with setuptools too.\n"
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "sglang"\nversion = "{sglang}"\nrequires-python = ">=3.10"\n'
        f"dependencies = [\n{deps}]\n\n"
        '[tool.setuptools.packages.find]\ninclude = ["sglang*"]\n'
    )
    (dest / "README.md").write_text("sglang checkout (stand-in: only python/ is real code)\n")


def shared_pins() -> dict[str, str]:
    """SHARED at the versions every track's stand-in installs (one set: the test
    environment's pins are not per track)."""
    pins = load_versions()
    return {"torch": pins["TEST_TORCH_VERSION"], "triton": pins["TEST_TRITON_VERSION"]}


# The shared layer's Dockerfile: SHARED into the system Python, offline.
SHARED_DOCKERFILE = """ARG OS_IMAGE
FROM ${OS_IMAGE}
RUN --mount=type=bind,source=wheels,target=/tmp/wheels \\
    python3 -m pip install --break-system-packages --root-user-action=ignore \\
      --disable-pip-version-check --no-index --no-deps /tmp/wheels/*.whl
"""


def shared_key(os_tag: str, pins: dict[str, str]) -> str:
    """Everything the shared layer is made of: a change to any (a pin, the OS
    layer, how it is built) is another key, so another image, built afresh
    (tests/unit/test_standin_keys.py)."""
    return _key(RECIPE_VERSION, os_tag, sorted(pins.items()), SHARED_DOCKERFILE, platform.machine())


def shared_tag(os_tag: str) -> str:
    """The shared layer's tag, from what it is made of (nothing is built)."""
    return f"sm12x-standin-shared:{shared_key(os_tag, shared_pins())}"


def shared_image(timer: Timer, os_tag: str) -> str:
    """The OS layer plus SHARED, built once for both tracks (under a lock: the
    tracks' stand-ins are made side by side; the second waits, then finds it)."""
    pins = shared_pins()
    tag = shared_tag(os_tag)
    if containers.image_exists(tag):
        return tag
    with locked(tag.replace(":", "-")):
        if containers.image_exists(tag):
            return tag
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="sm12x-standin-shared-") as tmp:
            context = Path(tmp)
            (context / "Dockerfile").write_text(SHARED_DOCKERFILE)
            _download(context / "wheels", pins)
            proc = containers.build(context, tag, {"OS_IMAGE": os_tag}, network="none")
        containers.forget_contexts()
        if proc.returncode != 0:
            raise RuntimeError(
                f"building the stand-in's shared layer failed:\n{containers.tail(proc.stderr)}"
            )
        timer.step("shared-build", started)
        return tag


def _download(folder: Path, wanted: dict[str, str]) -> None:
    """The wheels into folder, asking the index up to three times: in one run
    pypi.org answered pip with a stale page for cython (no 3.3.2, a release 12
    days old that uv had just resolved from the same index), and the whole
    track's stand-in failed on it. A later try downloads only what is missing
    (pip keeps the files already in folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        if attempt:
            time.sleep(30)
        proc = _pip_download(folder, wanted)
        if proc.returncode == 0:
            return
    raise RuntimeError(f"pip download failed:\n{containers.tail(proc.stdout + proc.stderr)}")


def _pip_download(folder: Path, wanted: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--timeout",
            "120",
            "--retries",
            "3",
            "-d",
            str(folder),
            *(f"{name}=={version}" for name, version in sorted(wanted.items())),
        ],
        capture_output=True,
        text=True,
        timeout=calibrate.scaled(3600),
    )


FAKE_CUOBJDUMP = Path(__file__).resolve().parent / "fake_cuobjdump"

# One Dockerfile, two shapes (SHAPE=system | venv), offline, from the wheelhouse;
# its own file (paths inside the image, not of this machine).
DOCKERFILE = (Path(__file__).resolve().parent / "standin.Dockerfile").read_text()


def shape(track: str | None) -> str:
    """The real base's Python layout for a track: system (pinned) or venv (current)."""
    return "venv" if load_versions(track)["SM12X_TRACK"] == "current" else "system"


def image(timer: Timer | None = None, track: str | None = None) -> str:
    """The stand-in base of a track (default: the default track's), its tag (built if
    missing)."""
    timer = timer or Timer()
    house, _, sglang = _house(track)
    base = shared_tag(os_tag())
    requirements = closure.sglang_requirements(sglang)
    key = image_key(base, house.name, shape(track), requirements, uv_version())
    tag = f"sm12x-standin:{key}"
    if containers.image_exists(tag):
        return tag
    # The wheelhouse first: the track that waits for the other's OS and shared
    # layers (made under their locks) downloads its wheels meanwhile.
    wheelhouse(timer, track)
    made = shared_image(timer, os_image(timer))
    assert made == base, (made, base)
    with locked(f"standin-{key}"):
        if not containers.image_exists(tag):
            _build_image(timer, track, tag, base, house, sglang)
    # The stand-in holds these wheels installed, and its tag names the
    # wheelhouse, so while it exists the wheels are never read again: keeping
    # them cost a cold run 1.1 GB of its peak disk (both tracks). A rebuild
    # (another key, a data root removed) downloads them again.
    with locked(house.name):
        shutil.rmtree(house, ignore_errors=True)
    return tag


def uv_version() -> str:
    """The uv that installs a stand-in's closure (standin.Dockerfile; the module
    docstring says why uv, not pip)."""
    return load_versions()["TEST_UV_VERSION"]


def image_key(
    os_tag: str, house: str, layout: str, requirements: list[str], uv_version: str
) -> str:
    """Everything a track's stand-in is made of: a change to any (the layers below,
    the wheelhouse, its Dockerfile, the shape, the fake cuobjdump, sglang's
    requirements, the uv that installs it) is another key, so another image
    (tests/unit/test_standin_keys.py)."""
    return _key(
        RECIPE_VERSION,
        os_tag,
        house,
        DOCKERFILE,
        layout,
        FAKE_CUOBJDUMP.read_text(),
        requirements,
        uv_version,
    )


def _build_image(
    timer: Timer, track: str | None, tag: str, os_tag: str, house: Path, sglang: str
) -> str:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sm12x-standin-") as tmp:
        context = Path(tmp)
        (context / "Dockerfile").write_text(DOCKERFILE)
        shutil.copy2(FAKE_CUOBJDUMP, context / "fake_cuobjdump")
        # The host's uv (a static-enough ELF: glibc only), bind-mounted by the install.
        shutil.copy2(closure.uv(), context / "uv")
        checkout(house, sglang, context / "checkout")
        # Hard links: the context is sent as a tar; no second copy on disk.
        (context / "wheels").mkdir()
        for whl in house.glob("*.whl"):
            if whl.name.startswith("sglang-"):
                continue  # sglang comes from the checkout
            try:
                os.link(whl, context / "wheels" / whl.name)
            except OSError:
                shutil.copy2(whl, context / "wheels" / whl.name)
        venv_bin = "/opt/sglang/bin:" if shape(track) == "venv" else ""
        proc = containers.build(
            context,
            tag,
            {"OS_IMAGE": os_tag, "SHAPE": shape(track), "PREBAKED": PREBAKED, "VENV_BIN": venv_bin},
            network="none",
        )
    containers.forget_contexts()
    if proc.returncode != 0:
        raise RuntimeError(f"building the stand-in failed:\n{containers.tail(proc.stderr)}")
    timer.step("standin-build", started)
    return tag
