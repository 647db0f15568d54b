"""The streaming census corpus covers what the issue lists, and its chunkings
are the ones DSPARK produces."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support import stream_census as sc  # noqa: E402


def _values(value):
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _values(v)
    elif isinstance(value, list):
        for v in value:
            yield from _values(v)


def test_corpus_covers_the_output_shapes():
    cases = sc.cases()
    assert {c.thinking for c in cases} == {True, False}
    assert {len(c.calls) for c in cases} >= {0, 1, 2, 3}
    assert {call.form for c in cases for call in c.calls} == {"params", "json", "self-closing"}
    assert any(not call.arguments for c in cases for call in c.calls)  # zero-argument calls
    assert any(c.before and c.calls for c in cases) and any(not c.before and c.calls for c in cases)
    assert any(c.after for c in cases)  # prose after the calls


def test_arguments_cover_every_json_type_nesting_and_hard_text():
    values = [v for c in sc.cases() for call in c.calls for v in _values(call.arguments)]
    kinds = {type(v).__name__ for v in values}
    assert {"str", "int", "float", "bool", "NoneType", "list", "dict"} <= kinds
    assert any(
        isinstance(v, dict) and any(isinstance(x, (dict, list)) for x in v.values()) for v in values
    )
    assert any(isinstance(v, list) and any(isinstance(x, list) for x in v) for v in values)
    strings = [v for v in values if isinstance(v, str)]
    for needle in ('"', "\\", "\n", "\t", "<", ">", "</", "😀", "東京"):
        assert any(needle in s for s in strings), needle
    prose = [c.before + c.after for c in sc.cases()]
    for needle in ("<", ">", "😀" if any("😀" in p for p in prose) else "🌦", "東京", '"'):
        assert any(needle in p for p in prose), needle


def test_chunkings_are_dspark_steps():
    n = 97
    assert sc.chunkings("one-token", n, 3, 0) == [[[1]] * n]
    for gamma in range(3, 8):
        plans = sc.chunkings(f"gamma{gamma}", n, 5, 0)
        assert len(plans) == 5 and len({str(p) for p in plans}) == 5  # seeded, distinct
        for plan in plans:
            assert all(len(d) == 1 and 1 <= d[0] <= gamma + 1 for d in plan)
            assert sum(d[0] for d in plan) == n
        assert plans == sc.chunkings(f"gamma{gamma}", n, 5, 0)  # reproducible
    for plan in sc.chunkings("burst16", n, 5, 0):
        assert sum(map(sum, plan)) == n
        assert all(1 <= k <= 8 for d in plan for k in d)
        assert max(sum(d) for d in plan) <= 16 or any(len(d) == 1 for d in plan)
    splits = sc.chunkings("split", n, 1, 0)
    assert splits == [[[k], [n - k]] for k in range(1, n)]
    assert sc.chunkings("split", sc.SPLIT_MAX_TOKENS + 1, 1, 0) == []
