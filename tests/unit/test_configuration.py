"""SM12X_CONFIGURATION in `sm12x launch` and `render`: which configuration of a rig
runs, the tuned SPS table it reads, and the refusals (missing, stale, wrong track)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from sm12x import __version__, settings
from sm12x.errors import UserError
from sm12x.launch import choice as launch_choice
from sm12x.launch import gpus, render_cmd
from sm12x.launch import main as launch_main
from sm12x.launch import plan as launch_plan
from sm12x.launch.plan import build_launch
from sm12x.launch.render import LaunchContext
from sm12x.recipe import load, load_recipe
from sm12x.sps import tables as store
from sm12x.versions import default_track, load_versions
from tests.support import throughput as tp

PINNED_SGLANG = load_versions(default_track())["SGLANG_VERSION"]
GPUS = gpus.parse_nvidia_smi((tp.NVIDIA_SMI / "rtx-pro-6000-x4.csv").read_text())


@pytest.fixture
def rig(tmp_path, monkeypatch):
    """The shipped recipes plus the throughput fixture, a cache folder, 4 GPUs."""
    folder = tp.recipes_with_it(tmp_path / "recipes")
    monkeypatch.setattr(load, "recipes_dir", lambda: folder)
    monkeypatch.setattr(launch_choice.gpus, "query_gpus", lambda *_: GPUS)
    monkeypatch.setattr(launch_choice, "installed_sglang", lambda: PINNED_SGLANG)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return tmp_path


def launch(rig: Path, monkeypatch, *argv: str, **env: str):
    """`sm12x launch ARGV`'s plan, built directly: (the argv it execs, the environment
    sglang starts with), or the plan itself for a dry run; what it said is on stderr."""
    parser = argparse.ArgumentParser()
    launch_main.add_arguments(parser)
    args = parser.parse_args(list(argv))
    environ = {
        "SM12X_RECIPE": tp.RIG,
        "SM12X_MODEL_DIR": str(rig / "model"),
        "SM12X_CACHE_DIR": str(rig / "cache"),
        **env,
    }
    loaded = settings.from_args(args, "launch", environ=environ)
    dry_run = args.dry_run or args.explain
    plan = launch_plan.plan(
        loaded,
        command="launch",
        say=launch_main._say,
        dry_run=dry_run,
        no_spec=args.no_spec,
        sps_profile=args.sps_profile,
        sps_table=args.sps_table,
        extra=args.extra,
        environ=environ,
    )
    if dry_run:
        return plan
    assert plan.loaded is not None and plan.sglang_env is not None
    argv_ = plan.command(sys.executable, environ=plan.loaded.variables()) + list(plan.extra)
    return argv_, dict(plan.sglang_env)


# sglang's two table kinds as its loader reads them (dspark_sps.py): the additive
# table of the off-diagonal sweep, which `sm12x tune` makes, and the 1-D one.
ADDITIVE_TABLE = (
    '{"bias_seconds": 0.012, "bs_probes": [1, 8], "alpha_seconds": [0.0, 0.001], '
    '"m_probes": [8, 64], "theta_seconds": [0.0, 0.004]}'
)
STATIC_TABLE = '{"sample_batch_tokens": [8], "sample_steps_per_sec": [50.0], "max_batch_tokens": 8}'


def table_for(rig: Path, table: str = ADDITIVE_TABLE, **changes) -> Path:
    """Store a table made for the throughput fixture on this machine, or, with
    changes, for something else (another gamma, layout, image or GPU)."""
    recipe = load_recipe(tp.THROUGHPUT)
    key = store.key_for(
        recipe, track=default_track(), sglang=PINNED_SGLANG, sm12x=__version__, gpu=GPUS[0].name
    )
    key = store.TableKey(**{**key.__dict__, **changes})
    return store.write(rig / "cache", key, table)


def value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_auto_without_a_table_runs_the_baseline_and_says_what_it_costs(rig, monkeypatch, capsys):
    args, env = launch(rig, monkeypatch)
    assert value(args, "--speculative-dspark-block-size") == "4"
    assert "--dp-size" not in args and env["SGLANG_RAGGED_VERIFY_MODE"] == "static"
    err = capsys.readouterr().err
    notices = [line for line in err.splitlines() if "SM12X_CONFIGURATION" in line]
    assert len(notices) == 1, notices
    (notice,) = notices
    assert f"running the baseline {tp.RIG}" in notice and tp.THROUGHPUT in notice
    # What it costs: the throughput recipe's comparable figures, and how to tune.
    assert "2,461" in notice and "1,282" in notice and "`sm12x tune`" in notice


def test_auto_with_a_matching_table_runs_the_throughput_configuration(rig, monkeypatch, capsys):
    path = table_for(rig)
    args, env = launch(rig, monkeypatch)
    assert value(args, "--speculative-dspark-block-size") == "7"
    assert value(args, "--dp-size") == "4" and value(args, "--ep-size") == "4"
    assert value(args, "--speculative-dspark-sps-table-path") == str(path)
    assert env["SGLANG_RAGGED_VERIFY_MODE"] == "compact"
    assert f"running {tp.THROUGHPUT}" in capsys.readouterr().err


def test_throughput_without_a_table_refuses_with_the_cost_and_the_command(rig, monkeypatch):
    with pytest.raises(UserError) as caught:
        launch(rig, monkeypatch, SM12X_CONFIGURATION="throughput")
    message = caught.value.message
    assert "\n" not in message
    assert "there is no tuned SPS table" in message and "gamma 7" in message
    assert "2,461 vs 1,282" in message and "`sm12x tune`" in message


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"gamma": 6, "tp": 4}, "gamma 6 (this launch: 7)"),
        ({"dp": 2}, "layout TP4 DP2 EP4 (this launch: TP4 DP4 EP4)"),
        ({"sglang": "0.5.16"}, "image sglang 0.5.16"),
        ({"sm12x": "0.0.1"}, "sm12x 0.0.1"),
        ({"gpu": "NVIDIA GeForce RTX 5090", "gpu_count": 4}, "GPU 4x NVIDIA GeForce RTX 5090"),
    ],
    ids=["gamma", "layout", "image-sglang", "image-sm12x", "gpu"],
)
def test_a_stale_table_is_refused_under_throughput_and_ignored_under_auto(
    rig, monkeypatch, capsys, changes, says
):
    table_for(rig, **changes)
    with pytest.raises(UserError) as caught:
        launch(rig, monkeypatch, SM12X_CONFIGURATION="throughput")
    assert "is stale: made for" in caught.value.message and says in caught.value.message
    args, _ = launch(rig, monkeypatch)  # auto: the baseline, and the notice says why
    assert value(args, "--speculative-dspark-block-size") == "4"
    err = capsys.readouterr().err
    assert "is stale" in err and says in err


def test_a_static_table_is_stale_for_the_compact_recipe(rig, monkeypatch, capsys):
    """sglang prices the two kinds by different formulas (dspark_planner's
    table-kind branch): the recipe's compact verify wants the additive table."""
    path = table_for(rig, STATIC_TABLE)
    assert json.loads(store.meta_path(path).read_text())["kind"] == store.STATIC
    with pytest.raises(UserError) as caught:
        launch(rig, monkeypatch, SM12X_CONFIGURATION="throughput")
    message = caught.value.message
    assert "is stale: made for kind sglang's 1-D SpsCostTable" in message
    assert "(this launch: SpsAdditiveCostTable)" in message and "`sm12x tune`" in message
    args, _ = launch(rig, monkeypatch)  # auto: the baseline, saying why
    assert value(args, "--speculative-dspark-block-size") == "4"
    assert "1-D SpsCostTable" in capsys.readouterr().err


def test_a_sidecar_without_a_kind_is_an_old_1d_table(rig, monkeypatch):
    path = table_for(rig)
    meta = store.meta_path(path)
    data = json.loads(meta.read_text())
    del data["kind"], data["key"]["kind"]
    meta.write_text(json.dumps(data))
    with pytest.raises(UserError, match="is stale: made for kind sglang's 1-D"):
        launch(rig, monkeypatch, SM12X_CONFIGURATION="throughput")


def test_baseline_runs_the_baseline_even_with_a_table(rig, monkeypatch, capsys):
    table_for(rig)
    args, _ = launch(rig, monkeypatch, SM12X_CONFIGURATION="baseline")
    assert value(args, "--speculative-dspark-block-size") == "4"
    assert "SM12X_CONFIGURATION" not in capsys.readouterr().err


def test_naming_the_throughput_recipe_means_throughput(rig, monkeypatch):
    with pytest.raises(UserError, match="there is no tuned SPS table"):
        launch(rig, monkeypatch, SM12X_RECIPE=tp.THROUGHPUT, SM12X_CONFIGURATION="baseline")
    path = table_for(rig)
    args, _ = launch(rig, monkeypatch, SM12X_RECIPE=tp.THROUGHPUT)
    assert value(args, "--speculative-dspark-sps-table-path") == str(path)


def test_a_dry_run_shows_the_throughput_command_with_the_refusal_as_a_warning(
    rig, monkeypatch, capsys
):
    plan = launch(rig, monkeypatch, "--dry-run", SM12X_CONFIGURATION="throughput")
    out = plan.shell()
    assert "--speculative-dspark-block-size 7" in out
    assert "SGLANG_RAGGED_VERIFY_MODE=compact" in out
    expected = rig / "cache" / "sps" / tp.THROUGHPUT / f"g7-tp4-dp4-ep4-{default_track()}.json"
    assert str(expected) in out
    err = capsys.readouterr().err
    assert "warning:" in err and "there is no tuned SPS table" in err


def test_render_falls_back_like_the_launch(rig, monkeypatch, capsys):
    parser = argparse.ArgumentParser()
    render_cmd.add_arguments(parser)
    monkeypatch.setenv("SM12X_CACHE_DIR", str(rig / "cache"))
    assert render_cmd.run(parser.parse_args([tp.RIG])) == 0
    out, err = capsys.readouterr()
    assert "--speculative-dspark-block-size 4" in out and "running the baseline" in err


def test_a_recipe_limited_to_another_track_is_refused_or_skipped(tmp_path, monkeypatch, capsys):
    # The fixture written for the current track only (its DP attention in 0.5.23's
    # spelling, which the lints require there).
    text = (
        tp.FIXTURE.read_text()
        .replace("tracks: [pinned]", "tracks: [current]", 1)
        .replace("  --dp-size:\n    value: 4\n", "  --attn-dp-size:\n    value: 4\n", 1)
    )
    text = (
        text[: text.index("  --enable-dp-attention:")]
        + text[text.index("  --enable-dp-lm-head:") :]
    )
    folder = tp.recipes_with_it(tmp_path / "recipes", text)
    monkeypatch.setattr(load, "recipes_dir", lambda: folder)
    monkeypatch.setattr(launch_choice.gpus, "query_gpus", lambda *_: GPUS)
    monkeypatch.setattr(launch_choice, "installed_sglang", lambda: PINNED_SGLANG)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with pytest.raises(UserError, match="runs only on the current track"):
        launch(tmp_path, monkeypatch, SM12X_TRACK="pinned", SM12X_CONFIGURATION="throughput")
    with pytest.raises(UserError, match="runs only on the current track"):
        launch(tmp_path, monkeypatch, SM12X_TRACK="pinned", SM12X_RECIPE=tp.THROUGHPUT)
    args, _ = launch(tmp_path, monkeypatch, SM12X_TRACK="pinned")
    assert value(args, "--speculative-dspark-block-size") == "4"
    assert "set SM12X_TRACK=current to use it" in capsys.readouterr().err


def test_sps_profile_runs_the_tuned_configuration_in_profiling_mode(rig, monkeypatch):
    """Phase 1 of tune: static verify, no table (the profiler's diagonal accepts only
    static); phase 2: compact verify loading phase 1's table (without one sglang's
    planner verifies every row and ignores the pinned budgets)."""
    args, env = launch(rig, monkeypatch, "--sps-profile")
    assert value(args, "--speculative-dspark-block-size") == "7"
    assert "--speculative-dspark-sps-table-path" not in args
    assert env["SGLANG_DSPARK_ENABLE_SPS_RECORD"] == "1"
    assert env["SGLANG_SIMULATE_ACC_LEN"] == "1.0"
    assert env["SGLANG_RAGGED_VERIFY_MODE"] == "static"
    args, env = launch(rig, monkeypatch, "--sps-profile", "--sps-table", "/cache/d.json")
    assert value(args, "--speculative-dspark-sps-table-path") == "/cache/d.json"
    assert env["SGLANG_RAGGED_VERIFY_MODE"] == "compact"
    with pytest.raises(UserError, match="--sps-table .* goes with --sps-profile"):
        launch(rig, monkeypatch, "--sps-table", "/cache/d.json")


@pytest.mark.parametrize("record", [None, {"kind": "none"}, {"kind": "SpsCostTable"}])
def test_a_launch_warns_on_a_table_not_profiled_with_one(rig, monkeypatch, capsys, record):
    """The sidecar's record of the table the profiling server ran with: none, or
    no record (a table made before tune recorded it), is a warning."""
    path = table_for(rig)
    meta = store.meta_path(path)
    if record is not None:
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "profiled_with": record}))
    args, _ = launch(rig, monkeypatch)
    assert value(args, "--speculative-dspark-sps-table-path") == str(path)
    warned = [line for line in capsys.readouterr().err.splitlines() if "may be flat" in line]
    if record is not None and record["kind"] != "none":
        assert warned == []
    else:
        assert len(warned) == 1 and str(path) in warned[0] and "sm12x tune --fresh" in warned[0]


def test_no_spec_drops_ragged_verify_and_the_table():
    recipe = load_recipe(tp.FIXTURE)
    on = build_launch(recipe, LaunchContext(cache_dir="/cache"))
    off = build_launch(recipe, LaunchContext(cache_dir="/cache", speculative=False))
    assert "SGLANG_RAGGED_VERIFY_MODE" in on.env_dict()
    assert "--speculative-dspark-sps-table-path" in on.argv()
    assert "SGLANG_RAGGED_VERIFY_MODE" not in off.env_dict()
    assert not any(a.startswith("--speculative") for a in off.argv())


def test_static_verify_renders_static_and_no_cache_dir_renders_a_placeholder():
    baseline = build_launch(load_recipe(tp.RIG))
    assert baseline.env_dict()["SGLANG_RAGGED_VERIFY_MODE"] == "static"
    shown = build_launch(load_recipe(tp.FIXTURE)).shell()
    assert f'"${{SM12X_CACHE_DIR}}/sps/{tp.THROUGHPUT}/g7-tp4-dp4-ep4-' in shown


def test_auto_picks_the_rig_not_its_throughput_configuration(rig):
    pick = gpus.pick_recipe(GPUS, load.load_all())
    assert pick.recipe.name == tp.RIG


def test_the_table_key_counts_dp_attention_ranks_in_either_spelling():
    # 0.5.23 spells DP attention --attn-dp-size; 0.5.17 --dp-size with
    # --enable-dp-attention: both are four ranks scheduling their own batches.
    from sm12x.recipe import load_recipe
    from sm12x.sps import tables as sps_tables

    recipe = load_recipe("rtx-pro-6000-tp4-throughput")
    assert recipe.has_flag("--attn-dp-size") and not recipe.has_flag("--dp-size")
    assert str(sps_tables.layout(recipe)) == "TP4 DP4 EP4"


def test_a_render_without_a_track_names_the_recipe_s_own_track():
    from sm12x.recipe import load_recipe
    from sm12x.recipe.tracks import home_track

    assert home_track(load_recipe("rtx-pro-6000-tp4-throughput")) == "current"
    assert home_track(load_recipe("rtx-pro-6000-tp4")) == default_track()


def test_render_refuses_a_throughput_recipe_without_its_table_as_the_launch_does(
    rig, monkeypatch, capsys
):
    """Not a command printed under "it is refused rather than run slow" with exit 0:
    the refusal, once, and a non-zero exit; with its table it renders."""
    monkeypatch.setenv("SM12X_CACHE_DIR", str(rig / "cache"))
    parser = argparse.ArgumentParser()
    render_cmd.add_arguments(parser)
    with pytest.raises(UserError, match="refused rather than run slow"):
        render_cmd.run(parser.parse_args([tp.THROUGHPUT]))
    assert capsys.readouterr().out == ""
    table_for(rig)
    assert render_cmd.run(parser.parse_args([tp.THROUGHPUT])) == 0
    assert "--speculative-dspark-block-size 7" in capsys.readouterr().out


def test_render_of_a_shipped_throughput_recipe_exits_non_zero_with_one_line(tmp_path):
    from tests.support.cli import run_sm12x

    name = "rtx-pro-6000-tp4-throughput"
    result = run_sm12x("render", name, env={"SM12X_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode != 0
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"sm12x render: error: {name} (SM12X_RECIPE) reads a tuned SPS table")
    assert "refused rather than run slow" in line
