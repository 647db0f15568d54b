"""The dashboards' pictures (tools/dashboard_pictures.py, regen entry
`dashboard-pictures`): the recorded series answer every panel's own query,
a query changed since the recording makes `--check` fail, and the PNGs are
drawn from the series, small, with no metadata."""

from __future__ import annotations

import json
import struct

from tools import dashboard_pictures as pictures
from tools import regen

PNG = b"\x89PNG\r\n\x1a\n"


def _chunks(data: bytes) -> list[bytes]:
    assert data.startswith(PNG)
    at, found = len(PNG), []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        found.append(data[at + 4 : at + 8])
        at += 12 + length
    return found


def test_every_panel_query_has_its_recorded_series():
    queries = json.loads(pictures.SERIES.read_text())["queries"]
    wanted = {
        pictures.concrete(t["expr"])
        for b in pictures.boards()
        for p in b["panels"]
        for t in p["targets"]
    }
    assert set(queries) == wanted
    empty = sorted(q for q, v in queries.items() if not v["series"])
    assert not empty, empty  # every panel draws something


def test_a_changed_panel_query_is_stale(monkeypatch):
    [entry] = regen.named(["dashboard-pictures"])
    assert regen.stale(entry) == []
    boards = pictures.boards()
    boards[0]["panels"][0]["targets"][0]["expr"] += " * 2"
    monkeypatch.setattr(pictures, "boards", lambda: boards)
    found = regen.stale(entry)
    assert found == ["docs/monitoring/series.json: differs from what dashboard-pictures makes"]
    rebuilt = json.loads(pictures.series_text())["queries"]
    changed = pictures.concrete(boards[0]["panels"][0]["targets"][0]["expr"])
    assert rebuilt[changed] == {"series": None, "record": pictures.RECORD}


def test_the_pictures_are_drawn_from_the_series_small_and_without_metadata():
    queries = json.loads(pictures.SERIES.read_text())["queries"]
    for board in pictures.boards():
        path = pictures.DOCS / f"{board['uid']}.png"
        committed = path.read_bytes()
        assert len(committed) < 300_000, (path, len(committed))
        drawn = pictures.picture(board, queries)
        for data in (committed, drawn):
            assert not {b"tEXt", b"iTXt", b"zTXt", b"tIME"} & set(_chunks(data)), path
        assert b"IDAT" in _chunks(drawn)
