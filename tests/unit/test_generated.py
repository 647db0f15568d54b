"""Every generated file is what its generator makes now (tools/regen.py: the
one registry; no other test compares a generated file with its generator),
and the registry's --check finds each kind of staleness."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools import regen

TIER = {"fast": [], "wheels": [pytest.mark.wheels]}


@pytest.mark.parametrize(
    "entry",
    [pytest.param(e, id=e.name, marks=TIER[e.needs]) for e in regen.ENTRIES],
)
def test_the_generated_files_are_fresh(entry):
    found = regen.stale(entry)
    assert not found, (
        f"{entry.name} is stale ({'; '.join(found)}): run `make regen` "
        f"(python -m tools.regen --only {entry.name}) and review the diff"
    )


def test_every_entry_needs_a_known_tier_and_owns_what_it_makes():
    names = [e.name for e in regen.ENTRIES]
    assert len(set(names)) == len(names)
    for entry in regen.ENTRIES:
        assert entry.needs in TIER, entry.name
        for folder, _pattern in entry.folders:
            assert (regen.ROOT / folder).is_dir(), (entry.name, folder)


def checkout_copy(tmp_path: Path, *paths: str) -> Path:
    for rel in paths:
        source = regen.ROOT / rel
        target = tmp_path / rel
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return tmp_path


def test_check_finds_an_edited_a_missing_and_an_orphaned_file(tmp_path):
    [goldens] = regen.named(["goldens"])
    root = checkout_copy(tmp_path, "tests/golden")
    assert regen.stale(goldens, root) == []
    edited, missing = sorted((root / "tests" / "golden").glob("*.sh"))[:2]
    edited.write_text(edited.read_text() + "  --one-more-flag\n")
    missing.unlink()
    (root / "tests" / "golden" / "gone-recipe.sh").write_text("# a recipe since removed\n")
    found = regen.stale(goldens, root)
    assert found == sorted(found, key=found.index)  # stable order, one line each
    assert any(edited.name in line and "differs" in line for line in found), found
    assert any(missing.name in line and "missing" in line for line in found), found
    assert any("gone-recipe.sh" in line and "no longer made" in line for line in found), found
    assert len(found) == 3, found


def test_check_finds_a_stale_block_inside_a_file(tmp_path, monkeypatch):
    [matrix] = regen.named(["support-matrix"])
    # The entry also owns docs/recipes.md's status table.
    root = checkout_copy(tmp_path, "README.md", "docs/recipes.md")
    assert regen.stale(matrix, root) == []
    readme = root / "README.md"
    readme.write_text(
        readme.read_text().replace("| `rtx-pro-6000-tp2` |", "| `rtx-pro-6000-tp2-old` |", 1)
    )
    assert regen.stale(matrix, root) == ["README.md: differs from what support-matrix makes"]


def test_the_command_checks_writes_nothing_and_names_what_to_run(capsys):
    assert regen.main(["--check", "--only", "recipe-schema", "--only", "bench-schema"]) == 0
    assert "2 generated entries up to date" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        regen.main(["--check", "--only", "no-such-entry"])
    assert "no entry 'no-such-entry'" in str(exc.value.code) and "recipe-schema" in str(
        exc.value.code
    )
