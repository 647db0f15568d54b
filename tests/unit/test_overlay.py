"""sm12x.mock.wheels' overlays: one folder per set of pins, whichever releases share it."""

from __future__ import annotations

from sm12x.mock import wheels


def test_releases_with_the_same_pins_share_one_overlay_and_no_other():
    releases = sorted({version for dist, version in wheels.wanted() if dist == "sglang"})
    pins = {v: tuple(sorted(wheels.overlay_pins(v).items())) for v in releases}
    folders = {v: wheels.overlay_dir(v) for v in releases}
    for a in releases:
        for b in releases:
            assert (folders[a] == folders[b]) == (pins[a] == pins[b]), (a, b, pins[a], pins[b])
    # Each folder that scripts/test's download built holds exactly its pins.
    for version, folder in folders.items():
        if folder is not None:
            recorded = (folder / ".complete").read_text().strip()
            assert recorded == repr(list(pins[version])), (version, folder)


def test_a_release_s_code_runs_with_its_own_pins_first():
    for version in sorted({v for d, v in wheels.wanted() if d == "sglang"}):
        folder = wheels.overlay_dir(version)
        assert wheels.pythonpath(version) == ([] if folder is None else [str(folder)])
