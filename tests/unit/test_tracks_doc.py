"""docs/tracks.md says what versions.env and patches.toml say: its table's pins,
each track's series, image names and bake targets are checked against them."""

from __future__ import annotations

import re
from pathlib import Path

import hcl2

from sm12x.patches import series as patch_series
from sm12x.versions import default_track, load_versions, tracks

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "tracks.md").read_text()


def table() -> dict[str, list[str]]:
    """The first table: row label -> one cell per track, in SM12X_TRACKS order."""
    rows = {}
    for line in DOC.splitlines():
        if line.startswith("|---"):
            continue
        if line.startswith("| "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
        elif rows:
            break
    return rows


def test_the_table_has_a_column_per_track_in_order():
    head = table()[""]
    assert [re.search(r"`(\w+)`", h)[1] for h in head] == list(tracks())
    assert "(the default)" in head[list(tracks()).index(default_track())]


def test_the_pins_are_versions_env_s():
    rows = table()
    for column, track in enumerate(tracks()):
        pins = load_versions(track)
        assert rows["sglang"][column] == pins["SGLANG_VERSION"]
        assert rows["flashinfer"][column].startswith(pins["FLASHINFER_VERSION"] + " ")
        assert rows["torch (in the base)"][column] == pins["TORCH_VERSION"]
        assert rows["base image"][column] == f"`{pins['BASE_IMAGE']}`"
        repo, version = pins["SM12X_IMAGE_REPO"], pins["SM12X_VERSION"]
        image = pins["SM12X_IMAGE"].replace(repo, "ghcr.io/<owner>/sm12x")
        assert rows["image"][column].startswith(f"`{image}`")
        assert image.endswith(f":{version}-{track}")


def test_each_track_s_series_is_patches_toml_s():
    rows = table()
    for column, track in enumerate(tracks()):
        series = patch_series.series(load_versions(track)["SGLANG_VERSION"])
        cell = rows["sm12x's patches applied"][column]
        assert cell.startswith(f"{len(series)}: "), cell
        for patch in series:
            number = patch["file"][:4]
            listed = re.findall(r"(\d{4})(?:-(\d{4}))?", cell)
            assert any(lo <= number <= (hi or lo) for lo, hi in listed), (track, number, cell)


def test_the_bake_targets_named_exist():
    targets = {
        name
        for entry in hcl2.loads((ROOT / "docker-bake.hcl").read_text())["target"]
        for name in entry
    }
    for column in range(len(tracks())):
        for name in re.findall(r"`([\w-]+)`", table()["bake targets"][column]):
            assert name.strip('"') in {t.strip('"') for t in targets}, name
