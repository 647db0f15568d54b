"""sm12x.patches.series reads patches/sglang/patches.toml as apply-patches does."""

from __future__ import annotations

import pytest

from sm12x.patches import series as patch_series
from sm12x.patches.series import PatchSeriesError, VerifyRows


def test_series_is_what_apply_patches_applies_in_order():
    files = [p["file"] for p in patch_series.series("0.5.17")]
    assert files == sorted(files)
    assert "0020-dsv4-compress-plan-verify-rows.patch" in files
    assert all("0.5.17" in p["sglang"] for p in patch_series.series("0.5.17"))
    assert patch_series.series("0.4.0") == []


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17"])
def test_the_row_fix_widens_the_verify(version):
    assert patch_series.verify_rows(version) == VerifyRows(
        10, "0020-dsv4-compress-plan-verify-rows.patch"
    )


def test_without_the_fix_sglang_keeps_four_rows():
    assert patch_series.verify_rows("0.5.18") == VerifyRows(4, None)
    assert patch_series.UNPATCHED_VERIFY_ROWS == 4


def test_an_unreadable_series_is_one_clear_error(tmp_path):
    bad = tmp_path / "patches.toml"
    bad.write_text("[[patch]\n")
    with pytest.raises(PatchSeriesError, match=f"cannot read the patch series {bad}"):
        patch_series.load_patches(bad)
    with pytest.raises(PatchSeriesError, match="cannot read"):
        patch_series.load_patches(tmp_path / "missing.toml")
