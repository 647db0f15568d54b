"""The V4.1 tokenizer the tests derive from V4's (tests/support/tokenizer_v41.py):
every special token V4.1's encoder writes is one token, the image token has the id
deepseek-recipe gives images, and V4's text vocabulary is unchanged."""

from __future__ import annotations

from sm12x.mock import tokenizer_v4, tokenizer_v41

# What deepseek-recipe 0.2.0's DeepseekV41Encoding writes (SpecialToken.default_str(),
# with sglang's image spelling), and the DSML token of its tool-call block.
SPECIALS = [
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<think>",
    "</think>",
    "<｜System｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜latest_reminder｜>",
    "｜DSML｜",
    tokenizer_v41.IMAGE_TOKEN,
    "<｜ref｜>",
    "<｜/ref｜>",
    "<｜box｜>",
    "<｜/box｜>",
]


def test_every_special_token_of_v41_s_encoder_is_one_token():
    tok = tokenizer_v41.load()
    for text in SPECIALS:
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == 1, (text, ids)
    assert tok.convert_tokens_to_ids(tokenizer_v41.IMAGE_TOKEN) == tokenizer_v41.IMAGE_TOKEN_ID


def test_v4_lacks_exactly_what_is_added():
    v4 = tokenizer_v4.load()
    missing = [t for t in SPECIALS if len(v4.encode(t, add_special_tokens=False)) != 1]
    assert missing == ["<｜System｜>", tokenizer_v41.IMAGE_TOKEN]


def test_text_round_trips_as_in_v4():
    v4, v41 = tokenizer_v4.load(), tokenizer_v41.load()
    text = 'Überprüfe 東京 😀 <｜DSML｜ calls>\n<｜DSML｜ invoke name="f">x</｜DSML｜ invoke>'
    assert v41.encode(text, add_special_tokens=False) == v4.encode(text, add_special_tokens=False)
    assert v41.decode(v41.encode(text, add_special_tokens=False)) == text
    assert (v41.bos_token_id, v41.eos_token_id) == (v4.bos_token_id, v4.eos_token_id)
