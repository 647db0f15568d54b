"""Recipe files judged by sglang's parser as the flags after -- are (issue 30):
what sglang keeps (a prefix expanded, an alias resolved, the last of a
repeated dest) is what the lints see."""

from __future__ import annotations

import pytest
import yaml

from tests.support.cli import assert_one_clear_error, raw_recipe, run_sm12x


def _render(tmp_path, recipe: str, flags: dict, drop: tuple[str, ...] = ()):
    data = raw_recipe(recipe)
    for name in drop:
        data["flags"].pop(name, None)
    for name, value in flags.items():
        entry = {"why": "a bad input to refuse"}
        if value is not None:
            entry["value"] = value
        data["flags"][name] = entry
    path = tmp_path / f"{recipe}-judged.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return run_sm12x("render", str(path))


def test_a_prefix_of_a_refused_flag_is_refused(tmp_path):
    # sglang expands --weight-loader-disable to --weight-loader-disable-mmap,
    # which hangs unified-memory hosts.
    result = _render(tmp_path, "dgx-spark-tp2", {"--weight-loader-disable": None})
    assert_one_clear_error(
        result, "--weight-loader-disable is --weight-loader-disable-mmap", "weight-loader-mmap"
    )


def test_a_second_spelling_of_a_dest_is_refused(tmp_path):
    # --tensor-parallel (a prefix of --tensor-parallel-size) after --tp-size: sglang
    # keeps the last, 2, while the lints would read 4.
    result = _render(tmp_path, "rtx-pro-6000-tp4", {"--tensor-parallel": 2})
    assert_one_clear_error(
        result, "flags.--tensor-parallel sets what flags.--tp-size sets", "tp_size"
    )


@pytest.mark.parametrize("recipe", ["rtx-pro-6000-tp4", "dgx-spark-tp2"])
def test_a_prefix_of_the_graph_batch_flag_is_linted(tmp_path, recipe):
    result = _render(
        tmp_path, recipe, {"--cuda-graph-max-bs-dec": 99999}, drop=("--cuda-graph-max-bs-decode",)
    )
    assert_one_clear_error(
        result, "--cuda-graph-max-bs-dec is --cuda-graph-max-bs-decode", "cuda-graph"
    )


def test_an_alias_of_a_rendered_flag_is_refused(tmp_path):
    result = _render(tmp_path, "rtx-pro-6000-tp4", {"--model": "/elsewhere"})
    line = assert_one_clear_error(result)
    assert "model_path" in line or "--model-path" in line, line


def test_the_recipes_as_shipped_still_render():
    for recipe, track in (
        ("rtx-pro-6000-tp4", "pinned"),
        ("dgx-spark-tp2", "pinned"),
        ("rtx-pro-6000-tp8-v41", "current"),
    ):
        result = run_sm12x("render", recipe, env={"SM12X_TRACK": track})
        assert result.returncode == 0, (recipe, result.stderr)
