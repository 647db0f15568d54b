"""Where a doc speaks of sglang's default for a setting a recipe states a default for
(`sglang_default`, `sglang_defaults`: the lint default-claim), it says the value the
recipe states, which the wheels suite holds to sglang's own resolution
(tests/unit/test_sglang_validates_recipes.py). A doc cannot then keep a default that
sglang contradicts once the recipes say otherwise."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sm12x.recipe import load_all
from sm12x.recipe.lints import claimed_defaults

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md"])

_DEFAULT = re.compile(r"(?<![A-Za-z0-9_])defaults?(?![A-Za-z0-9_])", re.IGNORECASE)
_NAME = re.compile(r"(?<![A-Za-z0-9_-])(--[a-z0-9][a-z0-9-]*|[A-Z][A-Z0-9]*_[A-Z0-9_]+)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(*])")


def _claims() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for recipe in load_all():
        for name, value in claimed_defaults(recipe).items():
            out.setdefault(name, set()).add(str(value).lower())
    return out


def _sentences(text: str):
    # paragraphs and table cells, then sentences
    for block in re.split(r"\n\s*\n|\|", text):
        yield from _SENTENCE_END.split(" ".join(block.split()))


def contradictions(text: str, claims: dict[str, set[str]]) -> list[str]:
    found = []
    for sentence in _sentences(text):
        if not _DEFAULT.search(sentence):
            continue
        for name in dict.fromkeys(_NAME.findall(sentence)):
            values = claims.get(name)
            if values and not any(
                re.search(rf"(?<![\w.]){re.escape(v)}(?![\w])", sentence.lower()) for v in values
            ):
                found.append(
                    f"{name}: the recipes state sglang's default as {' or '.join(sorted(values))}, "
                    f"this sentence does not: {sentence[:200]}"
                )
    return found


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_docs_state_the_defaults_the_recipes_state(doc):
    assert contradictions(doc.read_text(encoding="utf-8"), _claims()) == []


def test_a_doc_with_another_default_is_caught():
    claims = {"--max-running-requests": {"256"}, "--swa-full-tokens-ratio": {"0.1"}}
    wrong = contradictions(
        "Without --max-running-requests DSPARK's default 48 applies. The ratio "
        "`--swa-full-tokens-ratio` defaults to 0.8 here. With --max-running-requests "
        "unset sglang's default is 256.",
        claims,
    )
    assert len(wrong) == 2, wrong
    assert wrong[0].startswith("--max-running-requests: the recipes state") and "48" in wrong[0]
    assert "0.8" in wrong[1]
