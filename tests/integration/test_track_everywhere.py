"""A recipe's track follows it down every path: none is refused by its own image.

Issue 29: the throughput recipes and V4.1 run only on the current track while
compose, `render --k8s` and deploy/k8s/ ran them on the pinned image, whose
launcher then refused them (five of nine manifests would crash-loop). Here each
recipe goes through every path a user deploys it by (`sm12x render`, `sm12x
launch --dry-run`, its compose profiles as the real Compose binary renders them,
its Kubernetes manifest), the image each path runs is mapped back to its track,
and the launcher is run as that image runs it: it must not refuse the recipe.
And where a user names a track that cannot run a recipe, render, launch, tune
and bench say so once, first, as the error, with the one setting that fixes it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from sm12x.deploy import k8s
from sm12x.deploy.compose import profiles
from sm12x.recipe import load_all
from sm12x.recipe.tracks import recipe_tracks
from sm12x.versions import load_versions, tracks
from tests.support.cli import assert_one_clear_error, fresh_imports, run_sm12x
from tests.support.compose import ROOT, config

RECIPES = load_all()
# The image a path runs -> the track whose sglang it carries (versions.env).
IMAGE_TRACK = {load_versions(t)["SM12X_IMAGE"]: t for t in tracks()}
CURRENT_ONLY = [r for r in RECIPES if "pinned" not in recipe_tracks(r)]


@pytest.fixture(scope="module")
def env_file(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("env")
    (tmp / "model").mkdir()
    (tmp / "model" / "config.json").write_text("{}")
    text = (ROOT / ".env.example").read_text()
    text = re.sub(r"(?m)^SM12X_MODEL_DIR=.*$", f"SM12X_MODEL_DIR={tmp / 'model'}", text)
    path = tmp / ".env"
    path.write_text(text)
    return path


def test_some_recipes_run_only_on_the_current_track():
    # Else this file proves nothing about the mismatch it is here for.
    assert {r.name for r in CURRENT_ONLY} >= {"rtx-pro-6000-tp4-throughput", "rtx-pro-6000-tp8-v41"}


def launch_as(image_track: str, recipe: str, tmp_path: Path, **env: str):
    """`sm12x launch --dry-run` as the image of `image_track` runs it: its
    Dockerfile sets SM12X_TRACK, its sglang is the track's (judged by that
    sglang's own parser description)."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text("{}")
    base = {
        "SM12X_TRACK": image_track,
        "SM12X_RECIPE": recipe,
        "SM12X_MODEL_DIR": str(tmp_path / "model"),
        "SM12X_CACHE_DIR": str(tmp_path / "cache"),
    }
    return run_sm12x("launch", "--dry-run", env={**base, **env})


def assert_not_refused(result, recipe: str, where: str) -> None:
    # (A baseline's notice may say its throughput sibling runs elsewhere.)
    assert result.returncode == 0, f"{where}: {result.stderr}"
    assert f"{recipe} runs only on" not in result.stderr, f"{where}: {result.stderr}"
    assert "unrecognized arguments" not in result.stderr, f"{where}: {result.stderr}"
    assert "sglang" in result.stdout, where


def with_its_table(recipe, cache: Path) -> dict[str, str]:
    """A cache folder holding the tuned SPS table a throughput recipe reads (render
    refuses one without it, as the launch does), keyed as this machine's launch
    looks it up."""
    from sm12x import __version__
    from sm12x.launch import choice as launch_choice
    from sm12x.launch.configuration import reads_tuned_table
    from sm12x.recipe.tracks import home_track
    from sm12x.sps import tables as store

    if reads_tuned_table(recipe):
        track = home_track(recipe)
        # As a fresh process sees it (the launch is one): a module before this
        # one in the worker (test_tune's wheel trees) must not change the key.
        with fresh_imports(ROOT):
            installed = launch_choice.installed_sglang()
        sglang = installed or load_versions(track)["SGLANG_VERSION"]
        key = store.key_for(
            recipe, track=track, sglang=sglang, sm12x=__version__, gpu=launch_choice.gpu_name()
        )
        # The additive table `sm12x tune` makes (sglang's dspark_sps.py reads it).
        additive = {"bias_seconds": 0.012, "bs_probes": [1, 8], "alpha_seconds": [0.0, 0.001],
                    "m_probes": [8, 64], "theta_seconds": [0.0, 0.004]}  # fmt: skip
        store.write(cache, key, json.dumps(additive))
    return {"SM12X_CACHE_DIR": str(cache)}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_render_renders_for_the_recipe_s_own_track(recipe, tmp_path):
    result = run_sm12x("render", recipe.name, env=with_its_table(recipe, tmp_path / "cache"))
    assert result.returncode == 0, result.stderr
    assert f"{recipe.name} runs only on" not in result.stderr, result.stderr
    (track,) = re.findall(r"\(the (\w+) track, versions.env\)", result.stdout)
    assert track in recipe_tracks(recipe), track


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_launch_dry_run_follows_the_recipe_s_track(recipe, tmp_path):
    # No SM12X_TRACK at all: the recipe's own track.
    result = run_sm12x(
        "launch",
        "--dry-run",
        env={"SM12X_RECIPE": recipe.name, "SM12X_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.returncode == 0, result.stderr
    assert f"{recipe.name} runs only on" not in result.stderr, result.stderr


@pytest.mark.parametrize("track", [None, *tracks()])
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_each_compose_profile_runs_an_image_that_runs_its_recipe(recipe, track, env_file, tmp_path):
    custom = env_file
    if track is not None:
        custom = tmp_path / ".env"
        custom.write_text(env_file.read_text().replace("SM12X_TRACK=\n", f"SM12X_TRACK={track}\n"))
    for profile in profiles(recipe):
        service = config(profile, env_file=custom)["services"][profile]
        image_track = IMAGE_TRACK[service["image"]]
        assert image_track in recipe_tracks(recipe), (profile, service["image"])
        # What the launcher inside is told matches the image it runs in.
        assert service["environment"]["SM12X_TRACK"] == image_track, profile
        env = {k: v for k, v in service["environment"].items() if v}
        env.pop("SM12X_MODEL_DIR")
        result = launch_as(image_track, recipe.name, tmp_path, **env)
        assert_not_refused(result, recipe.name, profile)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_each_manifest_runs_an_image_that_runs_its_recipe(recipe, tmp_path):
    text = k8s.render(recipe.name, k8s.K8sOptions())
    images = {
        c["image"]
        for doc in yaml.safe_load_all(text)
        for c in _containers(doc)
        if c["name"] == "sglang"
    }
    (image,) = images
    image_track = IMAGE_TRACK[image]
    assert image_track in recipe_tracks(recipe), image
    # deploy/k8s/ holds exactly this (the regen registry checks it byte for byte).
    assert (ROOT / "deploy" / "k8s" / f"{recipe.name}.yaml").read_text() == text
    assert_not_refused(launch_as(image_track, recipe.name, tmp_path), recipe.name, "k8s")


def _containers(doc: dict) -> list[dict]:
    found = []
    if doc.get("kind") == "Deployment":
        found += doc["spec"]["template"]["spec"]["containers"]
    if doc.get("kind") == "LeaderWorkerSet":
        tmpl = doc["spec"]["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in tmpl:
                found += tmpl[key]["spec"]["containers"]
    return found


# --- a named track that cannot run the recipe: one error, first, with the fix -------


@pytest.mark.parametrize("recipe", CURRENT_ONLY, ids=lambda r: r.name)
def test_render_k8s_refuses_a_track_that_cannot_run_it(recipe):
    result = run_sm12x("render", "--k8s", recipe.name, "--track", "pinned")
    assert_one_clear_error(result, "runs only on the current track", "set SM12X_TRACK=current")
    assert result.stdout == ""
    image = run_sm12x(
        "render", "--k8s", recipe.name, env={"SM12X_IMAGE": "registry.local/sm12x:dev"}
    )
    # An image named alone is SM12X_TRACK's (the default): said, not written to crash-loop.
    assert_one_clear_error(image, "set SM12X_TRACK=current")


@pytest.mark.parametrize(
    "argv",
    [
        ("render", "{recipe}"),
        ("launch", "--dry-run", "--recipe", "{recipe}"),
        ("launch", "--recipe", "{recipe}"),
        ("tune", "--recipe", "{recipe}"),
        ("tune", "--recipe", "{recipe}", "--url", "http://127.0.0.1:9"),
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("recipe", CURRENT_ONLY, ids=lambda r: r.name)
def test_a_track_refusal_is_said_once_first_with_its_fix(argv, recipe, tmp_path):
    if argv[0] == "tune" and recipe.dspark.sps_table != "tuned":
        pytest.skip("tune has nothing to profile for it (it says so, whatever the track)")
    argv = [a.replace("{recipe}", recipe.name) for a in argv]
    result = run_sm12x(*argv, env={"SM12X_TRACK": "pinned"})
    line = assert_one_clear_error(
        result, f"{recipe.name} runs only on the current track", "set SM12X_TRACK=current"
    )
    assert line.startswith(f"sm12x {argv[0]}: error: "), line
    # Once: no warning before it saying the same, nothing judged after it.
    assert result.stderr.count("runs only on") == 1, result.stderr
    assert result.stderr.count("SM12X_TRACK=current") == 1, result.stderr
    for later in ("unrecognized arguments", "SM12X_CACHE_DIR", "nvidia-smi"):
        assert later not in result.stderr, result.stderr


def test_bench_boot_refuses_a_configuration_its_track_cannot_run():
    result = run_sm12x(
        "bench",
        "--compare-configurations",
        "--boot",
        "--recipe",
        "rtx-pro-6000-tp4",
        env={"SM12X_TRACK": "pinned"},
    )
    assert_one_clear_error(
        result,
        "--boot throughput: rtx-pro-6000-tp4-throughput runs only on the current track",
        "set SM12X_TRACK=current",
    )
    assert result.stderr.count("runs only on") == 1, result.stderr
