"""The launch plan (sm12x.launch.plan), called directly: built once, parsed once,
every value bounded per flag from sglang's parser (sm12x.launch.bounds); and
the deployment plan compose.yaml and `render --k8s` are written from, parsed
once per recipe whatever asks for it."""

from __future__ import annotations

import os

import pytest

from sm12x import __version__, cli
from sm12x.deploy import compose_yaml, env_example, k8s
from sm12x.errors import UserError
from sm12x.launch import choice, configuration
from sm12x.launch import plan as launch_plan
from sm12x.patches import series as patch_series
from sm12x.recipe import load_all
from sm12x.recipe.extra import MAX_VALUE_CHARS
from sm12x.recipe.tracks import home_track, recipe_tracks, track_refusal
from sm12x.settings import load
from sm12x.sglang_parser import JudgeParser
from sm12x.sps import tables as store
from sm12x.versions import default_track, load_versions, tracks

ADDITIVE_TABLE = (
    '{"bias_seconds": 0.012, "bs_probes": [1, 8], "alpha_seconds": [0.0, 0.001], '
    '"m_probes": [8, 64], "theta_seconds": [0.0, 0.004]}'
)
RECIPES = load_all()
CASES = [(r, t) for r in RECIPES for t in recipe_tracks(r)]


def _no_gpus(*_):
    raise choice.gpus.GpuQueryError("no nvidia-smi in tests")


@pytest.fixture
def parses(monkeypatch):
    """How many times sglang's parser parsed (JudgeParser.parse_known_args: the one
    entry point; parse_args goes through it)."""
    calls: list[list[str]] = []
    real = JudgeParser.parse_known_args

    def counted(self, args=None, namespace=None):
        calls.append(list(args or []))
        return real(self, args, namespace)

    monkeypatch.setattr(JudgeParser, "parse_known_args", counted)
    monkeypatch.setattr(choice.gpus, "query_gpus", _no_gpus)
    monkeypatch.setattr(choice, "installed_sglang", lambda: None)
    # No deployment plan another test built in this process.
    monkeypatch.setattr(launch_plan, "_DEPLOYMENTS", {})
    return calls


def _environ(recipe, track: str, cache: str) -> dict[str, str]:
    env = {"SM12X_RECIPE": recipe.name, "SM12X_TRACK": track, "SM12X_CACHE_DIR": cache}
    env |= {n: v.example for n, v in recipe.env.items() if v.from_host and v.example}
    if recipe.is_multinode:
        env |= {"SM12X_NODE_RANK": "0", "SM12X_HEAD_ADDR": "10.0.0.1"}
    return {**env, "SM12X_ENV_FILE": os.devnull, "PATH": "/usr/bin:/bin"}


def _plan(environ: dict[str, str], command: str, *extra: str):
    loaded = load(environ=environ)
    return launch_plan.plan(
        loaded,
        command=command,
        say=lambda _: None,
        dry_run=command == "launch",
        extra=extra,
        environ=environ,
    )


@pytest.mark.parametrize(("recipe", "track"), CASES, ids=[f"{r.name}-{t}" for r, t in CASES])
def test_one_parse_per_render_and_per_dry_run(parses, recipe, track, tmp_path):
    environ = _environ(recipe, track, str(tmp_path))
    if configuration.reads_tuned_table(recipe):
        # A tuned table for this machine (no nvidia-smi: keyed without a GPU name),
        # so that render, which refuses without one, renders.
        key = store.key_for(
            recipe,
            track=track,
            sglang=load_versions(track)["SGLANG_VERSION"],
            sm12x=__version__,
            gpu=None,
        )
        store.write(tmp_path, key, ADDITIVE_TABLE)
    for command in ("render", "launch"):
        parses.clear()
        plan = _plan(environ, command)
        assert len(parses) == 1, (command, len(parses))
        assert plan.parsed is not None and plan.judged is not None
        # Every token the recipe rendered is kept with the dest sglang gave it.
        assert [t.name for t in plan.parsed.tokens] == [a.flag for a in plan.args]
    parses.clear()
    _plan(environ, "launch", "--log-level", "debug")
    assert len(parses) == 1  # the flags after -- are parsed with the command, not again


# --- the deployment plan: compose.yaml and `render --k8s` ------------------------


@pytest.mark.parametrize(("recipe", "track"), CASES, ids=[f"{r.name}-{t}" for r, t in CASES])
def test_one_parse_per_k8s_manifest(parses, recipe, track, monkeypatch, capsys):
    """`sm12x render --k8s RECIPE` (the registered command) goes through the plan:
    one parse, and its image, port and site variables are the plan's."""
    monkeypatch.setenv("SM12X_ENV_FILE", os.devnull)
    monkeypatch.setenv("SM12X_TRACK", track)
    monkeypatch.delenv("SM12X_IMAGE", raising=False)
    assert cli.main(["render", "--k8s", recipe.name]) == 0
    assert len(parses) == 1, len(parses)
    text = capsys.readouterr().out
    plan = launch_plan.deployment(recipe, track=track, image=load_versions(track)["SM12X_IMAGE"])
    assert len(parses) == 1  # the manifest's own plan, not built again
    assert plan.track == track and f"image: {plan.image()}" in text
    assert f"containerPort: {plan.port()}" in text and plan.port() == recipe.serve.port
    for name in plan.site_variables():
        assert f"key: {name}" in text, name
    assert plan.site_variables() == tuple(n for n, v in recipe.env.items() if v.from_host)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_one_parse_per_compose_service(parses, recipe):
    text = compose_yaml.render([recipe])
    assert len(parses) == 1, len(parses)
    plan = launch_plan.deployment(recipe)
    assert plan.track == home_track(recipe)
    pinned = f"SM12X_TRACK: {plan.track}" in text
    assert pinned == (plan.track != default_track()), plan.track


def test_compose_env_example_and_k8s_share_one_plan_per_recipe(parses):
    """regen's compose, env-example and k8s entries in one process: one parse per
    recipe in all, not one per generator (nor per manifest and router)."""
    text = compose_yaml.render(RECIPES)
    assert len(parses) == len(RECIPES)
    env_example.render(RECIPES, text)
    k8s.tree(k8s.K8sOptions())
    assert len(parses) == len(RECIPES)


def test_render_k8s_refuses_a_track_in_the_plan_s_one_line(parses, monkeypatch):
    recipe, track = next(
        (r, t) for r in RECIPES for t in tracks() if track_refusal(r, t) is not None
    )
    with pytest.raises(UserError) as caught:
        k8s.render(recipe.name, k8s.K8sOptions(track=track))
    assert caught.value.message == track_refusal(recipe, track)
    assert parses == []  # refused before anything is parsed


def test_the_deployment_cache_recomputes_when_any_key_input_changes(parses, monkeypatch, tmp_path):
    recipe = BASELINES[default_track()]
    first = launch_plan.deployment(recipe)
    assert launch_plan.deployment(recipe) is first and len(parses) == 1
    # The recipe: any field, even a reason, is part of the key.
    flags = dict(recipe.flags)
    name = next(iter(flags))
    changed = recipe.model_copy(
        update={"flags": {**flags, name: flags[name].model_copy(update={"why": "changed"})}}
    )
    assert launch_plan.deployment(changed) is not first and len(parses) == 2
    # The track and the image named.
    other = next(t for t in recipe_tracks(recipe) if t != default_track())
    assert launch_plan.deployment(recipe, track=other).track == other and len(parses) == 3
    image = "registry.example/sm12x:test"
    assert launch_plan.deployment(recipe, image=image).image() == image and len(parses) == 4
    # The sglang this Python has (which parser judges).
    monkeypatch.setattr(choice, "installed_sglang", lambda: "0.0.1")
    launch_plan.deployment(recipe)
    assert len(parses) == 5
    # The patch series the lints read.
    series = tmp_path / "patches.toml"
    series.write_text(patch_series.patches_toml().read_text() + "\n# changed\n")
    monkeypatch.setattr(patch_series, "patches_toml", lambda: series)
    launch_plan.deployment(recipe)
    assert len(parses) == 6
    # versions.env's pins.
    pins = {**launch_plan.read_versions(), "SM12X_VERSION": "0.0.0-test"}
    monkeypatch.setattr(launch_plan, "read_versions", lambda: pins)
    launch_plan.deployment(recipe)
    assert len(parses) == 7
    # Nothing changed: the last one again, not parsed again.
    launch_plan.deployment(recipe)
    assert len(parses) == 7


def _refused(environ: dict[str, str], *extra: str) -> str:
    with pytest.raises(UserError) as caught:
        _plan(environ, "launch", *extra)
    line = caught.value.message
    assert "\n" not in line and len(line) < 600, line
    return line


BASELINES = {t: next(r for r, rt in CASES if rt == t and not r.is_multinode) for t in tracks()}
LONG = "x" * (MAX_VALUE_CHARS + 1)


@pytest.mark.parametrize("track", tracks())
@pytest.mark.parametrize(
    "extra",
    [
        ("--log-level", LONG),
        (f"--log-level={LONG}",),
        ("--log-lev", LONG),  # a prefix sglang's parser expands
        ("--chat-template", "é" * (MAX_VALUE_CHARS + 1)),
    ],
    ids=["space", "equals", "prefix", "other-flag"],
)
def test_free_text_past_the_bound_is_refused_in_one_line(parses, track, extra, tmp_path):
    recipe = BASELINES[track]
    line = _refused(_environ(recipe, track, str(tmp_path)), *extra)
    assert "after --" in line and "MAX_VALUE_CHARS" in line and "4,096" in line, line
    flag = extra[0].split("=")[0]
    assert flag in line, line
    assert LONG not in line


@pytest.mark.parametrize("track", tracks())
def test_free_text_at_the_bound_passes(parses, track, tmp_path):
    recipe = BASELINES[track]
    _plan(_environ(recipe, track, str(tmp_path)), "launch", "--log-level", "x" * MAX_VALUE_CHARS)


@pytest.mark.parametrize("track", tracks())
@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (("--max-queued-requests", "many"), ("--max-queued-requests", "invalid int", "type")),
        (("--max-queued-requests=1.5",), ("--max-queued-requests", "invalid int", "type")),
        (("--max-queued-req", "x"), ("--max-queued-req", "invalid int", "type")),
        (("--max-queued-requests", "9" * 30), ("--max-queued-requests", "64-bit")),
        (("--load-format", "bogus"), ("--load-format", "invalid choice", "one of")),
        (("--load-format=" + "b" * 200,), ("--load-format", "invalid choice", "...")),
        (("--watchdog-tim", "lots"), ("--watchdog-tim", "invalid float")),
    ],
    ids=["int-space", "int-equals", "int-prefix", "int-64bit", "choice", "choice-long", "float"],
)
def test_a_value_of_the_wrong_type_or_choice_is_refused_naming_flag_and_fix(
    parses, track, extra, words, tmp_path
):
    recipe = BASELINES[track]
    line = _refused(_environ(recipe, track, str(tmp_path)), *extra)
    assert "after --" in line, line
    for word in words:
        assert word in line, (word, line)
    assert "b" * 100 not in line
    assert len(parses) <= 1


@pytest.mark.parametrize("track", tracks())
def test_a_recipe_flag_past_its_bound_is_refused_by_the_same_rule(parses, track, tmp_path):
    recipe = BASELINES[track]
    flags = dict(recipe.flags)
    name = next(iter(flags))
    long = recipe.model_copy(
        update={"flags": {**flags, "--log-level": flags[name].model_copy(update={"value": LONG})}}
    )
    plan = launch_plan.build_launch(long, launch_plan.LaunchContext(track=track))
    from sm12x.launch.judge import judge
    from sm12x.sglang_parser import parser_for

    parser, source = parser_for(load_versions(track)["SGLANG_VERSION"], None)
    with pytest.raises(UserError) as caught:
        judge(parser, source, plan, [], {}, {})
    assert "flags.--log-level" in caught.value.message
    assert "MAX_VALUE_CHARS" in caught.value.message
