"""Bad recipes give one clear error line and a non-zero exit, through the real CLI."""

from __future__ import annotations

import pytest

from sm12x.recipe import RecipeError
from sm12x.recipe.load import validate_recipe
from tests.support.cli import assert_one_clear_error, raw_recipe, run_sm12x, write_recipe


def test_bad_yaml(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nhardware:\n  gpu: rtx-5090\n   nodes: 2\n")
    line = assert_one_clear_error(
        run_sm12x("render", str(path)), "broken.yaml:4:", "not valid YAML"
    )
    assert line.startswith("sm12x render: error: ")


def test_yaml_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    assert_one_clear_error(run_sm12x("render", str(path)), "a recipe is a YAML mapping")


def test_unknown_key_names_the_key_and_the_allowed_ones(tmp_path):
    data = raw_recipe("rtx-pro-6000-tp4")
    data["hardware"]["gpu_count"] = 4
    path = write_recipe(tmp_path, data)
    assert_one_clear_error(
        run_sm12x("render", str(path)),
        "hardware.gpu_count: unknown key",
        "allowed here: gpu, compute_capability, gpus_per_node",
    )


def test_unknown_key_inside_a_flag(tmp_path):
    data = raw_recipe("rtx-pro-6000-tp4")
    data["flags"]["--tp-size"]["reason"] = "typo for why"
    path = write_recipe(tmp_path, data)
    assert_one_clear_error(
        run_sm12x("render", str(path)),
        "flags.--tp-size.reason: unknown key",
        "allowed here: value, sglang_default, why",
    )


def test_wrong_tp(tmp_path):
    data = raw_recipe("rtx-pro-6000-tp4")
    data["flags"]["--tp-size"]["value"] = 8
    path = write_recipe(tmp_path, data)
    assert_one_clear_error(run_sm12x("render", str(path)), "error[tp-size]", "set it to 4")


def test_missing_recipe():
    result = run_sm12x("render", "rtx-9090-tp2")
    assert_one_clear_error(result, "no recipe named 'rtx-9090-tp2'", "rtx-pro-6000-tp4")


def test_missing_recipe_file(tmp_path):
    assert_one_clear_error(run_sm12x("render", str(tmp_path / "nope.yaml")), "does not exist")


def test_missing_recipe_through_launch():
    result = run_sm12x("launch", "--dry-run", env={"SM12X_RECIPE": "nope"})
    assert_one_clear_error(result, "no recipe named 'nope'")


def test_flag_written_twice(tmp_path):
    # Plain YAML would keep the second one silently.
    source = write_recipe(tmp_path, raw_recipe("rtx-pro-6000-tp4")).read_text()
    path = tmp_path / "twice.yaml"
    path.write_text(
        source.replace(
            "flags:\n", "flags:\n  --tp-size:\n    value: 2\n    why: written twice on purpose\n", 1
        )
    )
    assert_one_clear_error(
        run_sm12x("render", str(path)), "'--tp-size' is written twice", "keep one"
    )


def test_missing_required_section(tmp_path):
    data = raw_recipe("rtx-5090-tp8")
    del data["dspark"]
    path = write_recipe(tmp_path, data)
    assert_one_clear_error(run_sm12x("render", str(path)), "dspark: required key is missing")


def test_name_must_match_the_file_for_shipped_recipes(tmp_path, monkeypatch):
    from sm12x.recipe import load as load_module

    data = raw_recipe("rtx-5090-tp8")
    data["name"] = "other"
    write_recipe(tmp_path, data, "rtx-5090-tp8.yaml")
    monkeypatch.setattr(load_module, "recipes_dir", lambda: tmp_path)
    with pytest.raises(RecipeError, match="make them the same"):
        load_module.load_recipe("rtx-5090-tp8")


# --- model rules (one message each) ------------------------------------------


def _invalid(mutate, *words):
    data = raw_recipe("dgx-spark-tp2")
    mutate(data)
    with pytest.raises(RecipeError) as info:
        validate_recipe(data, "case.yaml")
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_env_needs_exactly_one_source():
    _invalid(lambda d: d["env"]["NCCL_NET"].update(from_host=True), "set exactly one of `value`")


def test_env_values_are_strings():
    _invalid(lambda d: d["env"]["NCCL_NET"].update(value=1), "env.NCCL_NET.value", "string")


def test_a_switch_takes_no_boolean():
    _invalid(
        lambda d: d["flags"]["--enable-metrics"].update(value=True), "flags.--enable-metrics.value"
    )


def test_a_why_is_a_reason():
    _invalid(
        lambda d: d["flags"]["--tp-size"].update(why="tp"), "flags.--tp-size.why", "at least 12"
    )


def test_verified_names_who_and_when():
    _invalid(lambda d: d["status"].update(state="verified"), "verified_by and verified_on")


def test_multinode_section_goes_with_nodes():
    _invalid(lambda d: d.pop("multinode"), "add a `multinode` section")


def test_container_settings_are_explained():
    _invalid(lambda d: d["container"].pop("why"), "say `why`")


def test_gpu_vocabulary_is_fixed():
    _invalid(lambda d: d["hardware"].update(gpu="h100"), "hardware.gpu", "'rtx-pro-6000'")


def test_flag_names_are_long_options():
    _invalid(
        lambda d: d["flags"].update({"tp-size": {"value": 2, "why": "missing the dashes"}}),
        "flags.tp-size",
    )
