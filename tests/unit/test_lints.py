"""Every lint fires on a failing example, with a message that says what to do."""

from __future__ import annotations

import pytest

from sm12x.recipe import Recipe, RecipeError, lint_recipe
from sm12x.recipe.lints import LINTS
from sm12x.recipe.load import validate_recipe
from support.cli import raw_recipe


def build(mutate, base: str = "rtx-pro-6000-tp4") -> Recipe:
    data = raw_recipe(base)
    mutate(data)
    return validate_recipe(data, "case.yaml")


def set_flag(name, value=None, why="a reason long enough to pass"):
    def mutate(data):
        entry = {"why": why} if value is None else {"value": value, "why": why}
        data["flags"][name] = entry

    return mutate


def drop_flag(name):
    return lambda data: data["flags"].pop(name)


def set_env(name, value):
    return lambda data: data["env"].__setitem__(
        name, {"value": value, "why": "a reason long enough"}
    )


def both(*mutations):
    def mutate(data):
        for m in mutations:
            m(data)

    return mutate


def depth(size, ack=None):
    def mutate(data):
        data["dspark"]["block_size"] = size
        if ack is not None:
            data["dspark"]["acknowledge_block_size_5"] = ack

    return mutate


# (code, level, mutation, base recipe, words the message must contain)
CASES = [
    (
        "dspark-depth-5",
        "error",
        depth(5),
        "rtx-pro-6000-tp4",
        ["block_size 5 corrupts", "use 4", "acknowledge_block_size_5"],
    ),
    (
        "dspark-depth-5",
        "warning",
        depth(4, ack="reproducing the depth-5 bug on purpose"),
        "rtx-pro-6000-tp4",
        ["no effect", "remove it"],
    ),
    (
        "kv-cache-dtype",
        "error",
        set_flag("--kv-cache-dtype", "bf16"),
        "rtx-pro-6000-tp4",
        ["'bf16'", "fp8_e4m3", "crash-loops"],
    ),
    (
        "kv-cache-dtype",
        "error",
        drop_flag("--kv-cache-dtype"),
        "rtx-5090-tp8",
        ["missing", "set flags.--kv-cache-dtype.value: fp8_e4m3"],
    ),
    (
        "moe-runner-backend",
        "error",
        set_flag("--moe-runner-backend", "triton"),
        "rtx-pro-6000-tp2",
        ["'triton'", "flashinfer_mxfp4", "hidden-size mismatch"],
    ),
    (
        "moe-runner-backend",
        "error",
        drop_flag("--moe-runner-backend"),
        "dgx-spark-tp2",
        ["missing", "set flags.--moe-runner-backend.value: flashinfer_mxfp4"],
    ),
    (
        "tp-size",
        "error",
        set_flag("--tp-size", 2),
        "rtx-pro-6000-tp4",
        ["--tp-size is 2", "4 GPU(s) per node x 1 node(s)", "set it to 4"],
    ),
    (
        "tp-size",
        "error",
        set_flag("--tp-size", 1),
        "dgx-spark-tp2",
        ["1 GPU(s) per node x 2 node(s)", "set it to 2"],
    ),
    ("tp-size", "error", drop_flag("--tp-size"), "rtx-5090-tp8", ["missing", "set it to 8"]),
    (
        "cuda-graph-bs",
        "error",
        set_flag("--cuda-graph-max-bs-decode", 64),
        "dgx-spark-tp2",
        ["64 exceeds --max-running-requests (32)", "at most 32"],
    ),
    (
        "cuda-graph-bs",
        "error",
        set_flag("--cuda-graph-max-bs-decode", 96),
        "rtx-pro-6000-tp4",
        ["DSPARK default", "(48)"],
    ),
    (
        "flashmla-triton",
        "warning",
        set_env("SGLANG_SM120_FLASHMLA_BACKEND", "triton"),
        "rtx-5090-tp8",
        ["costs throughput", "not needed", "remove it"],
    ),
    (
        "weight-loader-mmap",
        "error",
        set_flag("--weight-loader-disable-mmap"),
        "dgx-spark-tp2",
        ["hangs unified-memory hosts", "remove it"],
    ),
    (
        "derived-flag",
        "error",
        set_flag("--speculative-dspark-block-size", 5),
        "rtx-pro-6000-tp4",
        ["rendered from dspark.block_size", "remove it from flags"],
    ),
    (
        "derived-flag",
        "error",
        set_flag("--nnodes", 2),
        "dgx-spark-tp2",
        ["rendered from hardware.nodes"],
    ),
    (
        "flag-spelling",
        "error",
        both(drop_flag("--tp-size"), set_flag("--tensor-parallel-size", 4)),
        "rtx-pro-6000-tp4",
        ["write --tp-size"],
    ),
    (
        "retired-env",
        "warning",
        set_env("SGLANG_ENABLE_SPEC_V2", "1"),
        "rtx-pro-6000-tp4",
        ["removed", "drop it"],
    ),
    (
        "retired-env",
        "warning",
        set_env("SGLANG_ENABLE_THINKING", "1"),
        "rtx-pro-6000-tp4",
        ["SGLANG_DEFAULT_THINKING"],
    ),
]


def test_every_lint_has_a_failing_example():
    assert {code for code, *_ in CASES} == set(LINTS)


@pytest.mark.parametrize(
    "code, level, mutate, base, words", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_lint_fires_with_actionable_message(code, level, mutate, base, words):
    findings = [f for f in lint_recipe(build(mutate, base)) if f.code == code]
    assert findings, f"{code} did not fire"
    assert findings[0].level == level
    for word in words:
        assert word in findings[0].message, findings[0].message


def test_depth_5_passes_with_an_acknowledgement():
    recipe = build(depth(5, ack="reproducing the depth-5 corruption on purpose"))
    assert [f for f in lint_recipe(recipe) if f.code == "dspark-depth-5"] == []


def test_mmap_flag_is_not_a_lint_error_on_discrete_gpus():
    recipe = build(set_flag("--weight-loader-disable-mmap"), "rtx-pro-6000-tp4")
    assert [f for f in lint_recipe(recipe) if f.code == "weight-loader-mmap"] == []


def test_errors_come_before_warnings():
    recipe = build(both(set_env("SGLANG_ENABLE_SPEC_V2", "1"), set_flag("--tp-size", 3)))
    levels = [f.level for f in lint_recipe(recipe)]
    assert levels == sorted(levels, key=lambda level: level != "error")


def test_load_refuses_a_recipe_with_lint_errors(tmp_path):
    from sm12x.recipe import load_recipe
    from support.cli import write_recipe

    data = raw_recipe("rtx-pro-6000-tp4")
    depth(5)(data)
    path = write_recipe(tmp_path, data)
    with pytest.raises(RecipeError, match=r"error\[dspark-depth-5\]"):
        load_recipe(path)
    assert load_recipe(path, lint=False).dspark.block_size == 5
