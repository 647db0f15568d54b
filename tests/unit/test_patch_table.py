"""docs/patch.md's table of patches is generated from patches/sglang/patches.toml,
every entry carries what the table shows, and every piece of evidence it names exists."""

from __future__ import annotations

import re
import tomllib

import pytest

from sm12x.patches import table as patch_table
from sm12x.patches.series import PatchSeriesError, load_patches
from tests.support.cli import ROOT

DOC = ROOT / "docs" / "patch.md"
PATCHES = ROOT / "patches" / "sglang"


def test_every_patch_file_has_one_row_and_every_entry_a_file():
    on_disk = {(path.parent.name, path.name) for path in PATCHES.glob("*/*.patch")}
    listed = {(version, p["file"]) for p in load_patches() for version in p["sglang"]}
    assert on_disk == listed, "a patch file patches.toml does not list, or the reverse"
    rows = patch_table.rows()
    assert [r["file"] for r in rows] == sorted({name for _, name in on_disk})
    table = patch_table.table()
    for row in rows:
        assert sum(f"| `{row['file']}` |" in line for line in table.splitlines()) == 1


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_evidence_path_and_section_exists():
    for row in patch_table.rows():
        for item in row["evidence"]:
            path = ROOT / patch_table.evidence_path(item)
            assert path.is_file(), f"{row['file']}: evidence {item} does not exist"
            if "#" in item:
                anchors = {
                    _slug(line.lstrip("#"))
                    for line in path.read_text().splitlines()
                    if line.startswith("#")
                }
                assert item.split("#", 1)[1] in anchors, f"{row['file']}: no section {item}"
            if "::" in item:
                assert f"def {item.split('::', 1)[1]}(" in path.read_text(), item


def entry(**changes) -> dict:
    base = {
        "file": "0099-x.patch",
        "title": "fixes x",
        "upstream": "none found",
        "target": "sglang/x.py",
        "sglang": ["0.5.17"],
        "present": "x = 1",
        "retire_when": "never",
        "evidence": ["README.md"],
    }
    return {**base, **changes}


@pytest.mark.parametrize("field", [f for f in patch_table.REQUIRED if f != "file"])
def test_an_entry_without_a_field_the_table_needs_is_named(field):
    with pytest.raises(PatchSeriesError, match=f"0099-x.patch lacks {field}"):
        patch_table.rows((entry(**{field: ""}),))
    missing = {k: v for k, v in entry().items() if k != field}
    with pytest.raises(PatchSeriesError, match=f"0099-x.patch lacks {field}"):
        patch_table.rows((missing,))


def test_entries_of_one_file_merge_and_must_agree():
    rows = patch_table.rows(
        (entry(sglang=["0.5.17"], target="a"), entry(sglang=["0.5.16"], target="b"))
    )
    assert len(rows) == 1 and rows[0]["sglang"] == ["0.5.16", "0.5.17"]
    assert rows[0]["targets"] == ["a", "b"]
    with pytest.raises(PatchSeriesError, match="disagree on retire_when"):
        patch_table.rows((entry(), entry(sglang=["0.5.16"], retire_when="later")))


def test_cells():
    assert (
        patch_table.upstream_cell("https://github.com/sgl-project/sglang/pull/33407")
        == "[#33407](https://github.com/sgl-project/sglang/pull/33407)"
    )
    assert (
        patch_table.upstream_cell("https://github.com/flashinfer-ai/flashinfer/issues/7")
        == "[flashinfer-ai/flashinfer#7](https://github.com/flashinfer-ai/flashinfer/issues/7)"
    )
    assert patch_table.upstream_cell("none found") == "none found"
    assert patch_table.evidence_cell(["docs/benchmarks.md#a", "tests/x.py::test_y"]) == (
        "[`docs/benchmarks.md#a`](benchmarks.md#a)<br>[`tests/x.py::test_y`](../tests/x.py)"
    )
    table = patch_table.table((entry(title="a | b"),))
    assert "a \\| b" in table


def test_patches_toml_header_names_the_fields_every_entry_carries():
    header = (PATCHES / "patches.toml").read_text().split("[[patch]]")[0]
    for field in patch_table.REQUIRED:
        assert field in header, field
    tomllib.loads((PATCHES / "patches.toml").read_text())
