"""sm12x.mock.wheels' overlays: one folder per set of pins, whichever releases share it."""

from __future__ import annotations

import importlib.metadata

from sm12x.mock import wheels


def releases() -> list[str]:
    return sorted({version for dist, version in wheels.wanted() if dist == "sglang"})


def shares_exactly_when_pins_are_equal() -> None:
    pins = {v: tuple(sorted(wheels.overlay_pins(v).items())) for v in releases()}
    folders = {v: wheels.overlay_dir(v) for v in releases()}
    for a in releases():
        for b in releases():
            assert (folders[a] == folders[b]) == (pins[a] == pins[b]), (a, b, pins[a], pins[b])


def test_releases_with_the_same_pins_share_one_overlay_and_no_other():
    shares_exactly_when_pins_are_equal()
    # Each folder that scripts/test's download built holds exactly its pins.
    for version in releases():
        folder = wheels.overlay_dir(version)
        if folder is not None:
            recorded = (folder / ".complete").read_text().strip()
            assert recorded == repr(sorted(wheels.overlay_pins(version).items())), version


def test_without_any_pinned_library_installed_every_release_has_an_overlay(monkeypatch):
    """The setup's system Python has none of them: every release then needs its
    pins, and releases pinning the same versions still get one folder."""

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(wheels.importlib.metadata, "version", missing)
    assert all(wheels.overlay_dir(v) is not None for v in releases())
    shares_exactly_when_pins_are_equal()


def test_a_release_s_code_runs_with_its_own_pins_first():
    for version in releases():
        folder = wheels.overlay_dir(version)
        assert wheels.pythonpath(version) == ([] if folder is None else [str(folder)])
