"""The real Dockerfile, built on a stand-in base and run, for every track.

No registry is reachable here, so the base is tests/support/standin.py's
Debian image shaped like the track's real base: for pinned the system Python
with the PEP 668 marker and sglang an editable install of a checkout at
/sgl-workspace/sglang/python, for current the same checkout in a virtualenv
at /opt/sglang on PATH; each with the track's sglang closure as far as this
machine's index has it (and sglang's own flashinfer pin, which the build
reinstalls at FLASHINFER_VERSION: the same version, sglang 0.5.17's and
0.5.23's own), no `patch` program, a cache prebaked in root's $HOME/.cache and
a router of the base's own. The build is the real one: BuildKit, the Dockerfile as it is,
the build arguments scripts/image-args computes from versions.env for the
track, host networking for PyPI. Only FLASHINFER_PREBUILT=0: flashinfer-cubin
and flashinfer-jit-cache live on flashinfer's own index, which these machines
cannot reach (docs/image.md, "What CI builds").

Then each image is run: the self-test, `sm12x launch --dry-run` for every
recipe against its golden command, the labels, the user, the cache volume,
the HEALTHCHECK, each patched file byte for byte against what
scripts/apply-patches makes of the same wheel and proven to be the file the
interpreter imports (from fresh bytecode, as the runtime user). And builds
and build-time checks that must fail, each with its reason: another track's
base, a patch that does not apply, a self-test that fails, a jit-cache
without its providers, a kernel library without the GPU's code, stale
bytecode, a cache the runtime user cannot write.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sm12x.patches import series as patch_series
from sm12x.recipe import load_all
from sm12x.recipe.tracks import recipe_tracks
from sm12x.versions import default_track, load_versions, tracks
from tests.support import build_steps, calibrate, containers, flashinfer_index, standin, trees
from tools import golden

# The stand-in base (debootstrap, the track's closure: about 15 minutes cold on
# two loaded cores) and the image build happen in the first test that needs
# them, so that test's limit must hold them: the sum of the inner steps' own
# timeouts (standin.py: debootstrap 1200 s, the wheelhouse 3600 s; the build
# itself) would be too much for CI's 90 minutes, so the limit is what a cold
# base plus a build took on a loaded machine with room to spare, and each inner
# step still fails first with its own message when it hangs. That figure is for
# the CI machine as it was; a machine busier now (calibrate.py measures it in
# this run) stretches it.
BUILD_LIMIT_S = calibrate.scaled(2700)
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(BUILD_LIMIT_S)]

ROOT = Path(__file__).resolve().parents[2]
TARGET = "sglang/kernels/ops/attention/flash_mla_sm120.py"
PINS = load_versions()
TIMINGS: dict[str, float] = {}


def image_args(track: str | None = None, **overrides: str) -> dict[str, str]:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "image-args"),
            "--format",
            "json",
            *(["--track", track] if track else []),
            *(f"{k}={v}" for k, v in overrides.items()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    values = json.loads(proc.stdout)
    return {k: v for k, v in values.items() if k not in ("IMAGE_REPO", "TAGS", "COMMIT_TAGS")}


def ca_bundle() -> dict[str, Path]:
    """The host's CA bundle as the build's `pip-ca` secret (a TLS-inspecting proxy
    on the way to PyPI is trusted only through it)."""
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            return {"pip-ca": Path(candidate)}
    return {}


def build(tag: str, track: str | None = None, **overrides: str) -> subprocess.CompletedProcess[str]:
    return containers.build(ROOT, tag, image_args(track, **overrides), secrets=ca_bundle())


def step(proc: subprocess.CompletedProcess[str], fragment: str) -> build_steps.Step:
    """The build's one step whose instruction holds `fragment` (from BuildKit's
    plain log: ran or CACHED, and for how long)."""
    found = [s for s in build_steps.parse(proc.stderr) if fragment in s.name]
    assert len(found) == 1, f"{len(found)} steps hold {fragment!r}:\n{containers.tail(proc.stderr)}"
    return found[0]


# Steps every build on the default track's base shares with that track's image
# build: the base checks and the sm12x wheel (nothing of FLASHINFER_*).
SHARED_STEPS = ("image-build check-base", "pip wheel --no-deps")
FLASHINFER_PYTHON = "install-flashinfer --part python"
FLASHINFER_KERNELS = "install-flashinfer --part kernels"


def record_timings() -> None:
    """TIMINGS into the run's record, merged with what the other track's worker
    wrote there (the tracks build side by side: tests/conftest.py, work_unit)."""
    path = Path(os.environ.get("SM12X_CACHE", ROOT / ".cache")) / "image-test-timings.json"
    with standin.locked("image-test-timings"):
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            found = {}
        # xdist's id of this run, the same in every worker (none: one process).
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid()))
        if found.get("run") != run:
            found = {}  # a previous run's figures
        made = {**found, **TIMINGS, "run": run}
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(json.dumps(made, indent=2, sort_keys=True) + "\n")
        partial.replace(path)


@dataclass
class Built:
    tag: str
    args: dict[str, str]
    log: str
    track: str

    @property
    def pins(self) -> dict[str, str]:
        return load_versions(self.track)

    @property
    def verdict(self) -> str:
        """The self-test's verdict configuration: patched where the series has the
        dispatch patch, sglang's own dispatch where the rule retired it."""
        files = {p["file"] for p in patch_series.series(self.pins["SGLANG_VERSION"])}
        return "patched" if "0001-sm120-sparse-mla-topk-dispatch.patch" in files else "unpatched"


@pytest.fixture(scope="session")
def daemon() -> None:
    containers.need_daemon()


class Once:
    """A build made once per key, its failure kept: the test that owns the
    build (own=True) fails with the reason, every other test that needs it is
    skipped pointing there, so one broken build is one failure, not one error
    per dependent test."""

    def __init__(self, what: str, owner: str, make) -> None:
        self.what, self.owner, self.make = what, owner, make
        self.done: dict[str, object] = {}
        self.failed: dict[str, str] = {}

    def __call__(self, key: str, own: bool = False):
        if key not in self.done and key not in self.failed:
            try:
                self.done[key] = self.make(key)
            except Exception as exc:  # noqa: BLE001 - kept, then reported by the owner
                self.failed[key] = f"{type(exc).__name__}: {exc}"
        if key in self.failed:
            reason = f"the {key} {self.what} failed"
            if own:
                pytest.fail(f"{reason}:\n{self.failed[key]}", pytrace=False)
            pytest.skip(f"{reason}: {self.owner}[{key}] says why")
        return self.done[key]


def _make_base(track: str) -> str:
    started = time.monotonic()
    timer = standin.Timer()
    made = standin.image(timer, track)
    TIMINGS.update({f"standin.{track}.{k}": v for k, v in timer.steps.items()})
    TIMINGS[f"standin.{track}"] = round(time.monotonic() - started, 1)
    record_timings()
    return made


@pytest.fixture(scope="session")
def bases(daemon):
    """bases(track) -> that track's stand-in base (built once)."""
    return Once("stand-in base", "test_the_stand_in_base_is_shaped_like_the_real_one", _make_base)


@pytest.fixture(scope="session")
def base(bases) -> str:
    """The default track's stand-in base."""
    return bases(default_track())


class BuildFailed(Exception):
    pass


@pytest.fixture(scope="session")
def images(bases) -> Once:
    def make(track: str) -> Built:
        tag = f"sm12x-test:image-{track}"
        args = image_args(track, BASE_IMAGE=bases(track), FLASHINFER_PREBUILT="0")
        started = time.monotonic()
        proc = containers.build(ROOT, tag, args, secrets=ca_bundle())
        TIMINGS[f"build.{track}"] = round(time.monotonic() - started, 1)
        if proc.returncode == 0:
            size = containers.inspect_image(tag)["Size"]
            TIMINGS[f"image_size_gb.{track}"] = round(size / 1e9, 2)
        record_timings()
        if proc.returncode != 0:
            raise BuildFailed(containers.tail(proc.stderr, 80))
        return Built(tag, args, proc.stderr, track)

    return Once("image build", "test_the_image_builds", make)


@pytest.fixture(scope="session", params=tracks())
def image(request, images) -> Built:
    return images(request.param)


@pytest.mark.parametrize("track", tracks())
def test_the_image_builds(images, track):
    """The build, as its own test: the one that fails when it does."""
    assert images(track, own=True).tag == f"sm12x-test:image-{track}"


def python_in(image: str, code: str, **kw) -> str:
    result = containers.run(image, "-c", code, entrypoint="python3", **kw)
    assert result.code == 0, result.explain()
    return result.stdout


# --- the stand-in bases are shaped like the real ones -----------------------------------

CHECKOUT = "/sgl-workspace/sglang/python"
LAYOUT = """
import importlib.metadata as m, importlib.util as u, json, os, re, sys, sysconfig
where = {}  # each distribution's site folder, the first on sys.path (the one imported)
for d in m.distributions():
    name = re.sub(r"[-_.]+", "-", d.metadata["Name"] or "").lower()
    where.setdefault(name, str(d.locate_file("")))
dist = m.distribution("sglang")
direct = json.loads(dist.read_text("direct_url.json") or "{}")
print(json.dumps({"prefix": sys.prefix, "purelib": sysconfig.get_paths()["purelib"],
    "executable": sys.executable, "sglang": u.find_spec("sglang").origin,
    "editable": direct.get("dir_info", {}).get("editable", False), "url": direct.get("url"),
    "marker": os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"],
                                          "EXTERNALLY-MANAGED")),
    "cwd": os.getcwd(), "packages": len(list(m.distributions())), "where": where}))
"""

# Every .py module the base's distributions install (sglang's checkout aside: the
# image build compiles it) has its bytecode, as pip leaves it on the real base,
# unless it does not compile at all (pip skips those too).
BYTECODE = """
import importlib.metadata as m, importlib.util as u, json, os
total, missing = 0, []
for d in m.distributions():
    if (d.metadata["Name"] or "").lower() == "sglang":
        continue
    site = os.path.realpath(str(d.locate_file("")))
    for f in d.files or []:
        path = os.path.realpath(str(d.locate_file(f)))
        if f.suffix != ".py" or not path.startswith(site + os.sep) or not os.path.isfile(path):
            continue
        total += 1
        if os.path.exists(u.cache_from_source(path)):
            continue
        try:
            with open(path, "rb") as handle:
                compile(handle.read(), path, "exec")
        except (SyntaxError, ValueError):
            continue
        missing.append(path)
print(json.dumps({"total": total, "missing": missing}))
"""


@pytest.mark.parametrize("track", tracks())
def test_the_stand_in_base_is_shaped_like_the_real_one(bases, track):
    base = bases(track, own=True)
    found = json.loads(python_in(base, LAYOUT))
    assert found["sglang"] == f"{CHECKOUT}/sglang/__init__.py"  # the checkout, not site-packages
    assert found["editable"] is True and found["url"] == f"file://{CHECKOUT}"
    assert found["cwd"] == "/sgl-workspace/sglang"
    if standin.shape(track) == "venv":
        assert found["prefix"] == "/opt/sglang"
        assert found["executable"].startswith("/opt/sglang/bin/python3")
    else:
        assert found["prefix"] == "/usr"
        assert found["marker"] is True  # Debian's, as Ubuntu's: PEP 668
        assert found["purelib"].startswith("/usr/local/lib/python3")
        assert found["purelib"].endswith("/dist-packages")
    # The track's closure, not a hand-picked 30 packages.
    installed = standin.contents(track)["installed"]
    assert found["packages"] >= len(installed)
    # torch and Triton from the layer both tracks share, in the system Python's
    # dist-packages; every other package where the real base keeps it (for the
    # venv shape: inside the venv, which sees the shared ones as system site).
    where = found["where"]
    own = "/opt/sglang/lib/" if standin.shape(track) == "venv" else "/usr/local/lib/python3"
    for name in installed:
        expected = "/usr/local/lib/python3" if name in standin.SHARED else own
        found_at = where.get(re.sub(r"[-_.]+", "-", name).lower(), "missing")
        assert found_at.startswith(expected), (name, found_at)
    tools = containers.run(
        base, "-c", "command -v patch || echo no-patch; command -v cuobjdump", entrypoint="sh"
    )
    assert tools.stdout.split() == ["no-patch", "/usr/local/cuda/bin/cuobjdump"], tools.explain()
    # The closure is installed compiled (by uv, standin.py says why), as pip does.
    compiled = json.loads(python_in(base, BYTECODE))
    assert compiled["total"] > 10000, compiled["total"]  # the whole closure was read
    assert compiled["missing"] == [], compiled["missing"][:20]


# --- what the build did --------------------------------------------------------------


def test_the_image_has_the_pinned_flashinfer_which_is_sglang_s_own(image, bases):
    # The stand-in carries sglang's own pin, as the real base does; for both
    # tracks that is the pinned flashinfer (no override of its stack).
    pins = image.pins
    code = "import importlib.metadata as m; print(m.version('flashinfer-python'))"
    before = python_in(bases(image.track), code)
    assert before.strip() == standin.base_flashinfer(pins["SGLANG_VERSION"])
    assert before.strip() == pins["FLASHINFER_VERSION"]
    after = python_in(image.tag, code)
    assert after.strip() == pins["FLASHINFER_VERSION"]


def test_the_build_ran_the_full_self_test_and_kept_its_report(image):
    # Written by the build's selftest stage (cached builds print no log, the
    # report stays): the full census, every call of the image's configuration
    # on a CUTLASS kernel.
    text = python_in(image.tag, "print(open('/opt/sm12x/selftest/report.txt').read())")
    assert "sm12x dispatch self-test passed" in text
    report = json.loads(
        python_in(image.tag, "print(open('/opt/sm12x/selftest/report.json').read())")
    )
    assert report["versions"]["sglang"] == image.pins["SGLANG_VERSION"]
    assert report["versions"]["flashinfer-python"] == image.pins["FLASHINFER_VERSION"]
    judged = report["summary"][image.verdict]
    assert judged.get("abort", 0) == judged.get("triton", 0) == judged.get("error", 0) == 0
    if image.verdict == "patched":
        assert judged["cutlass-padded"] > 0  # the patch is what makes them dispatchable
    else:  # flashinfer 0.7.2 serves every width itself: no patch, nothing padded
        assert "patched" not in report["summary"] and set(judged) == {"cutlass"}


def test_installed_versions_are_the_pins(image):
    PINS = image.pins  # noqa: N806 (the track's)
    versions = json.loads(
        python_in(
            image.tag,
            (
                "import importlib.metadata as m, json\n"
                "def v(d):\n"
                "    try: return m.version(d)\n"
                "    except m.PackageNotFoundError: return None\n"
                "print(json.dumps({d: v(d) for d in ('sglang', 'flashinfer-python', 'flashinfer-cubin',"
                " 'flashinfer-jit-cache', 'sm12x', 'sglang-router', 'torch')}))"
            ),
        )
    )
    assert versions["sglang"] == PINS["SGLANG_VERSION"]
    assert versions["flashinfer-python"] == PINS["FLASHINFER_VERSION"]
    # FLASHINFER_PREBUILT=0 here; the real build installs both at FLASHINFER_VERSION.
    assert versions["flashinfer-cubin"] is None and versions["flashinfer-jit-cache"] is None
    assert versions["sm12x"] == PINS["SM12X_VERSION"]
    assert versions["sglang-router"] == PINS["SGLANG_ROUTER_VERSION"]
    # The base's torch is untouched (the stand-in's CPU build).
    assert versions["torch"].startswith(PINS["TEST_TORCH_VERSION"])


def test_labels_say_what_is_inside(image):
    PINS = image.pins  # noqa: N806 (the track's)
    labels = containers.inspect_image(image.tag)["Config"]["Labels"]
    args = image.args
    assert labels["org.opencontainers.image.version"] == PINS["SM12X_VERSION"]
    assert labels["org.opencontainers.image.revision"] == args["SM12X_REVISION"]
    assert len(args["SM12X_REVISION"]) == 40  # this checkout's commit
    assert labels["org.opencontainers.image.source"] == args["SM12X_SOURCE"]
    assert labels["org.opencontainers.image.base.name"] == args["BASE_IMAGE"]
    assert labels["sm12x.sglang.version"] == PINS["SGLANG_VERSION"]
    assert labels["sm12x.flashinfer.version"] == PINS["FLASHINFER_VERSION"]
    assert labels["sm12x.flashinfer.prebuilt"] == "0"
    assert labels["sm12x.patches"] == ",".join(
        p["file"] for p in patch_series.series(PINS["SGLANG_VERSION"])
    )
    assert labels["sm12x.track"] == image.track


def test_entrypoint_healthcheck_user_and_cache_environment(image):
    config = containers.inspect_image(image.tag)["Config"]
    assert config["Entrypoint"] == ["sm12x", "launch"]
    assert config["Healthcheck"]["Test"] == ["CMD", "sm12x", "healthcheck"]
    assert config["User"] == "10001:0"
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["SM12X_TRACK"] == image.track  # sm12x launch's default in this image
    assert env["SM12X_CACHE_DIR"] == "/cache"
    for name in (
        "HF_HOME",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "XDG_CACHE_HOME",
        "FLASHINFER_WORKSPACE_BASE",
    ):
        assert env[name].startswith("/cache"), name


# --- running it ------------------------------------------------------------------------


def test_runs_as_a_non_root_user_in_group_0(image):
    result = containers.run(
        image.tag, "-c", "id -u; id -g; stat -c '%u %g %a' /cache", entrypoint="sh"
    )
    assert result.code == 0, result.explain()
    uid, gid, cache = result.stdout.split("\n")[:3]
    assert uid == "10001" and gid == "0"
    assert cache == "10001 0 2775"


def test_self_test_passes_in_the_image_as_any_uid_in_group_0(image):
    # An arbitrary UID (OpenShift-style) writes its caches through group 0.
    result = containers.run(
        image.tag, "-m", "sm12x.selftest", "--quick", entrypoint="python3", user="4242:0"
    )
    assert result.code == 0, result.explain()
    assert "sm12x dispatch self-test passed" in result.stdout


def test_cache_volume_is_writable_by_the_image_user(image):
    volume = f"sm12x-test-cache-{os.getpid()}"
    containers.docker("volume", "create", volume, check=True)
    try:
        result = containers.run(
            image.tag,
            "-c",
            "touch /cache/triton/probe && stat -c '%u %g %a' /cache",
            entrypoint="sh",
            volumes=[f"{volume}:/cache"],
        )
        assert result.code == 0, result.explain()
        assert result.stdout.strip() == "10001 0 2775"
    finally:
        containers.docker("volume", "rm", "-f", volume)


def dry_run_cases():
    for recipe in load_all():
        ranks = range(recipe.hardware.nodes) if recipe.is_multinode else [0]
        for rank in ranks:
            name = f"{recipe.name}.node{rank}" if recipe.is_multinode else recipe.name
            yield pytest.param(recipe, rank, golden.GOLDEN_DIR / f"{name}.sh", id=name)


def dry_run_environ(recipe, rank: int) -> dict[str, str]:
    """What compose's service gives the container (tools/golden.py's context)."""
    ctx = golden.context(recipe, rank)
    environ = {
        "SM12X_RECIPE": recipe.name,
        "SM12X_MODEL_DIR": ctx.model_path,
        "SM12X_HOST": ctx.host,
        "SM12X_API_KEY": "a-key",
        "SM12X_CACHE_DIR": ctx.cache_dir,
        **ctx.host_env,
    }
    if ctx.node_rank is not None:
        environ.update(SM12X_NODE_RANK=str(ctx.node_rank), SM12X_HEAD_ADDR=ctx.head_addr)
    return environ


DRY_RUNS = ROOT / "tests" / "support" / "dry_runs.py"
_DRY_RUNS: dict[str, dict[str, containers.Run]] = {}


def dry_runs(image: Built) -> dict[str, containers.Run]:
    """Every recipe's `--dry-run` in the image, by case id: one container for all
    of them (tests/support/dry_runs.py: the launcher's imports once, a forked
    child per environment), made once per image in this worker.
    test_a_dry_run_by_docker_run_is_the_batched_one holds it to real runs."""
    if image.tag not in _DRY_RUNS:
        cases = list(dry_run_cases())
        environs = [dry_run_environ(*case.values[:2]) for case in cases]
        result = containers.run(
            image.tag,
            "-c",
            DRY_RUNS.read_text(),
            json.dumps(environs),
            entrypoint="python3",
            timeout=900,
        )
        assert result.code == 0, result.explain()
        answers = json.loads(result.stdout.splitlines()[-1])
        assert len(answers) == len(cases), result.explain()
        _DRY_RUNS[image.tag] = {
            case.id: containers.Run(a["code"], a["stdout"], a["stderr"])
            for case, a in zip(cases, answers, strict=True)
        }
    return _DRY_RUNS[image.tag]


@pytest.mark.parametrize("recipe, rank, path", list(dry_run_cases()))
def test_launch_dry_run_in_the_image_is_the_golden_command(image, recipe, rank, path):
    name = f"{recipe.name}.node{rank}" if recipe.is_multinode else recipe.name
    result = dry_runs(image)[name]
    if image.track not in recipe_tracks(recipe):
        # A recipe for another track's sglang: the image's launcher refuses it
        # and names the track to use, before printing any command.
        assert result.code != 0, result.explain()
        assert f"SM12X_TRACK={recipe_tracks(recipe)[0]}" in result.stderr, result.explain()
        assert " sglang.launch_server" not in result.stdout
        return
    assert result.code == 0, result.explain()
    lines = result.stdout.splitlines()
    # The launcher execs sys.executable: sglang's own Python in the image.
    # With a key: `python -m sm12x.keyed sglang.launch_server` (the key stays off argv).
    launch = next(i for i, line in enumerate(lines) if " sglang.launch_server" in line)
    python = lines[launch].split(" ", 1)[0]
    assert python.startswith("/") and Path(python).name.startswith("python3"), python
    lines[launch] = "python3" + lines[launch][len(python) :]
    expected = path.read_text().split("\n", 2)[2]  # without the two header lines
    assert "\n".join(lines) + "\n" == expected


def test_a_dry_run_by_docker_run_is_the_batched_one(image):
    """The image's entrypoint, run as compose runs it (`docker run -e ...`), prints
    and exits exactly as the batch's child for the same environment: a node of
    the multi-node recipe (its rank and head address) and either a recipe the
    track refuses or, where it refuses none, a throughput recipe."""
    cases = list(dry_run_cases())
    own = [c for c in cases if image.track in recipe_tracks(c.values[0])]
    other = [c for c in cases if image.track not in recipe_tracks(c.values[0])]
    fast = [c for c in own if c.values[0].name.endswith("-throughput")]
    picks = [next(c for c in own if c.values[1] == 1), (other or fast)[0]]
    batched = dry_runs(image)
    for case in picks:
        real = containers.run(image.tag, "--dry-run", environ=dry_run_environ(*case.values[:2]))
        assert (real.code, real.stdout, real.stderr) == (
            batched[case.id].code,
            batched[case.id].stdout,
            batched[case.id].stderr,
        ), case.id + "\n" + real.explain() + "\n" + batched[case.id].explain()


def test_router_runs_from_the_same_image(image):
    result = containers.run(
        image.tag, "-m", "sglang_router.launch_router", "--help", entrypoint="python3"
    )
    assert result.code == 0, result.explain()
    assert "--worker-urls" in result.stdout


def test_patched_files_are_byte_identical_to_apply_patches_on_the_wheel(image, tmp_path):
    site = trees.unpack_sglang(image.pins["SGLANG_VERSION"], tmp_path / "site", full=False)
    applied = trees.apply_patches(site)
    assert applied.returncode == 0, applied.stderr
    record = json.loads((site / "sglang" / ".sm12x-patches.json").read_text())
    targets = sorted({p["target"] for p in record["patches"]} | {TARGET})

    where = python_in(
        image.tag,
        "import importlib.util as u, pathlib; "
        "print(pathlib.Path(u.find_spec('sglang').origin).parent.parent)",
    ).strip()
    inside = containers.run(
        image.tag,
        "-c",
        " ".join(f"sha256sum {where}/{t};" for t in targets)
        + f" cat {where}/sglang/.sm12x-patches.json",
        entrypoint="sh",
    )
    assert inside.code == 0, inside.explain()
    lines = inside.stdout.split("\n")
    for target, line in zip(targets, lines):
        assert line.split(" ", 1)[0] == hashlib.sha256((site / target).read_bytes()).hexdigest(), (
            f"the image's {target} differs from scripts/apply-patches on the same wheel"
        )
    assert json.loads("\n".join(lines[len(targets) :])) == record
    check = containers.run(
        image.tag, "/opt/sm12x/scripts/apply-patches", "--check", entrypoint="python3"
    )
    assert check.code == 0, check.explain()
    if record["patches"]:
        assert "already applied" in check.stdout, check.explain()
    if image.verdict == "unpatched":  # the dispatch file is sglang's own
        assert "def _sm12x_route(" not in (site / TARGET).read_text()
        assert "retired for it:" in check.stdout, check.explain()


# Where the interpreter would load each patched module from, found the way the
# import system finds it (the top-level package, then each level's search path)
# without running any package's __init__: sglang's imports torchvision, which the
# stand-in does not have, and an import is not what is being checked.
IMPORTED = """
import importlib.machinery as m, importlib.util as u, json, sys
targets = json.loads(sys.argv[1])
out = {}
for target in targets:
    top, *rest = target[:-3].split("/")
    spec = u.find_spec(top)
    for part in rest:
        spec = m.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    out[target] = {"origin": spec.origin, "cached": spec.cached}
print(json.dumps(out))
"""


def test_the_patched_files_are_the_ones_the_interpreter_imports(image):
    """The runtime user's python3 finds each patched module in the checkout the
    patches went into, with bytecode compiled at build time and still fresh: the
    checkout is root's, so it could neither recompile nor be shadowed."""
    record = json.loads(
        python_in(
            image.tag,
            (
                "import importlib.util as u, pathlib; print((pathlib.Path(u.find_spec('sglang').origin)"
                ".parent / '.sm12x-patches.json').read_text())"
            ),
        )
    )
    # The Python modules among the patched files (a .cuh is compiled at run
    # time, from where the byte-identical test above proves it is).
    targets = sorted({p["target"] for p in record["patches"]} | {TARGET})
    targets = [t for t in targets if t.endswith(".py")]
    assert TARGET in targets
    result = containers.run(
        image.tag, "-c", IMPORTED, json.dumps(targets), entrypoint="python3", user="10001:0"
    )
    assert result.code == 0, result.explain()
    found = json.loads(result.stdout)
    for target in targets:
        assert found[target]["origin"] == f"{CHECKOUT}/{target}", found[target]
    # One sglang in the image: nothing else on sys.path could be imported instead.
    # A package's own subpackage named sglang (smg_grpc_servicer.sglang, from the
    # router's dependencies) cannot shadow it: only top-level ones count.
    copies = containers.run(
        image.tag,
        "-c",
        "find / -xdev -path '*/sglang/__init__.py' -not -path '/proc/*' 2>/dev/null |"
        ' while read -r p; do d=$(dirname "$(dirname "$p")");'
        ' [ -e "$d/__init__.py" ] || echo "$p"; done',
        entrypoint="sh",
    )
    assert copies.stdout.split() == [f"{CHECKOUT}/sglang/__init__.py"], copies.explain()
    fresh = containers.run(
        image.tag,
        "/opt/sm12x/scripts/image-build",
        "compile-bytecode",
        "--check-only",
        entrypoint="python3",
        user="10001:0",
    )
    assert fresh.code == 0, fresh.explain()
    assert "compiled and fresh" in fresh.stdout
    for target in targets:
        assert found[target]["cached"].startswith(f"{CHECKOUT}/"), found[target]


def test_the_router_replaced_the_base_s_own_and_says_so(image, bases):
    base_router = python_in(
        bases(image.track), "import importlib.metadata as m; print(m.version('sglang-router'))"
    ).strip()
    said = python_in(image.tag, "print(open('/opt/sm12x/build/router.txt').read())")
    pinned = image.pins["SGLANG_ROUTER_VERSION"]
    assert f"the base's own {base_router} replaced by PyPI's {pinned}" in said
    labels = containers.inspect_image(image.tag)["Config"]["Labels"]
    assert labels["sm12x.sglang-router.version"] == pinned
    assert labels["sm12x.sglang-router.source"].startswith("pypi")


def test_what_the_base_prebaked_under_root_is_the_runtime_user_s(image):
    result = containers.run(
        image.tag,
        "-c",
        f"cat /cache/{standin.PREBAKED}; touch /cache/{standin.PREBAKED}",
        entrypoint="sh",
        user="10001:0",
    )
    assert result.code == 0, result.explain()
    assert "prebaked by the stand-in base" in result.stdout


def test_stale_bytecode_is_caught_by_the_build_s_check(image):
    # A file changed after the build compiled it (what a late edit would do).
    result = containers.run(
        image.tag,
        "-c",
        f"touch -d 2001-01-01 {CHECKOUT}/{TARGET} && "
        "python3 /opt/sm12x/scripts/image-build compile-bytecode --check-only",
        entrypoint="sh",
        user="0:0",
    )
    assert result.code == 1
    assert "of sglang's modules have no fresh bytecode" in result.stderr, result.explain()
    assert TARGET in result.stderr


def test_a_cache_the_runtime_user_cannot_write_is_caught(image):
    result = containers.run(
        image.tag,
        "-c",
        "chmod 0555 /cache/triton && python3 "
        "/opt/sm12x/scripts/image-build runtime-caches --uid 10001",
        entrypoint="sh",
        user="0:0",
    )
    assert result.code == 1
    assert (
        "the runtime user (uid 10001, gid 0) cannot write TRITON_CACHE_DIR=/cache/triton "
        "(Permission denied)"
    ) in result.stderr, result.explain()


STUB = Path(__file__).resolve().parents[1] / "support" / "stub_openai.py"
# The image's HEALTHCHECK command with test-sized timings (failures inside the
# start period do not count, so it is short).
FAST_HEALTH = [
    "--health-interval=1s",
    "--health-timeout=10s",
    "--health-retries=3",
    "--health-start-period=2s",
    "-v",
    f"{STUB}:/stub/stub_openai.py:ro",
]


def test_healthcheck_goes_healthy_when_a_token_comes_back(image):
    with containers.serving(
        image.tag, "/stub/stub_openai.py", entrypoint="python3", extra=FAST_HEALTH, until="healthy"
    ) as name:
        assert containers.state(name) == ("running", "healthy")


def test_healthcheck_goes_unhealthy_when_generation_is_broken(image):
    with containers.serving(
        image.tag,
        "/stub/stub_openai.py",
        "--no-tokens",
        entrypoint="python3",
        extra=FAST_HEALTH,
        until="unhealthy",
    ) as name:
        log = containers.docker("inspect", "--format", "{{json .State.Health.Log}}", name)
        assert "generated no token" in log.stdout


def test_a_container_that_dies_fails_at_once_with_its_logs(image):
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="exited before it was healthy"):
        with containers.serving(
            image.tag, "-c", "echo dying; exit 3", entrypoint="sh", timeout=120
        ):
            pass
    assert time.monotonic() - started < 60


# --- builds that must fail, with their reason --------------------------------------------


def test_another_track_s_base_fails_the_build(base):
    """The current track's build on the pinned track's base: refused at the base stage."""
    other = next(t for t in tracks() if t != default_track())
    proc = build("sm12x-test:wrong-sglang", other, BASE_IMAGE=base, FLASHINFER_PREBUILT="0")
    assert proc.returncode != 0
    assert (
        f"the base has sglang {PINS['SGLANG_VERSION']}, versions.env pins "
        f"SGLANG_VERSION={load_versions(other)['SGLANG_VERSION']}"
    ) in proc.stderr


def test_a_patch_that_does_not_apply_fails_the_build(base, tmp_path):
    # The base's flash_mla_sm120.py edited by hand: the patch must refuse it.
    broken = "sm12x-test:edited-base"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base}\n"
        'RUN python3 -c "import importlib.util as u, pathlib; '
        "p = pathlib.Path(u.find_spec('sglang').origin).parent / "
        "'kernels/ops/attention/flash_mla_sm120.py'; "
        "p.write_text(p.read_text().replace('import math', 'import math  # edited', 1))\"\n"
    )
    made = containers.build(tmp_path, broken, {}, network="none")
    assert made.returncode == 0, containers.tail(made.stderr)
    try:
        proc = build("sm12x-test:edited", BASE_IMAGE=broken, FLASHINFER_PREBUILT="0")
        assert proc.returncode != 0
        assert (
            f"sglang {PINS['SGLANG_VERSION']}: 0001-sm120-sparse-mla-topk-dispatch.patch "
            "does not apply" in proc.stderr
        ), containers.tail(proc.stderr)
    finally:
        containers.docker("rmi", "-f", broken)


def test_a_failing_self_test_fails_the_build(images, base):
    images(default_track())  # the build whose layers it reuses, first if this test runs alone
    # flashinfer 0.7 moved its sm_120 sparse-MLA dispatch to a runtime envelope:
    # the dispatch patch still applies to sglang 0.5.17, but it cannot read that
    # flashinfer's tables, and the self-test will not vouch for a patch that is off.
    proc = build(
        "sm12x-test:flashinfer-0.7",
        BASE_IMAGE=base,
        FLASHINFER_PREBUILT="0",
        FLASHINFER_VERSION="0.7.2",
        FLASHINFER_CUBIN_VERSION="0.7.2",
        FLASHINFER_JIT_CACHE_VERSION="0.7.2",
    )
    assert proc.returncode != 0
    failed = [line for line in proc.stderr.splitlines() if "executor failed running" in line]
    assert failed and "sm12x.selftest" in failed[-1], containers.tail(proc.stderr)
    # The reason, in one line.
    assert (
        "sm12x dispatch self-test FAILED: the dispatch patch's prefill mirror: the patch "
        "found no usable flashinfer tables"
    ) in proc.stderr, containers.tail(proc.stderr)
    # It reused what it shares with the default track's build (same base, same
    # checkout), and the changed pin rebuilt flashinfer's step: the cache keys
    # hold FLASHINFER_VERSION (a cache that hid the change would have passed
    # the self-test on the pinned flashinfer).
    for fragment in SHARED_STEPS:
        assert step(proc, fragment).cached, fragment
    assert not step(proc, FLASHINFER_PYTHON).cached
    assert "flashinfer-python==0.7.2" in proc.stderr


# --- the prebuilt path, against a local stand-in for flashinfer's index ----------------------


def build_prebuilt(
    tag: str, base: str, tmp_path: Path, name: str, machine: str | None = None, **index
) -> subprocess.CompletedProcess[str]:
    """FLASHINFER_PREBUILT=1 against a stand-in index served under its own URL path
    (BuildKit keys a step by its arguments: another test's URL would hit that
    build's cached result)."""
    version, cuda = PINS["FLASHINFER_VERSION"], "cu" + PINS["CUDA_VERSION"].replace(".", "")
    flashinfer_index.build_index(
        tmp_path / "index" / name, version, cuda, machine or platform.machine(), **index
    )
    with flashinfer_index.serving(tmp_path / "index") as url:
        return build(
            tag,
            BASE_IMAGE=base,
            FLASHINFER_PREBUILT="1",
            FLASHINFER_CUBIN_INDEX_URL=f"{url}/{name}",
            FLASHINFER_JIT_CACHE_INDEX_URL=f"{url}/{name}/{cuda}",
        )


def test_prebuilt_flashinfer_path_installs_all_three_at_one_version(images, base, tmp_path):
    """FLASHINFER_PREBUILT=1, as the real image is built: cubin and jit-cache come
    from their own index (here tests/support/flashinfer_index.py on 127.0.0.1:
    the real wheel names, versions and layout, no kernels), the jit-cache as
    <version>+cu130 for this machine's arch. flashinfer's own import-time check
    (cubin and jit-cache must be its version) runs in the self-test."""
    images(default_track())  # the build whose layers it reuses, first if this test runs alone
    version, cuda = PINS["FLASHINFER_VERSION"], "cu" + PINS["CUDA_VERSION"].replace(".", "")
    flashinfer_index.build_index(tmp_path / "index", version, cuda, platform.machine())
    tag = "sm12x-test:prebuilt"
    with flashinfer_index.serving(tmp_path / "index") as url:
        proc = build(
            tag,
            BASE_IMAGE=base,
            FLASHINFER_PREBUILT="1",
            FLASHINFER_CUBIN_INDEX_URL=url,
            FLASHINFER_JIT_CACHE_INDEX_URL=f"{url}/{cuda}",
        )
    try:
        assert proc.returncode == 0, containers.tail(proc.stderr, 80)
        # Only the kernels are this build's own: flashinfer-python's layer is the
        # default track's image build's (same base, same FLASHINFER_VERSION),
        # and the kernels' step, whose arguments changed, ran.
        for fragment in (*SHARED_STEPS, FLASHINFER_PYTHON):
            assert step(proc, fragment).cached, fragment
        assert not step(proc, FLASHINFER_KERNELS).cached
        labels = containers.inspect_image(tag)["Config"]["Labels"]
        assert labels["sm12x.flashinfer.prebuilt"] == "1"
        found = json.loads(
            python_in(
                tag,
                (
                    "import importlib.metadata as m, json, os, flashinfer.jit.env as e\n"
                    "print(json.dumps({'cubin': m.version('flashinfer-cubin'),"
                    " 'jit': m.version('flashinfer-jit-cache'), 'cubin_dir': str(e.FLASHINFER_CUBIN_DIR),"
                    " 'aot_dir': str(e.FLASHINFER_AOT_DIR),"
                    " 'cubins_writable': os.access(e.FLASHINFER_CUBIN_DIR, os.W_OK)}))"
                ),
            )
        )
        assert found["cubin"] == version and found["jit"] == f"{version}+{cuda}"
        assert found["cubin_dir"].endswith("flashinfer_cubin/cubins")
        assert found["aot_dir"].endswith("flashinfer_jit_cache/jit_cache")
        # flashinfer downloads missing cubins there at run time, as the image user.
        assert found["cubins_writable"]
        # The kernel check found the jit-cache's library and its sm_12x code.
        check = containers.run(
            tag,
            "/opt/sm12x/scripts/image-build",
            "check-kernels",
            "--targetarch",
            "arm64",
            entrypoint="python3",
        )
        assert check.code == 0, check.explain()
        assert "sparse_mla_sm120.so: sm_121a runs on sm_121" in check.stdout
        # The same library built without sm_121 code: an arm64 image (DGX Spark) refuses it.
        lacking = containers.run(
            tag,
            "-c",
            (
                "so=$(python3 -c 'import flashinfer_jit_cache as j, os; print(os.path.join("
                'j.get_jit_cache_dir(), "sparse_mla_sm120/sparse_mla_sm120.so"))\') && '
                "printf 'SM12X-FAKE-DEVICE-CODE elf=sm_90a,sm_120a ptx=\\n' > \"$so\" && "
                "python3 /opt/sm12x/scripts/image-build check-kernels --targetarch arm64"
            ),
            entrypoint="sh",
            user="0:0",
        )
        assert lacking.code == 1, lacking.explain()
        assert (
            "kernel libraries without sm_121 code (aarch64 images run on sm_121 GPUs"
            in lacking.stderr
        ), lacking.explain()
        assert (
            f"flashinfer-jit-cache {version}+{cuda}: sparse_mla_sm120.so has sm_90a, "
            "sm_120a, nothing that runs on sm_121"
        ) in lacking.stderr
    finally:
        containers.docker("rmi", "-f", tag)


def test_a_kernel_library_without_the_gpu_s_code_fails_the_build(base, tmp_path):
    """A jit-cache whose sparse_mla_sm120 was compiled for other GPUs only: the image
    (amd64: RTX PRO 6000 / RTX 5090, sm_120) would fail at the first call."""
    version, cuda = PINS["FLASHINFER_VERSION"], "cu" + PINS["CUDA_VERSION"].replace(".", "")
    proc = build_prebuilt(
        "sm12x-test:no-sm120", base, tmp_path, "no-sm120", code="elf=sm_90a,sm_100a ptx="
    )
    assert proc.returncode != 0
    assert (
        "image-build: error: kernel libraries without sm_120 code (x86_64 images run on "
        "sm_120 GPUs; the first call would fail with 'no kernel image is available'): "
        f"flashinfer-jit-cache {version}+{cuda}: sparse_mla_sm120.so has sm_90a, sm_100a, "
        "nothing that runs on sm_120"
    ) in proc.stderr, containers.tail(proc.stderr)


PROVIDER = "flashinfer-jit-cache-sm120f"  # a name for the stand-in; the build reads the shim's


@pytest.mark.parametrize("served", [True, False], ids=["with-providers", "providers-missing"])
def test_a_jit_cache_shim_gets_its_providers_or_the_build_stops(base, tmp_path, served):
    """flashinfer 0.7's layout: the jit-cache wheel is a shim naming per-arch provider
    wheels. The build installs exactly what the shim names, from the same index; a
    provider the index lacks stops it, naming the provider."""
    version, cuda = PINS["FLASHINFER_VERSION"], "cu" + PINS["CUDA_VERSION"].replace(".", "")
    name = "split" if served else "split-missing"
    tag = f"sm12x-test:{name}"
    proc = build_prebuilt(tag, base, tmp_path, name, providers=(PROVIDER,), serve_providers=served)
    try:
        if not served:
            assert proc.returncode != 0
            assert (
                "image-build: error: pip install failed (see pip's output above): "
                f"{PROVIDER}=={version}+{cuda}"
            ) in proc.stderr, containers.tail(proc.stderr)
            return
        assert proc.returncode == 0, containers.tail(proc.stderr, 80)
        found = python_in(tag, f"import importlib.metadata as m; print(m.version({PROVIDER!r}))")
        assert found.strip() == f"{version}+{cuda}"
        check = containers.run(
            tag,
            "/opt/sm12x/scripts/image-build",
            "check-kernels",
            "--targetarch",
            "amd64",
            entrypoint="python3",
        )
        assert check.code == 0, check.explain()
        # The line names the library by its folder too (check-kernels, issue 46).
        assert re.search(
            rf"kernels: {re.escape(PROVIDER)}: (\S+/)?sparse_mla_sm120\.so: sm_120a runs on sm_120",
            check.stdout,
        ), check.explain()
    finally:
        containers.docker("rmi", "-f", tag)


def test_a_jit_cache_for_another_arch_fails_the_build(base, tmp_path):
    version, cuda = PINS["FLASHINFER_VERSION"], "cu" + PINS["CUDA_VERSION"].replace(".", "")
    other = "aarch64" if platform.machine() == "x86_64" else "x86_64"
    proc = build_prebuilt("sm12x-test:wrong-arch", base, tmp_path, "other-arch", machine=other)
    assert proc.returncode != 0
    # pip finds no wheel for this arch; the build stops naming the requirement.
    assert (
        f"No matching distribution found for flashinfer-jit-cache=={version}+{cuda}" in proc.stderr
    ), containers.tail(proc.stderr)
    assert (
        f"image-build: error: pip install failed (see pip's output above): "
        f"flashinfer-jit-cache=={version}+{cuda}"
    ) in proc.stderr
