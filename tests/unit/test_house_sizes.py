"""The house's size rules (issue 42): scripts/ holds entry points, not logic,
and no module at sm12x's root passes 300 lines."""

from __future__ import annotations

from tests.support.cli import ROOT

# The scripts whose logic is the build, the pins or the test run themselves.
LONG_SCRIPTS = {"image-build", "pin-digests", "census-chart", "test"}


def test_scripts_are_thin_wrappers():
    fat = {
        path.name: n
        for path in (ROOT / "scripts").iterdir()
        if path.is_file() and path.name not in LONG_SCRIPTS
        if (n := len(path.read_text().splitlines())) >= 60
    }
    assert not fat, f"scripts/ over 59 lines (move the logic to the package or tools/): {fat}"


def test_no_root_module_of_sm12x_is_over_300_lines():
    """A module at sm12x's root that grows past 300 lines finds its package."""
    big = {
        path.name: n
        for path in (ROOT / "sm12x").glob("*.py")
        if (n := len(path.read_text().splitlines())) > 300
    }
    assert not big, f"sm12x/ root modules over 300 lines (give them a package): {big}"
