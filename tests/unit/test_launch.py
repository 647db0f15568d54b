"""`sm12x launch` and `sm12x render`: what they print and what they exec."""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sm12x.errors import UserError
from sm12x.launch import choice as launch_choice
from sm12x.launch import main as launch_main
from sm12x.launch.plan import build_launch
from sm12x.launch.render import EnvRef, LaunchContext
from sm12x.recipe import load_recipe
from sm12x.settings import load
from sm12x.versions import load_versions
from tests.support.cli import ROOT, assert_one_clear_error, run_sm12x

SPARK_SITE = {
    "NCCL_IB_HCA": "rocep1s0f0",
    "NCCL_SOCKET_IFNAME": "enp1s0f0np0",
    "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
}


def launch_args(*argv: str) -> argparse.Namespace:
    """`sm12x launch ARGV` as its own parser reads it."""
    parser = argparse.ArgumentParser()
    launch_main.add_arguments(parser)
    return parser.parse_args(list(argv))


def launch(
    monkeypatch,
    environ: dict[str, str],
    *extra: str,
    dry_run=False,
    no_spec=False,
    sglang: str | None = None,
):
    """Run launch in-process with os.execvpe captured, as if this Python had sglang
    `sglang` (default: the default track's, as in its image)."""
    calls = []
    monkeypatch.setattr(os, "execvpe", lambda file, args, env: calls.append((file, args, env)))
    monkeypatch.setattr(launch_choice.gpus, "query_gpus", _no_nvidia_smi)
    installed = sglang or load_versions()["SGLANG_VERSION"]
    monkeypatch.setattr(launch_choice, "installed_sglang", lambda: installed)
    argv = ["--dry-run"] * dry_run + ["--no-spec"] * no_spec + (["--", *extra] if extra else [])
    assert launch_main.run(launch_args(*argv), environ) == 0
    return calls


def context(environ: dict[str, str]) -> LaunchContext:
    return LaunchContext.from_settings(load(environ=environ))


def _no_nvidia_smi(*_):
    raise launch_choice.gpus.GpuQueryError("no nvidia-smi in tests")


def model_dir(tmp_path: Path) -> str:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return str(tmp_path / "model")


def test_launch_execs_sglang_with_the_recipe(monkeypatch, tmp_path):
    environ = {
        "SM12X_RECIPE": "rtx-pro-6000-tp4",
        "SM12X_MODEL_DIR": model_dir(tmp_path),
        "SM12X_API_KEY": "s3cret",
        "SM12X_HOST": "0.0.0.0",
        "PATH": "/usr/bin",
    }
    [(file, args, env)] = launch(monkeypatch, environ)
    assert file == sys.executable
    # With a key, sglang starts through sm12x.keyed: the key stays off argv.
    assert args[:4] == [sys.executable, "-m", "sm12x.keyed", "sglang.launch_server"]
    plan = build_launch(load_recipe("rtx-pro-6000-tp4"), context(environ))
    assert args[4:] == plan.argv(environ)
    assert "s3cret" not in args and "--api-key" not in args
    assert env["SM12X_API_KEY"] == "s3cret"
    assert args[args.index("--model-path") + 1] == environ["SM12X_MODEL_DIR"]
    assert "--revision" not in args  # a local folder has no revision
    assert env["SGLANG_DEFAULT_THINKING"] == "1"
    assert env["PATH"] == "/usr/bin"  # the rest of the environment passes through


def test_recipe_values_replace_the_environment_and_say_so(monkeypatch, tmp_path, capsys):
    environ = {
        "SM12X_RECIPE": "rtx-5090-tp8",
        "SM12X_MODEL_DIR": model_dir(tmp_path),
        "SGLANG_JIT_DEEPGEMM_PRECOMPILE": "1",
    }
    [(_, _, env)] = launch(monkeypatch, environ)
    assert env["SGLANG_JIT_DEEPGEMM_PRECOMPILE"] == "0"
    assert "replacing '1' from the environment" in capsys.readouterr().err


def test_site_values_come_from_the_environment(monkeypatch, tmp_path):
    environ = {
        "SM12X_RECIPE": "dgx-spark-tp2",
        "SM12X_NODE_RANK": "1",
        "SM12X_HEAD_ADDR": "10.0.0.1",
        "SM12X_MODEL_DIR": model_dir(tmp_path),
        "NCCL_IB_GID_INDEX": "1",
        **SPARK_SITE,
    }
    [(_, args, env)] = launch(monkeypatch, environ)
    assert env["NCCL_IB_HCA"] == "rocep1s0f0"
    assert env["NCCL_IB_GID_INDEX"] == "1"  # the site overrides the recipe's default
    assert args[args.index("--node-rank") + 1] == "1"
    assert args[args.index("--dist-init-addr") + 1] == "10.0.0.1:5000"
    assert args[args.index("--nnodes") + 1] == "2"


def test_extra_flags_are_appended(monkeypatch, tmp_path, capsys):
    environ = {"SM12X_RECIPE": "rtx-pro-6000-tp2", "SM12X_MODEL_DIR": model_dir(tmp_path)}
    [(_, args, _)] = launch(monkeypatch, environ, "--log-level", "debug")
    assert args[-2:] == ["--log-level", "debug"]
    assert "appending flags not in the recipe: --log-level debug" in capsys.readouterr().err


def test_a_missing_checkpoint_is_named_before_sglang_starts():
    result = run_sm12x(
        "launch", env={"SM12X_RECIPE": "rtx-pro-6000-tp4", "SM12X_MODEL_DIR": "/nonexistent"}
    )
    assert_one_clear_error(
        result,
        "no checkpoint at /nonexistent",
        "SM12X_MODEL_DIR",
        "hf download deepseek-ai/DeepSeek-V4-Flash-0731 --revision 9e165c3",
    )


def test_spark_site_variables_are_required_to_launch(tmp_path):
    env = {
        "SM12X_RECIPE": "dgx-spark-tp2",
        "SM12X_NODE_RANK": "0",
        "SM12X_HEAD_ADDR": "10.0.0.1",
        "SM12X_MODEL_DIR": model_dir(tmp_path),
    }
    result = run_sm12x("launch", env=env)
    assert_one_clear_error(result, "NCCL_IB_HCA (e.g. rocep1s0f0)", "set them in .env")


def test_node_rank_must_fit_the_recipe():
    result = run_sm12x("render", "dgx-spark-tp2", "--node-rank", "2")
    assert_one_clear_error(result, "SM12X_NODE_RANK=2", "has 2 nodes")


def test_bad_node_rank_in_the_environment():
    result = run_sm12x(
        "launch", "--dry-run", env={"SM12X_RECIPE": "dgx-spark-tp2", "SM12X_NODE_RANK": "head"}
    )
    assert_one_clear_error(
        result, "SM12X_NODE_RANK='head' in the environment", "valid integer", "fix it there"
    )


def test_dry_run_is_ready_to_paste(tmp_path):
    """Paste the printed snippet into bash with a stand-in python3: it receives
    exactly the argv and environment the launcher would exec."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    # An absolute interpreter: `env python3` would find this fake again.
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, "
        "open(os.environ['CAPTURE'], 'w'))\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    recipe = load_recipe("dgx-spark-tp2")
    environ = {
        "SM12X_NODE_RANK": "0",
        "SM12X_HEAD_ADDR": "10.0.0.1",
        "SM12X_API_KEY": "it's$ecret\"`!",
        "SM12X_MODEL_DIR": "/model",
        "SM12X_CACHE_DIR": "/cache",
        **SPARK_SITE,
    }
    plan = build_launch(recipe, context(environ))
    snippet = plan.shell(python="python3")
    assert "it's$ecret" not in snippet  # secrets stay "$SM12X_API_KEY"
    capture = tmp_path / "capture.json"
    subprocess.run(
        ["bash", "-c", snippet],
        check=True,
        env={**environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "CAPTURE": str(capture)},
    )
    got = json.loads(capture.read_text())
    assert got["argv"] == ["-m", "sm12x.keyed", "sglang.launch_server", *plan.argv(environ)]
    assert not [a for a in got["argv"] if "ecret" in a]
    for name, value in plan.env_dict(environ).items():
        assert got["env"][name] == value


def test_launch_dry_run_prints_what_it_would_exec():
    result = run_sm12x(
        "launch",
        "--dry-run",
        "--",
        "--log-level",
        "debug",
        env={"SM12X_RECIPE": "rtx-pro-6000-tp4", "SM12X_API_KEY": "k"},
    )
    assert result.returncode == 0, result.stderr
    assert "-m sm12x.keyed sglang.launch_server" in result.stdout
    assert "--api-key" not in result.stdout
    assert result.stdout.rstrip().endswith("--log-level \\\n  debug")


def without_comments(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def test_render_prints_the_hub_command_by_default():
    result = run_sm12x("render", "rtx-pro-6000-tp4")
    assert result.returncode == 0, result.stderr
    out = without_comments(result.stdout)
    assert out.startswith("SGLANG_DEFAULT_THINKING=1 \\\n")
    assert (
        "python3 -m sglang.launch_server \\\n  --model-path deepseek-ai/DeepSeek-V4-Flash-0731 \\\n"
        "  --revision 9e165c30e2704aec5d9d593cce3eebd58bbef1cb \\\n" in out
    )
    assert "--host 127.0.0.1" in out and "--api-key" not in out


def test_render_and_launch_print_the_same_flags():
    env = {"SM12X_RECIPE": "rtx-5090-tp8"}
    rendered = run_sm12x("render", "rtx-5090-tp8", env=env).stdout
    launched = run_sm12x("launch", "--dry-run", env=env).stdout
    assert launched == without_comments(rendered).replace("python3 -m", f"{sys.executable} -m")


def test_render_explain_gives_each_reason():
    out = run_sm12x("render", "rtx-pro-6000-tp4", "--explain").stdout
    assert (
        "# --disable-custom-all-reduce: The custom all-reduce makes CUDA-graph capture fail" in out
    )
    assert "# --speculative-dspark-block-size: Depth 5" in out


def test_render_options_override_the_environment():
    out = run_sm12x(
        "render",
        "dgx-spark-tp2",
        "--node-rank",
        "1",
        "--head-addr",
        "10.0.0.9:6000",
        "--model-dir",
        "/srv/m",
        "--port",
        "8000",
        env={"SM12X_NODE_RANK": "0", **SPARK_SITE},
    ).stdout
    assert "--node-rank 1" in out and "--dist-init-addr 10.0.0.9:6000" in out
    assert "--model-path /srv/m" in out and "--revision" not in out and "--port 8000" in out
    assert "NCCL_IB_HCA=rocep1s0f0" in out


def test_placeholders_are_printed_not_guessed():
    plan = build_launch(load_recipe("dgx-spark-tp2"), LaunchContext())
    assert EnvRef("SM12X_HEAD_ADDR", ":5000") in plan.unresolved({})
    text = plan.shell()
    assert 'NCCL_IB_HCA="$NCCL_IB_HCA"' in text
    assert "NCCL_IB_GID_INDEX=3" in text  # has a default
    assert '--dist-init-addr "${SM12X_HEAD_ADDR}:5000"' in text
    with pytest.raises(UserError, match="SM12X_NODE_RANK is not set"):
        plan.argv({})


def test_launch_api_for_other_modules():
    recipe = load_recipe("rtx-pro-6000-tp2")
    plan = build_launch(recipe)
    argv = plan.argv()
    assert argv[:2] == ["--model-path", "deepseek-ai/DeepSeek-V4-Flash-0731"]
    assert "--speculative-dspark-block-size" in argv
    assert plan.env_dict() == {
        "SGLANG_DEFAULT_THINKING": "1",
        "SGLANG_JIT_DEEPGEMM_PRECOMPILE": "0",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "SGLANG_RAGGED_VERIFY_MODE": "static",
    }
    assert recipe.gpu_count_per_node == 2
    spark = build_launch(
        load_recipe("dgx-spark-tp2"), LaunchContext(node_rank=1, head_addr="10.0.0.1")
    ).argv()
    assert spark[spark.index("--node-rank") + 1] == "1"


def test_cache_dir_moves_every_jit_cache():
    plan = build_launch(load_recipe("rtx-pro-6000-tp4"), LaunchContext(cache_dir="/cache/"))
    env = plan.env_dict()
    assert env["TRITON_CACHE_DIR"] == "/cache/triton"
    assert env["FLASHINFER_WORKSPACE_BASE"] == "/cache"
    assert env["SGLANG_DG_CACHE_DIR"] == "/cache/deep_gemm"


def test_a_named_recipe_that_does_not_fit_the_gpus_is_warned_about(monkeypatch, tmp_path, capsys):
    from sm12x.launch import gpus

    h100 = gpus.parse_nvidia_smi("NVIDIA H100 80GB HBM3, 1, 9.0, 81559 MiB, 570.124.06\n")
    environ = {"SM12X_RECIPE": "rtx-pro-6000-tp4", "SM12X_MODEL_DIR": model_dir(tmp_path)}
    calls = []
    monkeypatch.setattr(os, "execvpe", lambda *a: calls.append(a))
    monkeypatch.setattr(launch_choice.gpus, "query_gpus", lambda *_: h100)
    monkeypatch.setattr(
        launch_choice, "installed_sglang", lambda: load_versions()["SGLANG_VERSION"]
    )
    assert launch_main.run(launch_args(), environ) == 0
    assert calls  # a warning, not a refusal: the user named the recipe
    err = capsys.readouterr().err
    assert "warning: rtx-pro-6000-tp4 expects 4x rtx-pro-6000 (sm_120) per node" in err
    assert "1x NVIDIA H100 80GB HBM3 (compute capability 9.0)" in err


@pytest.mark.parametrize(
    "name", ["rtx-pro-6000-tp2", "rtx-pro-6000-tp4", "rtx-5090-tp8", "dgx-spark-tp2"]
)
def test_no_spec_drops_exactly_the_speculative_flags(name):
    """The reference server for `verify --compare-url`: the same recipe, every
    flag the dspark section renders dropped, nothing else changed."""
    recipe = load_recipe(name)
    on = build_launch(recipe, LaunchContext(node_rank=0, head_addr="10.0.0.1"))
    off = build_launch(recipe, LaunchContext(node_rank=0, head_addr="10.0.0.1", speculative=False))
    dropped = [a for a in on.args if a not in off.args]
    assert [a.flag for a in dropped][:2] == [
        "--speculative-algorithm",
        "--speculative-dspark-block-size",
    ]
    assert all(a.flag.startswith("--speculative-") for a in dropped)
    assert [a for a in on.args if a not in dropped] == list(off.args)
    assert not any(a.flag.startswith("--speculative") for a in off.args)
    # The verify mode is speculative decoding's: --no-spec drops it with the flags.
    assert [e for e in on.env if e.name != "SGLANG_RAGGED_VERIFY_MODE"] == list(off.env)


def test_launch_no_spec_execs_the_recipe_without_speculative_decoding(
    monkeypatch, tmp_path, capsys
):
    environ = {"SM12X_RECIPE": "rtx-pro-6000-tp4", "SM12X_MODEL_DIR": model_dir(tmp_path)}
    [(_, spec_args, _)] = launch(monkeypatch, environ)
    [(_, args, env)] = launch(monkeypatch, environ, no_spec=True)
    assert "--speculative-algorithm" in spec_args and "--speculative-algorithm" not in args
    assert "--speculative-dspark-block-size" not in args
    at = spec_args.index("--speculative-algorithm")
    assert spec_args[at : at + 4] == [
        "--speculative-algorithm",
        "DSPARK",
        "--speculative-dspark-block-size",
        "4",
    ]
    assert spec_args[:at] + spec_args[at + 4 :] == args
    assert env["SGLANG_DEFAULT_THINKING"] == "1"
    assert "speculative decoding off" in capsys.readouterr().err


def test_render_no_spec():
    out = run_sm12x("render", "rtx-pro-6000-tp4", "--no-spec").stdout
    assert "--speculative" not in out and "--tp-size 4" in out
    result = run_sm12x("render", "--k8s", "rtx-pro-6000-tp4", "--no-spec")
    assert result.returncode != 0 and "--no-spec" in result.stderr


# --- settings: .env, old names, where each value came from ---------------------


def patch_files(version: str) -> list[str]:
    """The series apply-patches applies to `version`, read from the file itself."""
    data = tomllib.loads((ROOT / "patches" / "sglang" / "patches.toml").read_text())
    return sorted(p["file"] for p in data["patch"] if version in p["sglang"])


def comment_patches(out: str) -> list[str]:
    return sorted(re.findall(r"^#   (\S+\.patch): ", out, re.MULTILINE))


def test_render_says_which_patches_a_stock_sglang_needs():
    out = run_sm12x("render", "rtx-pro-6000-tp4").stdout
    pinned = load_versions()["SGLANG_VERSION"]
    assert f"# A stock sglang {pinned} (the pinned track, versions.env) needs these patches" in out
    assert comment_patches(out) == patch_files(pinned) != []
    assert "scripts/apply-patches" in out
    # Another version, another series (0.5.18 fixed the compress plan upstream).
    other = run_sm12x("render", "rtx-pro-6000-tp4", "--sglang", "0.5.18").stdout
    assert "# A stock sglang 0.5.18 (--sglang) needs" in other
    assert comment_patches(other) == patch_files("0.5.18") != comment_patches(out)
    unknown = run_sm12x("render", "rtx-pro-6000-tp4", "--sglang", "0.5.99").stdout
    assert "sm12x has no patch series for it" in unknown and not comment_patches(unknown)
    bad = run_sm12x("render", "rtx-pro-6000-tp4", "--sglang", "../x")
    assert_one_clear_error(bad, "--sglang '../x'", "0.5.16")


def test_render_for_the_current_track_names_its_own_series():
    current = load_versions("current")["SGLANG_VERSION"]
    out = run_sm12x("render", "rtx-pro-6000-tp4", "--track", "current").stdout
    assert f"# A stock sglang {current} (the current track, versions.env)" in out
    assert comment_patches(out) == patch_files(current)
    env = run_sm12x("render", "rtx-pro-6000-tp4", env={"SM12X_TRACK": "current"}).stdout
    assert env == out, "SM12X_TRACK and --track are one setting"
    bad = run_sm12x("render", "rtx-pro-6000-tp4", "--track", "nightly")
    assert_one_clear_error(bad, "nightly", "is not a track (versions.env has pinned, current")


def test_render_says_when_no_patch_is_needed(monkeypatch, tmp_path):
    """A release whose every patch is retired (the rule apply-patches reads) gets a
    comment saying so, not a list."""
    from sm12x.launch import render_cmd
    from sm12x.patches import series as patch_series

    toml = tmp_path / "patches.toml"
    toml.write_text(
        '[[patch]]\nfile = "0001-x.patch"\ntitle = "x"\nsglang = ["0.5.17"]\n'
        'retire_sglang = "0.5.23"\nretire_when = "sglang >= 0.5.23"\n'
    )
    monkeypatch.setattr(patch_series, "patches_toml", lambda: toml)
    patch_series._load.cache_clear()
    try:
        text = render_cmd.patches_comment("0.5.23", "the current track, versions.env")
    finally:
        patch_series._load.cache_clear()
    assert "needs no patch of sm12x's series" in text and "retires each one" in text
    assert "#   " not in text


def test_render_k8s_writes_the_track_s_image():
    out = run_sm12x("render", "--k8s", "rtx-pro-6000-tp4", "--track", "current").stdout
    assert f"image: {load_versions('current')['SM12X_IMAGE']}" in out
    default = run_sm12x("render", "--k8s", "rtx-pro-6000-tp4").stdout
    assert f"image: {load_versions()['SM12X_IMAGE']}" in default


def test_launch_serves_the_track_s_sglang_and_refuses_another(monkeypatch, tmp_path, capsys):
    environ = {
        "SM12X_RECIPE": "rtx-pro-6000-tp4",
        "SM12X_MODEL_DIR": model_dir(tmp_path),
        "SM12X_TRACK": "current",
    }
    current, pinned = (load_versions(t)["SGLANG_VERSION"] for t in ("current", "pinned"))
    assert launch(monkeypatch, environ, sglang=current)
    with pytest.raises(UserError) as err:
        launch(monkeypatch, environ, sglang=pinned)
    message = err.value.message
    for words in (
        f"SM12X_TRACK=current (from environment) serves sglang {current}",
        f"this Python has sglang {pinned}",
        load_versions("current")["SM12X_IMAGE"],
        "set SM12X_TRACK=pinned",
    ):
        assert words in message, (words, message)
    with pytest.raises(UserError, match="install sglang 0.5.23"):
        launch(monkeypatch, environ, sglang="0.5.99")
    # A dry run prints the command and says what is wrong.
    capsys.readouterr()
    assert launch(monkeypatch, environ, sglang=pinned, dry_run=True) == []
    assert "warning: SM12X_TRACK=current" in capsys.readouterr().err


def test_launch_without_sglang_says_where_to_run_it(monkeypatch, tmp_path):
    environ = {"SM12X_RECIPE": "rtx-pro-6000-tp4", "SM12X_MODEL_DIR": model_dir(tmp_path)}
    monkeypatch.setattr(os, "execvpe", lambda *a: None)
    monkeypatch.setattr(launch_choice.gpus, "query_gpus", _no_nvidia_smi)
    monkeypatch.setattr(launch_choice, "installed_sglang", lambda: None)
    with pytest.raises(
        UserError,
        match=r"sglang is not installed for .*: run sm12x launch in "
        r"the pinned track's image \(ghcr.io/sm12x/sm12x:",
    ):
        launch_main.run(launch_args(), environ)
    # A dry run (a laptop without sglang) still prints the command.
    monkeypatch.setattr(os, "execvpe", lambda *a: pytest.fail("a dry run execs nothing"))
    assert launch_main.run(launch_args("--dry-run"), environ) == 0


def test_render_serves_the_checkpoint_named_in_dotenv(tmp_path):
    # The README's path without Docker: .env with a relative model folder,
    # rendered from another folder: the path is taken from .env's folder.
    project = tmp_path / "project"
    project.mkdir()
    (project / ".env").write_text("SM12X_MODEL_DIR=models/dsv4\nSM12X_PORT=31000\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_sm12x(
        "render", "rtx-pro-6000-tp4", "--env-file", str(project / ".env"), cwd=elsewhere
    )
    assert result.returncode == 0, result.stderr
    assert f"--model-path {project / 'models' / 'dsv4'} \\" in result.stdout
    assert "--revision" not in result.stdout and "--port 31000" in result.stdout
    # The environment wins over .env, a flag over both.
    env = {"SM12X_PORT": "32000", "SM12X_ENV_FILE": str(project / ".env")}
    assert "--port 32000" in run_sm12x("render", "rtx-pro-6000-tp4", env=env).stdout
    flagged = run_sm12x("render", "rtx-pro-6000-tp4", "--port", "33000", env=env).stdout
    assert "--port 33000" in flagged


def test_dotenv_in_the_current_folder_is_read(tmp_path):
    (tmp_path / ".env").write_text("SM12X_HEAD_ADDR=10.0.0.7\nSM12X_NODE_RANK=1\n")
    env = {"SM12X_ENV_FILE": "", **SPARK_SITE}
    out = run_sm12x("render", "dgx-spark-tp2", env=env, cwd=tmp_path).stdout
    assert "--node-rank 1" in out and "--dist-init-addr 10.0.0.7:5000" in out


def test_old_names_still_work_with_a_warning(tmp_path):
    (tmp_path / ".env").write_text("HEAD_ADDR=10.0.0.7\nSM12X_MODEL_PATH=/srv/old\n")
    result = run_sm12x(
        "render",
        "dgx-spark-tp2",
        "--model-path",
        "/srv/flag",
        "--env-file",
        str(tmp_path / ".env"),
        env={"NODE_RANK": "1", **SPARK_SITE},
    )
    assert result.returncode == 0, result.stderr
    out, err = result.stdout, result.stderr
    assert "--dist-init-addr 10.0.0.7:5000" in out and "--node-rank 1" in out
    assert "--model-path /srv/flag" in out  # the flag wins over .env
    assert "HEAD_ADDR in " in err and "is the old name of SM12X_HEAD_ADDR: rename it" in err
    assert "NODE_RANK in the environment is the old name of SM12X_NODE_RANK" in err
    assert "--model-path is the old name of --model-dir" in err
    # Both names set: the new one wins and the old one is called out.
    both = run_sm12x(
        "render", "dgx-spark-tp2", env={"NODE_RANK": "1", "SM12X_NODE_RANK": "0", **SPARK_SITE}
    )
    assert "--node-rank 0" in both.stdout
    assert "NODE_RANK in the environment is ignored: SM12X_NODE_RANK is set too" in both.stderr


def test_explain_says_where_each_value_came_from(tmp_path):
    (tmp_path / ".env").write_text("SM12X_MODEL_DIR=m\nSM12X_API_KEY=s3cret\n")
    result = run_sm12x(
        "render",
        "rtx-pro-6000-tp4",
        "--explain",
        "--port",
        "31000",
        env={"SM12X_BIND": "127.0.0.2", "SM12X_ENV_FILE": str(tmp_path / ".env")},
    )
    out = result.stdout
    assert f".env: {tmp_path / '.env'} (SM12X_ENV_FILE)" in out
    rows = {m[1]: m[2] for m in re.finditer(r"^# (SM12X_\w+)=.*?<- (.*)$", out, re.MULTILINE)}
    assert rows["SM12X_MODEL_DIR"] == f".env ({tmp_path / '.env'}), given as m"
    assert rows["SM12X_BIND"] == "environment"
    assert rows["SM12X_PORT"] == "flag --port"
    assert rows["SM12X_RECIPE"] == "flag RECIPE"
    assert rows["SM12X_HOST"] == "default: SM12X_BIND"
    assert "s3cret" not in out and "# SM12X_API_KEY=(set)" in out


def test_launch_uses_the_key_and_site_values_from_dotenv(monkeypatch, tmp_path):
    (tmp_path / ".env").write_text(
        "SM12X_API_KEY=from-dotenv\nSM12X_BIND=0.0.0.0\nNCCL_IB_HCA=rocep1s0f0\n"
        "NCCL_SOCKET_IFNAME=enp1s0f0np0\nGLOO_SOCKET_IFNAME=enp1s0f0np0\n"
        f"SM12X_MODEL_DIR={model_dir(tmp_path)}\n"
    )
    environ = {
        "SM12X_RECIPE": "dgx-spark-tp2",
        "SM12X_NODE_RANK": "0",
        "SM12X_HEAD_ADDR": "10.0.0.1",
        "SM12X_ENV_FILE": str(tmp_path / ".env"),
    }
    [(_, args, env)] = launch(monkeypatch, environ)
    # The key from .env reaches sm12x.keyed through the environment, never argv.
    assert args[1:4] == ["-m", "sm12x.keyed", "sglang.launch_server"]
    assert env["SM12X_API_KEY"] == "from-dotenv" and "from-dotenv" not in args
    assert env["NCCL_IB_HCA"] == "rocep1s0f0"
    assert args[args.index("--host") + 1] == "0.0.0.0"


def test_launch_refuses_an_open_bind_from_dotenv(tmp_path):
    (tmp_path / ".env").write_text(f"SM12X_BIND=0.0.0.0\nSM12X_MODEL_DIR={model_dir(tmp_path)}\n")
    result = run_sm12x(
        "launch", "--recipe", "rtx-pro-6000-tp4", "--env-file", str(tmp_path / ".env")
    )
    assert_one_clear_error(result, "would listen on 0.0.0.0 with no API key")


def test_a_bad_value_in_dotenv_names_the_file(tmp_path):
    (tmp_path / ".env").write_text("SM12X_PORT=3000O\n")
    result = run_sm12x("render", "rtx-pro-6000-tp4", "--env-file", str(tmp_path / ".env"))
    assert_one_clear_error(result, f"SM12X_PORT='3000O' in {tmp_path / '.env'}", "fix it there")
    missing = run_sm12x("render", "rtx-pro-6000-tp4", "--env-file", str(tmp_path / "nope"))
    assert_one_clear_error(missing, "--env-file", "no such file")
