"""A recipe says `verified` only when a bundle under results/ passes
`sm12x qualify --check --for-verified` for it (sm12x.qualify.status)."""

from __future__ import annotations

import json
from pathlib import Path

from sm12x.qualify import status
from sm12x.recipe import load_all, load_recipe

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"


def test_every_verified_recipe_has_a_bundle_that_passes_check():
    assert status.problems(load_all(), RESULTS) == []


def verified(name: str):
    recipe = load_recipe(name)
    return recipe.model_copy(
        update={
            "status": recipe.status.model_copy(
                update={"state": "verified", "verified_by": "someone", "verified_on": "2026-12-01"}
            )
        }
    )


def test_verified_without_a_bundle_is_refused(tmp_path):
    (found,) = status.problems([verified("rtx-pro-6000-tp2")], tmp_path)
    assert found.startswith("rtx-pro-6000-tp2: status verified, but no bundle"), found


def test_a_bundle_that_fails_check_does_not_verify(tmp_path):
    folder = tmp_path / "rtx-pro-6000-tp2" / "one"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"schema": "sm12x-qualify/1"}))
    (folder / "notes.txt").write_text("not JSON")
    found = status.problems([verified("rtx-pro-6000-tp2")], tmp_path)
    assert any("only JSON and PNG belong here" in f for f in found), found
    assert any("no bundle passes --check --for-verified (one: schema:" in f for f in found), found
