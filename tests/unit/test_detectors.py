"""Calibration of the degeneration detectors: healthy outputs that are
repetitive by nature must not fire; loops and salad must."""

import json
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sm12x.mock import corruption, model  # noqa: E402
from verify import detectors as d  # noqa: E402
from verify import exact  # noqa: E402

HEALTHY_INLINE = {
    "markdown rules": "Results\n=======\n\n" + "-" * 80 + "\n" + "=" * 80 + "\nDone.\n",
    "table separators": "| a | b | c | d | e | f | g | h |\n|---|---|---|---|---|---|---|---|\n"
    + "".join(
        f"| {i} | {i * 2} | {i * 3} | {i * 4} | {i * 5} | {i * 6} | {i * 7} | {i * 8} |\n"
        for i in range(30)
    ),
    "closing braces": "function f() {\n  if (a) {\n    if (b) {\n      return 1;\n    }\n  }\n}\n"
    * 3,
    "numbered list": "".join(
        f"{i}. Step {i}: configure item number {i} and check it.\n" for i in range(1, 40)
    ),
    "json array": "["
    + ", ".join(f'{{"id": {i}, "name": "user{i}", "active": true}}' for i in range(60))
    + "]",
    "csv": "date,open,close\n"
    + "".join(f"2026-01-{i:02d},{100 + i}.5,{101 + i}.25\n" for i in range(1, 31)),
}


FIXTURES = ROOT / "tests" / "fixtures" / "detectors"


def _jsonl(name: str) -> dict[str, str]:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    return {f"{name}:{r['name']}": r["text"] for r in map(json.loads, lines)}


def healthy_samples() -> dict[str, str]:
    """A fixed corpus (tests/fixtures/detectors, README.md there): the fake
    model's own answers, model-style answers (reasoning, markdown with
    symbols and emoji, maths with Greek letters and units, accented names,
    JSON, logs, code) and a snapshot of this repository's code and docs."""
    samples = dict(HEALTHY_INLINE)
    samples.update(
        {
            "fake code": model.CODE,
            "fake table": model.TABLE,
            "fake list": model.LIST,
            "fake prose": model.PROSE,
        }
    )
    samples.update(_jsonl("model-style.jsonl"))
    samples.update(_jsonl("repo-snapshot.jsonl"))
    samples.update({f"exact answer {k}": t.expected for k, t in exact.TASKS.items()})
    return samples


def degenerate_samples() -> dict[str, str]:
    out = {
        "phrase loop": "The answer is " + "the answer is the answer and " * 20,
        "reasoning loop": "Let me think. " + "Wait, let me reconsider the problem. " * 12,
        "line loop": "Plan:\n" + "- check the configuration of the server\n" * 15,
        "code loop": "def f():\n" + "    x = compute(x)\n    y = compute(y)\n" * 15,
        "cut mid-unit": "Sure. " + "of the model " * 10 + "of th",
        "json args loop": '{"path": "a.py", "content": "' + "import os\\n" * 30 + '"}',
    }
    rng = random.Random(1)
    for n in range(5):
        out[f"salad {n}"] = " ".join(rng.choice(model.SALAD_WORDS) for _ in range(160))
    return out


# Wrong tokens in fluent text: what only the token-level detectors see.
PROSE = model.PROSE


def corrupted_samples() -> dict[str, tuple[str, str]]:
    """name -> (text, the detector that must fire)."""
    rng = random.Random(2)
    glued = " ".join(
        "".join(
            rng.choice(
                ["ment", "ation", "ingly", "ness", "ered", "oid", "tric", "ulp", "quen", "flor"]
            )
            for _ in range(3)
        )
        for _ in range(60)
    )
    return {
        "replacement char": (PROSE[:120] + "\ufffd\ufffd" + PROSE[120:], "broken_utf8"),
        "one replacement char": (PROSE.replace("throughput", "through\ufffdput"), "broken_utf8"),
        "lone surrogate": (PROSE[:90] + "\ud83d" + PROSE[90:], "broken_utf8"),
        "mojibake": (PROSE.replace("draft", "drÃ¤ft").replace("model", "modÃ©l"), "broken_utf8"),
        "han token": (PROSE.replace("one forward pass", "one 的 forward pass"), "script_switch"),
        "cyrillic word": (PROSE.replace("the output", "the выход output"), "script_switch"),
        "hangul in code": (model.CODE.replace("sequence.append", "sequence.추가"), "script_switch"),
        "greek word": (PROSE.replace("draft", "προσχέδιο"), "script_switch"),
        "syllable salad": (PROSE[:150] + " " + corruption.nonword_salad(rng, 80), "nonwords"),
        "glued fragments": (PROSE[:150] + " " + glued, "nonwords"),
        "salad in tool args": (
            json.dumps(
                {"path": "notes.txt", "content": "Notes: " + corruption.nonword_salad(rng, 60)}
            ),
            "nonwords",
        ),
    }


HEALTHY = healthy_samples()
DEGENERATE = degenerate_samples()
CORRUPTED = corrupted_samples()


def test_enough_healthy_samples():
    assert len(HEALTHY) >= 120


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_does_not_fire(name):
    assert d.degenerate(HEALTHY[name]) == [], name


@pytest.mark.parametrize("name", sorted(DEGENERATE))
def test_degenerate_fires(name):
    assert d.degenerate(DEGENERATE[name]), [str(f) for f in d.analyse(DEGENERATE[name])]


@pytest.mark.parametrize("name", sorted(CORRUPTED))
def test_corrupted_fires_its_detector_only(name):
    """Wrong tokens in fluent text: the repetition detectors stay silent (so
    these detectors are what catches it), the one meant for it fires."""
    text, detector = CORRUPTED[name]
    fired = {f.detector for f in d.degenerate(text)}
    assert fired == {detector}, [str(f) for f in d.analyse(text)]


def test_substitution_is_invisible_to_every_detector():
    """Plausible-word swaps (the stand-in's substitute fault) pass every
    detector: only exact tasks and the on/off comparison catch them."""
    for seed in range(20):
        text = corruption.substitute(model.PROSE + "\n\n" + exact.PASSAGE, random.Random(seed))
        assert text != model.PROSE + "\n\n" + exact.PASSAGE
        assert d.degenerate(text) == [], seed


def test_broken_utf8_points_at_the_spot():
    finding = d.broken_utf8("all fine until here \ufffd and after")
    assert finding.fired and "at char 20" in finding.detail and "until here" in finding.detail


def test_script_switch_allows_short_greek_and_names_the_script():
    assert not d.script_switch("the area is pi r^2 = π r², Δt = 3 μs, αβ-pruning").fired
    finding = d.script_switch("the answer is 5 答案 and more")
    assert finding.fired and finding.value == 2 and "Han" in finding.detail


def test_prose_words_leave_out_code_identifiers_and_acronyms():
    text = (
        "Run `sm12x verify --base-url x` then read GPU and DSPARK figures in "
        "prefix_function or camelCase names at https://example.org/quextor; "
        "```\nflarbin = quextor()\n```\nthe well-known multi-token draft's answer"
    )
    assert d.prose_words(text) == [
        "run",
        "then",
        "read",
        "and",
        "figures",
        "names",
        "the",
        "well",
        "known",
        "multi",
        "token",
        "draft's",
        "answer",
    ]


def test_repeating_tail_finds_the_smallest_primitive_unit():
    finding = d.repeating_tail("intro " + "abcabc " * 10)
    # The 7-character unit (seen rotated: the trailing space is dropped first).
    assert finding.fired and "' abcabc' x10.0" in finding.detail
    assert not d.repeating_tail("-" * 200).fired
    assert not d.repeating_tail("ab " * 3).fired  # too short


def test_repeating_tail_sees_a_loop_inside_a_closed_json_string():
    args = '{"path": "a.py", "content": "' + "of the model of the " * 30 + '"}'
    finding = d.repeating_tail(args)
    assert finding.fired and "of the model" in finding.detail


def test_prefix_function():
    assert d.prefix_function("abcabcab") == [0, 0, 0, 1, 2, 3, 4, 5]


def test_margins(capsys):
    """The calibration figures docs/verify.md quotes: worst healthy vs best degenerate."""

    def worst(samples, name, pick):
        values = [
            f.value
            for s in samples.values()
            for f in d.analyse(s)
            if f.detector == name and f.value is not None
        ]
        return pick(values)

    with capsys.disabled():
        print(f"\nhealthy samples {len(HEALTHY)}, degenerate {len(DEGENERATE)}")
        for name, pick in [
            ("distinct_trigrams", min),
            ("distinct_words", min),
            ("compression_ratio", max),
            ("duplicate_lines", max),
            ("broken_utf8", max),
            ("script_switch", max),
            ("nonwords", max),
        ]:
            print(f"  {name}: healthy worst {worst(HEALTHY, name, pick):.3f}")
        least = min(
            f.value
            for text, name in CORRUPTED.values()
            for f in d.analyse(text)
            if f.detector == "nonwords" and name == "nonwords"
        )
        print(f"  nonwords: corrupted least {least:.3f}")
    assert worst(HEALTHY, "distinct_words", min) > d.MIN_DISTINCT_WORDS
    assert worst(HEALTHY, "compression_ratio", max) < d.MAX_COMPRESSION_RATIO
    assert worst(HEALTHY, "nonwords", max) <= d.MAX_NONWORD_RATIO / 2  # a 2x margin
