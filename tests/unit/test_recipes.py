"""Every shipped recipe validates, lints clean and says honest things."""

from __future__ import annotations

import pytest

from sm12x.recipe import lint_recipe, list_recipes, load_recipe
from sm12x.recipe.derived import attention_dp
from sm12x.recipe.load import validate_recipe
from sm12x.recipe.model import DEEPSEEK_V4_DEFAULT_MAX_RUNNING_REQUESTS
from tests.support.cli import raw_recipe

RIGS = ["dgx-spark-tp2", "rtx-5090-tp8", "rtx-pro-6000-tp2", "rtx-pro-6000-tp4"]
THROUGHPUT = [f"{rig}-throughput" for rig in RIGS]
ALL = sorted(RIGS + THROUGHPUT)


V41 = ["rtx-pro-6000-tp4-v41", "rtx-pro-6000-tp8-v41"]


def test_each_rig_has_a_baseline_and_a_throughput_configuration():
    assert list_recipes() == sorted(ALL + V41)
    for name in RIGS:
        assert (load_recipe(name).rig, load_recipe(name).configuration_kind) == (name, "baseline")
    for rig, name in zip(RIGS, THROUGHPUT, strict=True):
        recipe = load_recipe(name)
        assert (recipe.rig, recipe.configuration_kind) == (rig, "throughput")
        base = load_recipe(rig)
        assert (recipe.hardware, recipe.model, recipe.serve) == (
            base.hardware,
            base.model,
            base.serve,
        )


def test_one_baseline_per_rig_and_line():
    baselines = [n for n in list_recipes() if load_recipe(n).configuration_kind == "baseline"]
    assert [n for n in baselines if load_recipe(n).model.line == "v4-flash-0731"] == RIGS
    assert [n for n in baselines if load_recipe(n).model.line == "v4.1-flash"] == V41


@pytest.mark.parametrize("name", THROUGHPUT)
def test_a_throughput_configuration_verifies_ragged_with_a_tuned_table(name):
    recipe = load_recipe(name)
    assert recipe.dspark.block_size in (3, 4, 6, 7)  # clean in the field sweep
    assert (recipe.dspark.ragged_verify, recipe.dspark.sps_table) == ("compact", "tuned")
    assert recipe.tracks == ["current"]
    assert "SGLANG_RAGGED_VERIFY_MODE" not in recipe.env


def test_only_the_reference_deployment_s_figures_are_comparable():
    for name in ALL:
        comparable = load_recipe(name).comparable_references
        if name == "rtx-pro-6000-tp4-throughput":
            assert {r.concurrency for r in comparable} == {1, 16, 64, 128, 256}
            assert all("ombori" in r.url for r in comparable)
        else:
            assert comparable == [], name


@pytest.mark.parametrize("name", ALL)
def test_recipe_validates_without_errors_or_warnings(name):
    recipe = load_recipe(name)
    assert lint_recipe(recipe) == []


@pytest.mark.parametrize("name", ALL)
def test_recipe_serves_the_0731_checkpoint_at_a_pinned_revision(name):
    model = load_recipe(name).model
    assert model.hf_id == "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert model.revision == "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"


@pytest.mark.parametrize("name", RIGS)
def test_recipe_runs_dspark_at_depth_4(name):
    assert load_recipe(name).dspark.block_size == 4


@pytest.mark.parametrize("name", ALL)
def test_status_is_honest(name):
    # Nobody at sm12x has run these on the hardware yet; a recipe that says
    # "verified" must name who and when (the model enforces it).
    status = load_recipe(name).status
    assert status.state == "untested"
    assert "not run" in status.note


@pytest.mark.parametrize("name", ALL)
def test_references_name_their_source(name):
    for ref in load_recipe(name).references:
        assert ref.source
        if ref.comparable:
            assert ref.engine == "sglang"


def test_reference_figures_match_the_published_tables():
    tp4 = {
        r.concurrency: r for r in load_recipe("rtx-pro-6000-tp4").references if "33407" in r.source
    }
    assert (tp4[16].output_tokens_per_s, tp4[16].mean_itl_ms, tp4[16].accept_length) == (
        697,
        19.1,
        3.45,
    )
    assert (tp4[32].output_tokens_per_s, tp4[32].mean_itl_ms, tp4[32].accept_length) == (
        995,
        26.8,
        5.27,
    )
    assert (tp4[64].output_tokens_per_s, tp4[64].mean_itl_ms, tp4[64].accept_length) == (
        1282,
        43.2,
        5.19,
    )
    assert load_recipe("rtx-5090-tp8").references == []
    spark = load_recipe("dgx-spark-tp2").references
    assert all(r.engine == "vllm" and not r.comparable for r in spark)


def test_hardware_facts():
    spark = load_recipe("dgx-spark-tp2").hardware
    assert (spark.gpu, spark.sm, spark.cpu_arch, spark.nodes, spark.unified_memory) == (
        "gb10",
        "sm_121",
        "aarch64",
        2,
        True,
    )
    rtx = load_recipe("rtx-5090-tp8").hardware
    assert (rtx.gpu, rtx.sm, rtx.gpus_per_node, rtx.memory_gib_per_gpu) == (
        "rtx-5090",
        "sm_120",
        8,
        32,
    )


def test_spark_memory_settings_stay_below_the_oom_value():
    spark = load_recipe("dgx-spark-tp2")
    assert spark.flag_value("--mem-fraction-static") < 0.80
    assert not spark.has_flag("--weight-loader-disable-mmap")
    assert spark.max_running_requests == 32


def test_max_running_requests_unset_is_sglangs_deepseek_v4_default():
    # sglang's own resolution agrees: tests/unit/test_sglang_validates_recipes.py
    data = raw_recipe("rtx-pro-6000-tp4")
    data["flags"].pop("--max-running-requests")
    assert (
        validate_recipe(data, "case.yaml").max_running_requests
        == DEEPSEEK_V4_DEFAULT_MAX_RUNNING_REQUESTS
        == 256
    )


@pytest.mark.parametrize("name", ALL + V41)
def test_every_recipe_writes_its_request_limit_with_a_why(name):
    recipe = load_recipe(name)
    assert isinstance(recipe.flag_value("--max-running-requests"), int), name
    why = recipe.flags["--max-running-requests"].why
    graph = recipe.flag_value("--cuda-graph-max-bs-decode")
    rank = recipe.max_running_requests // attention_dp(recipe)
    if isinstance(graph, int) and graph < rank:
        # the decode graphs stop short of a rank's batch: the why must say so
        assert "without a graph" in why, (name, why)


@pytest.mark.parametrize("name", ALL)
def test_verify_floor_is_below_every_published_acceptance(name):
    recipe = load_recipe(name)
    published = [r.accept_length for r in recipe.references if r.accept_length]
    assert all(recipe.verify.min_accept_length < a for a in published)
    assert 1.0 < recipe.verify.min_accept_length <= recipe.dspark.block_size + 1


def test_load_by_path(tmp_path):
    from tests.support.cli import raw_recipe, write_recipe

    path = write_recipe(tmp_path, raw_recipe("rtx-pro-6000-tp2"))
    assert load_recipe(path).name == "rtx-pro-6000-tp2"
