"""The stand-in's wheel download asks the index again when pip fails
(tests/support/standin.py, `_download`): one run lost a whole track's stand-in
to a stale index page that lacked a 12-day-old release."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

import pytest

from tests.support import standin

STALE = "ERROR: No matching distribution found for cython==3.3.2\n"


@dataclass
class FakePip:
    answers: list[int]  # pip's exit status, one per call
    asked: list[dict[str, str]] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)

    def download(self, folder, wanted) -> subprocess.CompletedProcess[str]:
        self.asked.append(dict(wanted))
        code = self.answers[len(self.asked) - 1]
        return subprocess.CompletedProcess(["pip"], code, "", STALE if code else "")


def fake_pip(monkeypatch, answers: list[int]) -> FakePip:
    pip = FakePip(answers)
    monkeypatch.setattr(standin, "_pip_download", pip.download)
    monkeypatch.setattr(standin.time, "sleep", pip.waits.append)
    return pip


def test_a_failed_download_is_asked_again_and_then_succeeds(monkeypatch, tmp_path):
    pip = fake_pip(monkeypatch, [1, 0])
    standin._download(tmp_path / "wheels", {"cython": "3.3.2"})
    assert pip.asked == [{"cython": "3.3.2"}] * 2
    assert pip.waits == [30]
    assert (tmp_path / "wheels").is_dir()


def test_three_failures_raise_with_pip_s_own_words(monkeypatch, tmp_path):
    pip = fake_pip(monkeypatch, [1, 1, 1])
    with pytest.raises(RuntimeError, match=r"(?s)pip download failed:.*cython==3\.3\.2"):
        standin._download(tmp_path / "wheels", {"cython": "3.3.2"})
    assert len(pip.asked) == 3
    assert pip.waits == [30, 30]
