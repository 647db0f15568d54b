"""Calibration of the degeneration detectors: healthy outputs that are
repetitive by nature must not fire; loops and salad must."""

import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.fake_sglang import model  # noqa: E402
from verify import detectors as d  # noqa: E402

HEALTHY_INLINE = {
    "markdown rules": "Results\n=======\n\n" + "-" * 80 + "\n" + "=" * 80 + "\nDone.\n",
    "table separators": "| a | b | c | d | e | f | g | h |\n|---|---|---|---|---|---|---|---|\n"
                        + "".join(f"| {i} | {i*2} | {i*3} | {i*4} | {i*5} | {i*6} | {i*7} | {i*8} |\n"
                                  for i in range(30)),
    "closing braces": "function f() {\n  if (a) {\n    if (b) {\n      return 1;\n    }\n  }\n}\n" * 3,
    "numbered list": "".join(f"{i}. Step {i}: configure item number {i} and check it.\n"
                             for i in range(1, 40)),
    "json array": "[" + ", ".join(f'{{"id": {i}, "name": "user{i}", "active": true}}'
                                  for i in range(60)) + "]",
    "csv": "date,open,close\n" + "".join(f"2026-01-{i:02d},{100+i}.5,{101+i}.25\n"
                                         for i in range(1, 31)),
}


def healthy_samples() -> dict[str, str]:
    samples = dict(HEALTHY_INLINE)
    samples.update({"fake code": model.CODE, "fake table": model.TABLE, "fake list": model.LIST,
                    "fake prose": model.PROSE})
    rng = random.Random(0)
    code = sorted((ROOT / "verify").rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    cache = ROOT / ".cache" / "sglang-parsers"
    code += sorted(cache.rglob("sglang/srt/**/*.py"))[:4000:13] if cache.exists() else []
    for path in code:
        text = path.read_text(errors="replace")
        if len(text) < 1200:
            continue
        start = rng.randrange(0, len(text) - 800)
        samples[f"{path.name}@{start}"] = text[start:start + rng.choice([800, 1500, 3000, 6000])]
    for path in sorted(ROOT.glob("docs/*.md")) + sorted(Path("/work/shared/reference").glob("*.md")):
        text = path.read_text(errors="replace")
        for start in range(0, len(text), 3000):
            samples[f"{path.name}@{start}"] = text[start:start + 3000]
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


HEALTHY = healthy_samples()
DEGENERATE = degenerate_samples()


def test_enough_healthy_samples():
    assert len(HEALTHY) >= 60


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_does_not_fire(name):
    assert d.degenerate(HEALTHY[name]) == [], name


@pytest.mark.parametrize("name", sorted(DEGENERATE))
def test_degenerate_fires(name):
    assert d.degenerate(DEGENERATE[name]), [str(f) for f in d.analyse(DEGENERATE[name])]


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
        values = [f.value for s in samples.values() for f in d.analyse(s)
                  if f.detector == name and f.value is not None]
        return pick(values)
    with capsys.disabled():
        print(f"\nhealthy samples {len(HEALTHY)}, degenerate {len(DEGENERATE)}")
        for name, pick in [("distinct_trigrams", min), ("distinct_words", min),
                           ("compression_ratio", max), ("duplicate_lines", max)]:
            print(f"  {name}: healthy worst {worst(HEALTHY, name, pick):.3f}")
    assert worst(HEALTHY, "distinct_words", min) > d.MIN_DISTINCT_WORDS
    assert worst(HEALTHY, "compression_ratio", max) < d.MAX_COMPRESSION_RATIO
