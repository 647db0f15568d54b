"""SM12X_RECIPE=auto against recorded nvidia-smi answers, through the real CLI."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from sm12x.launch import gpus
from sm12x.recipe import load_all
from tests.support.cli import ROOT, assert_one_clear_error, fake_nvidia_smi, run_sm12x

FIXTURES = ROOT / "tests" / "fixtures" / "nvidia-smi"


def recorded(tmp_path: Path, fixture: str) -> str:
    return fake_nvidia_smi(tmp_path, f"cat {shlex.quote(str(FIXTURES / fixture))}")


SPARK_ENV = {
    "SM12X_NODE_RANK": "0",
    "SM12X_HEAD_ADDR": "192.168.100.1",
    "NCCL_IB_HCA": "rocep1s0f0",
    "NCCL_SOCKET_IFNAME": "enp1s0f0np0",
    "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
}


@pytest.mark.parametrize(
    "fixture, recipe, env, says",
    [
        (
            "rtx-pro-6000-maxq-x2.csv",
            "rtx-pro-6000-tp2",
            {},
            "2x NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition (compute capability 12.0)",
        ),
        ("rtx-pro-6000-x4.csv", "rtx-pro-6000-tp4", {}, "runs 4x rtx-pro-6000 (sm_120) per node"),
        ("rtx-pro-6000-server-x8.csv", "rtx-pro-6000-tp4", {}, "it uses 4 of the 8 GPUs"),
        ("rtx-5090-x8.csv", "rtx-5090-tp8", {}, "8x NVIDIA GeForce RTX 5090"),
        ("dgx-spark.csv", "dgx-spark-tp2", SPARK_ENV, "1x gb10 (sm_121) per node on 2 nodes"),
    ],
)
def test_auto_picks_the_rig(tmp_path, fixture, recipe, env, says):
    result = run_sm12x("launch", "--dry-run", path=recorded(tmp_path, fixture), env=env)
    assert result.returncode == 0, result.stderr
    assert f"SM12X_RECIPE=auto picked {recipe}: " in result.stderr
    assert says in result.stderr
    # The printed command is that recipe's (same flags as `sm12x render`).
    assert "--tp-size " in result.stdout
    tp = {"rtx-pro-6000-tp2": 2, "rtx-pro-6000-tp4": 4, "rtx-5090-tp8": 8, "dgx-spark-tp2": 2}
    assert f"--tp-size {tp[recipe]} " in result.stdout


def test_auto_is_the_default_and_explicit_auto_is_the_same(tmp_path):
    path = recorded(tmp_path, "rtx-pro-6000-x4.csv")
    default = run_sm12x("launch", "--dry-run", path=path)
    explicit = run_sm12x("launch", "--dry-run", path=path, env={"SM12X_RECIPE": "auto"})
    assert default.stdout == explicit.stdout != ""


def test_auto_on_a_spark_without_node_settings_warns_in_a_dry_run_and_refuses_to_launch(tmp_path):
    path = recorded(tmp_path, "dgx-spark.csv")
    dry = run_sm12x("launch", "--dry-run", path=path)
    assert dry.returncode == 0
    assert "set SM12X_NODE_RANK and SM12X_HEAD_ADDR" in dry.stderr
    assert '--node-rank "$SM12X_NODE_RANK"' in dry.stdout
    real = run_sm12x("launch", path=path)
    assert_one_clear_error(real, "dgx-spark-tp2 runs on 2 nodes", "dgx-spark-tp2-node0")


@pytest.mark.parametrize(
    "fixture, why",
    [
        ("h100-x8.csv", "no recipe is written for this GPU"),
        ("rtx-5090-x2.csv", "rtx-5090 recipes need at least 8 GPUs per node, found 2"),
        ("mixed-pro6000-5090.csv", "not all the same kind"),
    ],
)
def test_unsupported_machine_lists_recipes_and_gpus(tmp_path, fixture, why):
    result = run_sm12x("launch", "--dry-run", path=recorded(tmp_path, fixture))
    line = assert_one_clear_error(result, why, "Found: ", "Recipes: ", "Set SM12X_RECIPE")
    for name in ("rtx-pro-6000-tp2", "rtx-pro-6000-tp4", "rtx-5090-tp8", "dgx-spark-tp2"):
        assert name in line
    if fixture == "h100-x8.csv":
        assert "8x NVIDIA H100 80GB HBM3 (compute capability 9.0)" in line
    assert result.stdout == ""


def test_no_nvidia_smi(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_sm12x("launch", "--dry-run", path=str(empty))
    assert_one_clear_error(result, "nvidia-smi", "not on PATH", "set SM12X_RECIPE")


def test_nvidia_smi_without_a_driver(tmp_path):
    body = (
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        'Make sure that the latest NVIDIA driver is installed and running."; exit 9'
    )
    result = run_sm12x("launch", "--dry-run", path=fake_nvidia_smi(tmp_path, body))
    assert_one_clear_error(result, "nvidia-smi failed (exit 9: NVIDIA-SMI has failed", "driver")


def test_nvidia_smi_sees_no_gpu(tmp_path):
    result = run_sm12x(
        "launch",
        "--dry-run",
        path=fake_nvidia_smi(tmp_path, 'echo "No devices were found"; exit 6'),
    )
    assert_one_clear_error(result, "nvidia-smi failed (exit 6: No devices were found)")


def test_an_explicit_recipe_needs_no_nvidia_smi():
    result = run_sm12x("launch", "--dry-run", env={"SM12X_RECIPE": "rtx-5090-tp8"})
    assert result.returncode == 0, result.stderr
    assert "recipe rtx-5090-tp8 (SM12X_RECIPE, from environment)" in result.stderr


# --- the parser and picker on their own ---------------------------------------


def test_parse_reads_every_field():
    (gpu,) = gpus.parse_nvidia_smi((FIXTURES / "dgx-spark.csv").read_text())
    assert (gpu.name, gpu.compute_capability, gpu.memory_mib, gpu.driver, gpu.model) == (
        "NVIDIA GB10",
        "12.1",
        None,
        "580.95.05",
        "gb10",
    )
    four = gpus.parse_nvidia_smi((FIXTURES / "rtx-pro-6000-x4.csv").read_text())
    assert [g.memory_mib for g in four] == [97887] * 4


def test_parse_refuses_an_unexpected_line():
    with pytest.raises(gpus.GpuQueryError, match="cannot read nvidia-smi line 1"):
        gpus.parse_nvidia_smi("NVIDIA GeForce RTX 5090, 12.0\n")


@pytest.mark.parametrize(
    "name, model",
    [
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "rtx-pro-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("NVIDIA GeForce RTX 5090", "rtx-5090"),
        ("NVIDIA GB10", "gb10"),
        ("NVIDIA GeForce RTX 5090 D", None),
        ("NVIDIA RTX 6000 Ada Generation", None),
        ("NVIDIA H100 80GB HBM3", None),
    ],
)
def test_gpu_names(name, model):
    assert gpus.Gpu(name, "12.0", None, "").model == model


def test_every_gpu_of_the_vocabulary_has_a_name_pattern():
    from typing import get_args

    from sm12x.recipe.model import GpuModel

    assert set(get_args(GpuModel)) == set(gpus.GPU_NAMES)


def test_pick_prefers_the_recipe_using_the_most_gpus():
    four = gpus.parse_nvidia_smi((FIXTURES / "rtx-pro-6000-x4.csv").read_text())
    assert gpus.pick_recipe(four, load_all()).recipe.name == "rtx-pro-6000-tp4"
    assert gpus.pick_recipe(four[:3], load_all()).recipe.name == "rtx-pro-6000-tp2"


def test_wrong_compute_capability_is_named():
    odd = [gpus.Gpu("NVIDIA GB10", "12.0", None, "")]
    with pytest.raises(gpus.NoRecipeMatch, match="another compute capability than 12.0"):
        gpus.pick_recipe(odd, load_all())
