"""tools.regen writes every file or none (issue 30)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import regen


def _entry(name: str, files: dict[Path, str] | Exception) -> regen.Entry:
    def render() -> dict[Path, str]:
        if isinstance(files, Exception):
            raise files
        return files

    return regen.Entry(name, name, "fast", render)


def test_a_failing_second_entry_leaves_the_first_file_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(regen, "ROOT", tmp_path)
    first = tmp_path / "first.txt"
    first.write_text("old\n")
    entries = [_entry("a", {first: "new\n"}), _entry("b", RuntimeError("generator broke"))]
    with pytest.raises(RuntimeError):
        regen.write(entries)
    assert first.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.txt"]


def test_a_file_that_cannot_be_written_leaves_the_others_alone(tmp_path, capsys, monkeypatch):
    first = tmp_path / "first.txt"
    first.write_text("old\n")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder must be\n")
    second = blocked / "second.txt"
    entries = [_entry("a", {first: "new\n"}), _entry("b", {second: "x\n"})]
    monkeypatch.setattr(regen, "ENTRIES", tuple(entries))
    monkeypatch.setattr(regen, "ROOT", tmp_path)
    assert regen.main([]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing was written" in err
    assert first.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked", "first.txt"]
