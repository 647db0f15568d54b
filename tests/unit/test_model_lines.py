"""The model lines as data: what each needs from sglang, read from the real wheels,
the memory arithmetic behind the support matrix, and verify's pictures."""

from __future__ import annotations

import ast
import io
import json
import zipfile
from pathlib import Path

import pytest

from sm12x.launch import gpus as gpu_query
from sm12x.mock import wheels
from sm12x.recipe import fit, load_all, load_recipe
from sm12x.recipe.lines import LINES, V4_FLASH_0731, V41_FLASH, serves
from sm12x.recipe.matrix import FIELD_RIGS, lines_table
from verify import images

V41_FILES = ("sglang/srt/configs/deepseek_v41.py",)


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17", "0.5.18", "0.5.23"])
def test_the_first_sglang_of_each_line_is_read_from_the_wheels(version):
    with zipfile.ZipFile(wheels.wheel("sglang", version)) as archive:
        names = archive.namelist()
    has_v41 = all(f in names for f in V41_FILES)
    assert has_v41 == serves(V41_FLASH, version)
    assert serves(V4_FLASH_0731, version)
    if not has_v41:
        assert not [n for n in names if "v41" in n.lower()], (
            "V4.1 code in a release said to lack it"
        )


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"


def _source(member: str, version: str = "0.5.23") -> str:
    with zipfile.ZipFile(wheels.wheel("sglang", version)) as archive:
        return archive.read(member).decode()


def test_v41_s_architectures_and_parsers_are_0_5_23_s():
    config = _source("sglang/srt/configs/deepseek_v41.py")
    assert 'model_type = "deepseek_v41"' in config and V41_FLASH.model_type == "deepseek_v41"
    # only the CausalLM spelling is mapped onto the V4 model class
    assert '["DeepseekV41ForCausalLM"]' in config
    assert "DeepseekV41ForConditionalGeneration" not in config
    model = ast.parse(_source("sglang/srt/models/deepseek_v4.py"))
    entry = next(
        n
        for n in model.body
        if isinstance(n, ast.Assign)
        and any(getattr(t, "id", None) == "EntryClass" for t in n.targets)
    )
    assert [e.id for e in entry.value.elts] == ["DeepseekV4ForCausalLM"]
    adapters = _source("sglang/srt/entrypoints/openai/chat_encoding_adapters.py")
    for line, spec in ((V4_FLASH_0731, "dsv4"), (V41_FLASH, "dsv41")):
        assert f'"{spec}": ("{line.reasoning_parser}", "{line.tool_call_parser}")' in adapters


def test_the_refusals_the_lints_name_are_0_5_23_s():
    from sm12x.recipe.lints import V4_REFUSED_FLAGS, V41_REFUSED_FLAGS

    hook = _source("sglang/srt/arg_groups/deepseek_v4_hook.py")
    for what in V41_REFUSED_FLAGS.values():
        assert f'"{what}"' in hook, what
    assert '"pipeline parallelism"' in hook
    assert '"--enable-encoder-swa-bounded-replay requires DeepSeek-V4.1"' in hook
    assert set(V4_REFUSED_FLAGS) == {"--enable-encoder-swa-bounded-replay"}


def test_the_weights_figure_agrees_with_sglang_s_own():
    # fit reads the published checkpoint's bytes and the fixture's engram rows; sglang's
    # own V4.1 test states the same in round figures (~189 GiB engram, ~143 GiB/GPU at TP2)
    test = _source("sglang/test/dsv41_flash_common.py")
    assert "~189 GiB in FP8" in test and "~143 GiB/GPU" in test
    weights = fit.WEIGHTS["v4.1-flash"]
    assert round(weights.engram_gib) == 189
    assert round(weights.dense_gib / 2) == 143
    assert round(weights.engram_gib + weights.dense_gib, 1) == 475.2
    config = json.loads((FIXTURES / "DeepSeek-V4.1-Flash" / "config.json").read_text())
    assert tuple(config["text_config"]["engram_num_embeddings"]) == fit.V41_ENGRAM_ROWS
    # 264 B a row: engram_head_dim FP8 values and one UE8M0 scale per 32 of them
    assert config["text_config"]["engram_head_dim"] * (1 + 1 / 32) == fit.ENGRAM_ROW_BYTES


def test_every_shipped_recipe_fits_its_line():
    for recipe in load_all():
        verdict = fit.judge(
            recipe.model.model_line, recipe.hardware, engram_on_gpu=fit.engram_on_gpu(recipe)
        )
        assert verdict.fits, recipe.name
        assert fit.kv_budget_gib(recipe) > 0, recipe.name


def test_v41_fits_the_8_gpu_rtx_pro_6000_rig_and_4_with_host_engram():
    rigs = {(r.hardware.gpu, r.hardware.total_gpus): r.hardware for r in load_all()}
    rigs.update({(h.gpu, h.total_gpus): h for h in FIELD_RIGS})
    fits = {key for key, hw in rigs.items() if fit.judge(V41_FLASH, hw).fits}
    assert fits == {("rtx-pro-6000", 8)}
    on_host = {
        key for key, hw in rigs.items() if fit.judge(V41_FLASH, hw, engram_on_gpu=False).fits
    }
    assert on_host == {("rtx-pro-6000", 4), ("rtx-pro-6000", 8)}
    tp4 = load_recipe("rtx-pro-6000-tp4-v41")
    assert not fit.engram_on_gpu(tp4)
    assert round(fit.judge(V41_FLASH, tp4.hardware, engram_on_gpu=False).per_gpu_gib, 1) == 71.6
    spark4 = fit.judge(V41_FLASH, FIELD_RIGS[0])
    # unified memory: the host-table trick saves nothing there
    assert not fit.judge(V41_FLASH, FIELD_RIGS[0], engram_on_gpu=False).fits
    assert round(spark4.per_gpu_gib, 1) == 118.8


def test_the_matrix_says_where_v41_does_not_fit_and_why():
    table = lines_table(load_all())
    assert "`rtx-pro-6000-tp8-v41` (16 requests, the checkpoint's context" in table
    assert "`rtx-pro-6000-tp4-v41` (8 requests, context 409,600" in table
    assert "71.6 GiB of weights per GPU (286 GiB, engram tables in host memory / 4)" in table
    assert table.count("**does not fit**") == 4
    assert "118.8 GiB of weights per GPU (475 GiB, engram tables included / 4)" in table
    assert "0xSero/local-ai-registry#55" in table


def test_auto_never_picks_another_line():
    # 8 RTX PRO 6000 cards: the V4.1 recipe uses all 8, yet auto keeps to 0731's rig
    found = [
        gpu_query.Gpu(
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            compute_capability="12.0",
            memory_mib=97887,
            driver="580.95",
        )
        for _ in range(8)
    ]
    pick = gpu_query.pick_recipe(found, load_all())
    assert pick.recipe.model.line == "v4-flash-0731"
    assert load_recipe("rtx-pro-6000-tp8-v41").model.line == "v4.1-flash"
    # ... and says how V4.1 runs here: named, its own recipe
    assert "DeepSeek-V4.1-Flash runs here only when named: SM12X_RECIPE=rtx-pro-6000-tp8-v41" in (
        pick.reason
    )


def _cards(name: str, count: int, memory_mib: int | None) -> list:
    return [gpu_query.Gpu(name, "12.0", memory_mib, "580.95") for _ in range(count)]


def test_auto_says_where_v41_cannot_run():
    recipes = load_all()
    four = gpu_query.pick_recipe(
        _cards("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 4, 97887), recipes
    )
    assert "SM12X_RECIPE=rtx-pro-6000-tp4-v41" in four.reason
    two = gpu_query.pick_recipe(
        _cards("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 2, 97887), recipes
    )
    assert "DeepSeek-V4.1-Flash cannot be served here: 237.6 GiB of weights per GPU" in two.reason
    eight = gpu_query.pick_recipe(_cards("NVIDIA GeForce RTX 5090", 8, 32607), recipes)
    assert "DeepSeek-V4.1-Flash cannot be served here" in eight.reason
    assert "25.6 GiB usable" in eight.reason


def test_lines_are_named_once():
    assert set(LINES) == {"v4-flash-0731", "v4.1-flash"}
    for line in LINES.values():
        assert line.hf_ids and line.architectures


# --- verify's pictures ----------------------------------------------------------------


@pytest.mark.parametrize("scene", images.SCENES, ids=lambda s: s.name)
def test_the_pictures_are_valid_pngs_with_their_answer(scene):
    from PIL import Image

    from sm12x.mock import vision

    picture = Image.open(io.BytesIO(images.png(scene)))
    picture.load()
    assert picture.size == (scene.width, scene.height) and picture.mode == "RGB"
    first = scene.shapes[0]
    assert picture.getpixel((first.x, first.y)) == images.COLOURS[first.colour]
    assert picture.getpixel((0, 0)) == images.WHITE
    # the stand-in's eyes read the same count the scene says
    assert vision.count(picture.convert("RGB"), scene.colour, scene.kind) == scene.answer()
    assert vision.answer(scene.question, [images.data_url(scene)]) == f"ANSWER: {scene.answer()}"
    assert (
        vision.answer(scene.question, [images.data_url(scene)], blind=True)
        != f"ANSWER: {scene.answer()}"
    )


def test_the_scenes_have_different_answers():
    assert len({s.answer() for s in images.SCENES}) == len(images.SCENES)


def test_the_v41_stand_in_s_tokenizer_agrees_with_the_published_config():
    # verify's exact tasks and tool checks run against the stand-in's V4.1 tokenizer
    # (sm12x/mock/tokenizer_v41.py); its special ids are the checkpoint config's
    from sm12x.mock import tokenizer_v41

    config = json.loads((FIXTURES / "DeepSeek-V4.1-Flash" / "config.json").read_text())
    tok = tokenizer_v41.load()
    assert (tok.bos_token_id, tok.eos_token_id) == (config["bos_token_id"], config["eos_token_id"])
    assert tok.convert_ids_to_tokens(config["image_token_id"]) == "<｜deepseek_image｜>"
    assert config["text_config"]["vocab_size"] <= len(tok)
