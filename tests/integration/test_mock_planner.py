"""The mock's verify-all rule is the served wheel's own planner code (sm12x.mock.sps).

On each track's pristine tree (sm12x.mock.serving.tree): compact verify without a
table verifies every row (the pin is ignored, the step replays the full tier);
with a 1-D table of two samples it honours the pin; cap-accept never verifies
all. A copy of the wheel whose `_is_verify_all` expression is flipped changes
the mock's cells: the rule is read from the code, not restated by the mock.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sm12x.mock import serving
from sm12x.mock.sps import PLANNER_MODULE, SPS_MODULE, Scheduler, SpsConfig, verify_all
from sm12x.versions import load_versions, tracks

VERSIONS = sorted({load_versions(t)["SGLANG_VERSION"] for t in tracks()})
RULE = "self._is_verify_all = ("


def cells(site: Path, config: SpsConfig) -> dict[float, int]:
    """The verify tokens a step of 8 requests replays at each pinned fraction."""
    scheduler = Scheduler(config, verifies_all=verify_all(site, config))
    out = {}
    for frac in (0.125, 0.5, 1.0):
        scheduler.forced_frac = frac
        out[frac] = scheduler.verify_tokens(8)
    return out


def one_d_table(folder: Path) -> str:
    path = folder / "diagonal.json"
    path.write_text(
        json.dumps(
            {
                "sample_batch_tokens": [8, 64],
                "sample_steps_per_sec": [80.0, 60.0],
                "max_batch_tokens": 512,
            }
        )
    )
    return str(path)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_mock_prices_the_layout_the_wheels_planner_picks(version, tmp_path):
    site = serving.tree(version, patched=False)
    compact = SpsConfig(mode="compact", gamma=7, dp=1, cuda_graph_max_bs=16)
    # No table: verify-all, every pin replays the full 8 x 8 tier.
    assert cells(site, compact) == {0.125: 64, 0.5: 64, 1.0: 64}
    # A profiled 1-D table: the pin's tier (8 + int(f x 8 x 7) tokens, rounded up).
    tabled = SpsConfig(**{**compact.__dict__, "sps_table_path": one_d_table(tmp_path)})
    assert cells(site, tabled) == {0.125: 16, 0.5: 64, 1.0: 64}
    assert not verify_all(site, SpsConfig(mode="cap-accept"))

    # A copy of the wheel's two files with the rule flipped: the cells follow it.
    copy = tmp_path / "copy"
    for name in (SPS_MODULE, PLANNER_MODULE):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(site / name, copy / name)
    planner = (copy / PLANNER_MODULE).read_text()
    assert planner.count(RULE) == 1
    (copy / PLANNER_MODULE).write_text(planner.replace(RULE, "self._is_verify_all = not ("))
    assert cells(copy, compact) == {0.125: 16, 0.5: 64, 1.0: 64}
    assert cells(copy, tabled) == {0.125: 64, 0.5: 64, 1.0: 64}
    # A planner without the rule: the mock refuses to guess.
    (copy / PLANNER_MODULE).write_text(planner.replace(RULE, "self._verify_all_renamed = ("))
    with pytest.raises(RuntimeError, match="cannot read its verify-all rule"):
        verify_all(copy, compact)
