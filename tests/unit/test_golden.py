"""Each recipe renders exactly its checked-in golden command.

The goldens are rewritten only by scripts/regen, never by a test.
"""

from __future__ import annotations

import pytest

from tests.support.golden import GOLDEN_DIR, goldens

GOLDENS = goldens()


def test_every_golden_belongs_to_a_recipe():
    assert set(GOLDEN_DIR.glob("*.sh")) == set(GOLDENS), (
        "tests/golden/ does not match the recipes: run scripts/regen and review the diff"
    )


@pytest.mark.parametrize("path", sorted(GOLDENS), ids=lambda p: p.name)
def test_rendered_command_matches_golden(path):
    assert path.is_file(), f"{path.name} is missing: run scripts/regen"
    assert path.read_text() == GOLDENS[path], (
        f"{path.name} differs from what the recipe renders: if the change is intended, "
        "run scripts/regen and review the diff"
    )
