"""`python3 -m sm12x.mock.wheels --download` (scripts/test's last setup step) fetches
its wheels side by side, then builds each overlay folder once.

pip and PyPI stand in here (the suite's setup ran the real download): `fetch` and
`build_overlay` are recorded, and a barrier proves two downloads run at once.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from sm12x.mock import wheels

WANTED = [
    ("sglang", "0.5.16"),
    ("sglang", "0.5.17"),
    ("sglang", "0.5.23"),
    ("flashinfer-python", "0.6.15.post1"),
    ("flashinfer-python", "0.7.2"),
]
# 0.5.16 and 0.5.17 pin the same transformers and xgrammar: one folder.
OVERLAYS = {"0.5.16": Path("pins-a"), "0.5.17": Path("pins-a"), "0.5.23": Path("pins-b")}


def test_the_wheels_download_side_by_side_and_each_overlay_once(monkeypatch, capsys):
    together = threading.Barrier(2, timeout=30)  # broken unless two fetches overlap
    fetched: list[tuple[str, str]] = []
    built: list[str] = []

    def fetch(dist: str, version: str) -> Path:
        if (dist, version) in WANTED[:2]:
            together.wait()
        fetched.append((dist, version))
        return Path(f"{dist.replace('-', '_')}-{version}-py3-none-any.whl")

    monkeypatch.setattr(wheels, "wanted", lambda: list(WANTED))
    monkeypatch.setattr(
        wheels, "_cached", lambda dist, version: dist == "flashinfer-python" or None
    )
    monkeypatch.setattr(wheels, "fetch", fetch)
    monkeypatch.setattr(wheels, "overlay_dir", OVERLAYS.get)
    monkeypatch.setattr(wheels, "build_overlay", built.append)
    wheels.download()
    assert sorted(fetched) == sorted(WANTED)
    assert sorted(built) == ["0.5.16", "0.5.23"]
    # The lines come in wanted()'s order, whichever download ended first.
    assert capsys.readouterr().out.splitlines() == [
        "downloaded: sglang-0.5.16-py3-none-any.whl",
        "downloaded: sglang-0.5.17-py3-none-any.whl",
        "downloaded: sglang-0.5.23-py3-none-any.whl",
        "ok: flashinfer_python-0.6.15.post1-py3-none-any.whl",
        "ok: flashinfer_python-0.7.2-py3-none-any.whl",
    ]


def test_a_failed_download_fails_the_step(monkeypatch):
    """pip's error (check=True) still ends the command, as it did one at a time."""

    def fetch(dist: str, version: str) -> Path:
        if version == "0.5.17":
            raise subprocess.CalledProcessError(1, ["pip", "download"])
        return Path(f"{dist}-{version}.whl")

    built: list[str] = []
    monkeypatch.setattr(wheels, "wanted", lambda: list(WANTED))
    monkeypatch.setattr(wheels, "_cached", lambda dist, version: None)
    monkeypatch.setattr(wheels, "fetch", fetch)
    monkeypatch.setattr(wheels, "build_overlay", built.append)
    with pytest.raises(subprocess.CalledProcessError):
        wheels.download()
    assert built == []  # no overlay from a half-downloaded set
