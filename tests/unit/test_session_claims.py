"""tests/support/session.py: which of an InSuite command's covering tests a
session collected (tests/unit/test_doc_commands.py), on stand-in items."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tests.support import session

MARKERS = ["kernels: the real sglang-kernel wheels", "slow: takes more than a minute"]
DOC_TEST = "tests/unit/test_doc_commands.py"
EVERY = "test_every_command_runs_or_says_why_not"


@dataclass
class Item:
    nodeid: str
    markers: tuple[str, ...] = field(default=())

    def get_closest_marker(self, name: str):
        return name if name in self.markers else None


def test_a_file_or_a_test_counts_when_collected_parametrized_or_not():
    items = [Item(f"{DOC_TEST}::{EVERY}[README.md:56]")]
    assert session.missing((DOC_TEST, f"{DOC_TEST}::{EVERY}"), items, MARKERS) == []
    other = "tests/unit/test_session_claims.py"
    assert session.missing(
        (other, f"{other}::test_a_marker_counts_when_an_item_carries_it"), items, MARKERS
    ) == [
        other,
        f"{other}::test_a_marker_counts_when_an_item_carries_it",
    ]


def test_a_marker_counts_when_an_item_carries_it():
    assert session.missing(("-m kernels",), [Item("a.py::t", ("kernels",))], MARKERS) == []
    assert session.missing(("-m kernels",), [Item("a.py::t", ("slow",))], MARKERS) == ["-m kernels"]


def test_a_folder_counts_when_every_file_in_it_is_collected_or_skips_itself(monkeypatch):
    gpu = "tests/gpu/test_dispatch_cuda.py"
    monkeypatch.setattr(session, "skipped_files", set())
    assert session.missing(("tests/gpu/",), [], MARKERS) == ["tests/gpu/"]
    assert session.missing(("tests/gpu/",), [Item(f"{gpu}::test_x")], MARKERS) == []
    monkeypatch.setattr(session, "skipped_files", {gpu})
    assert session.missing(("tests/gpu/",), [], MARKERS) == []
    # One file of the folder is not enough.
    assert session.missing(("tests/",), [Item(f"{gpu}::test_x")], MARKERS) == ["tests/"]


@pytest.mark.parametrize(
    "entry, says",
    [
        ("tests/unit/test_no_such_module.py", "no such file"),
        (f"{DOC_TEST}::test_no_such_test", "defines no test_no_such_test"),
        ("-m no_such_marker", "no such marker"),
        ("tests/fixtures/nvidia-smi/", "no test file there"),
    ],
)
def test_a_claim_on_what_the_checkout_lacks_fails_in_every_session(entry, says):
    with pytest.raises(AssertionError, match=says):
        session.missing((entry,), [], MARKERS)
