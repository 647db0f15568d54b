"""Faults that only ground truth catches: wrong tokens in fluent text.

What a stale or wrong DSPARK verify row does to output is not a loop: a few
tokens are wrong and the text around them stays fluent. The repetition
detectors cannot see these; exact tasks, the non-word detector and the
speculative on/off comparison can.

- `substitute`: under load, each word (or number) is swapped with
  probability RATE (about 4%) for another plausible one: a different word of
  the same text, a different number of as many digits.
- `nonword`: under load, every `every`-th request has part of one channel
  turned into salad made of pronounceable non-words (many distinct ones, so
  distinct-word and compression statistics stay healthy).
- `drift`: what healthy speculative decoding looks like next to the same
  model without it: about half of the free-form answers (code, table,
  list, prose) take another path late in the text (a near-tie resolved the
  other way), then go on fluently. Answers with one right answer (a copy, a
  number) have no near-ties and never drift.

`apply` is the one entry point the server calls, after the scripted model
wrote its answer.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from sm12x.mock import model

RATE = 0.04
DRIFT_SHARE = 2  # one free-form answer in DRIFT_SHARE drifts
SYLLABLES = [
    "bra",
    "nto",
    "vel",
    "qua",
    "xor",
    "zun",
    "dle",
    "tri",
    "mop",
    "fen",
    "sko",
    "rik",
    "plo",
    "dre",
    "vun",
    "gal",
    "tes",
    "mir",
    "kov",
    "lun",
    "sap",
    "ero",
    "ith",
    "ump",
    "zel",
    "grob",
    "fay",
    "nix",
    "quo",
    "bli",
]
FAULTS = {
    "substitute": "under load, ~4% of words swapped for other plausible words (a wrong verify row)",
    "nonword": "under load, every 8th request turns partly into salad of non-words",
    "drift": "half of the free-form answers part late in the text (spec on/off numerics)",
}
_WORD = re.compile(r"[A-Za-z]{3,}|\d+")
DRIFT_TAIL = (
    "That said, the details depend on the deployment, so measure before you tune "
    "anything and keep the first report as a baseline for later runs."
)


def substitute(text: str, rng: random.Random, rate: float = RATE) -> str:
    """Each word swapped with probability `rate` for another word of the text
    (case kept), each number for another of as many digits."""
    vocabulary = sorted({w.lower() for w in re.findall(r"[A-Za-z]{3,}", text)})

    def swap(match: re.Match) -> str:
        word = match.group()
        if rng.random() >= rate:
            return word
        if word.isdigit():
            digits = [str(rng.randrange(10)) for _ in word]
            if len(word) > 1 and digits[0] == "0":
                digits[0] = "1"
            new = "".join(digits)
            return new if new != word else str((int(word) + 1) % 10 ** len(word)).zfill(len(word))
        others = [w for w in vocabulary if w != word.lower()] or ["the"]
        new = rng.choice(others)
        return new.capitalize() if word[0].isupper() else new

    return _WORD.sub(swap, text)


def nonword_salad(rng: random.Random, words: int) -> str:
    return " ".join(
        "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))) for _ in range(words)
    )


def drift(text: str, rng: random.Random) -> str:
    """Another path from a point in the last third of the text on."""
    cuts = [m.start() for m in re.finditer(r"\s", text) if m.start() >= 2 * len(text) // 3]
    if len(text) < 80 or not cuts:
        return text
    return text[: rng.choice(cuts)] + " " + DRIFT_TAIL


def _arguments(call, change) -> None:
    for key, value in list(call.arguments.items()):
        if isinstance(value, str):
            call.arguments[key] = change(value)
        elif isinstance(value, list):
            call.arguments[key] = [change(v) if isinstance(v, str) else v for v in value]
        elif isinstance(value, int) and not isinstance(value, bool):
            new = change(str(value))
            call.arguments[key] = int(new) if new.isdigit() else value


def apply(gen, faults: set[str], *, seed: int, loaded: bool, nth: bool):
    """The generation with the active faults of this module applied.

    loaded: enough requests in flight for load-only faults; nth: this is one
    of the every-th requests.
    """
    rng = random.Random(seed)
    free_form = gen.content in (model.CODE, model.TABLE, model.LIST, model.PROSE)
    if "drift" in faults and seed % DRIFT_SHARE == 0 and free_form:
        gen = replace(gen, content=drift(gen.content, rng))
    if "substitute" in faults and loaded:
        change = lambda text: substitute(text, rng)  # noqa: E731
        gen = replace(
            gen,
            content=change(gen.content),
            reasoning=None if gen.reasoning is None else change(gen.reasoning),
        )
        for call in gen.calls:
            _arguments(call, change)
        gen.corrupted = "substitute"
    if "nonword" in faults and loaded and nth:
        salad = nonword_salad(rng, 120)
        if gen.calls:
            call = gen.calls[0]
            key = next((k for k, v in call.arguments.items() if isinstance(v, str)), "note")
            call.arguments[key] = str(call.arguments.get(key, "")) + " " + salad
        elif gen.reasoning is not None and seed % 2:
            gen = replace(gen, reasoning=gen.reasoning + " " + salad)
        else:
            gen = replace(gen, content=gen.content[: len(gen.content) // 3] + " " + salad)
        gen.corrupted = "nonword"
    return gen
