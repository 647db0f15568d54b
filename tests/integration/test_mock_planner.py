"""The mock lays out every step with the served wheel's own planner (sm12x.mock.planner).

On each track's pristine tree (sm12x.mock.serving.tree) the mock builds sglang's
DSparkVerifyPlanner from the wheel's dspark_planner.py and prices each step from
the layout its schedule_layout returns: compact verify without a table verifies
every row (the pin is ignored, the step replays the full tier); with a 1-D table
of two samples the pin's budget is laid out; static and cap-accept replay the
full tier. A copy of the wheel's planner whose `_is_verify_all` is flipped
changes the mock's cells: the rule runs from the wheel's code, not restated.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from sm12x.launch.choice import installed_sglang
from sm12x.mock import planner, serving
from sm12x.mock.sps import Scheduler, SpsConfig
from sm12x.versions import load_versions, tracks

VERSIONS = sorted({load_versions(t)["SGLANG_VERSION"] for t in tracks()})
RULE = "self._is_verify_all = ("
FRACS = (0.125, 0.5, 1.0)


@pytest.fixture
def own_modules():
    """The planner registers the tree's bare `sglang` package and
    its modules, and refuses a process already serving another tree: start from
    none (another test in this worker may have served sglang in process) and give
    this process its modules back afterwards."""
    ours = ("sglang.", "sm12x_mock_dspark_planner_")
    before = {n: m for n, m in sys.modules.items() if n == "sglang" or n.startswith(ours)}
    for name in before:
        del sys.modules[name]
    yield
    for name in [n for n in sys.modules if n == "sglang" or n.startswith(ours)]:
        del sys.modules[name]
    sys.modules.update(before)


def cells(site: Path, config: SpsConfig, source: Path | None = None) -> dict[float, int]:
    """The verify tokens a step of 8 requests replays at each pinned fraction,
    as the mock server's scheduler lays it out (one DP rank)."""
    scheduler = Scheduler(config).plan(site, source)
    return {frac: scheduler.priced(8, frac) for frac in FRACS}


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
def test_the_mock_prices_the_layout_the_wheels_planner_picks(version, tmp_path, own_modules):
    site = serving.tree(version, patched=False)
    compact = SpsConfig(mode="compact", gamma=7, dp=1, cuda_graph_max_bs=16)
    # No table: verify-all, every pin replays the full 8 x 8 tier.
    assert Scheduler(compact).plan(site).verifies_all
    assert cells(site, compact) == {0.125: 64, 0.5: 64, 1.0: 64}
    # A profiled 1-D table: the pin's tier (8 + int(f x 8 x 7) tokens, rounded
    # up to the captured buckets 8, 16, 32, 64, 128).
    tabled = SpsConfig(**{**compact.__dict__, "sps_table_path": one_d_table(tmp_path)})
    assert not Scheduler(tabled).plan(site).verifies_all
    assert cells(site, tabled) == {0.125: 16, 0.5: 64, 1.0: 64}
    # The planner's layout itself: the top-k's verify lengths, one row floor each.
    rank = planner.RankPlanner(planner.load(site), tabled)
    for slot in range(8):
        rank.admit(slot)
    rank.pin(0.125)
    layout = rank.layout(list(range(8)))
    assert int(layout.verify_lens.sum()) == 8 + 7 and layout.graph_num_tokens == 16
    # The bare package has a spec, as an imported one does: launch's
    # installed_sglang (find_spec) in this process, e.g. a k8s render after an
    # in-process mock in the same worker, raised on the spec-less one (CI, 0378ef2).
    assert importlib.util.find_spec("sglang").submodule_search_locations == [str(site / "sglang")]
    assert installed_sglang() is not None
    # Static and cap-accept: the full tier at any pin.
    for mode in ("static", "cap-accept"):
        assert cells(site, SpsConfig(**{**compact.__dict__, "mode": mode})) == dict.fromkeys(
            FRACS, 64
        )

    # A copy of the wheel's planner with the rule flipped: the cells follow it.
    source = (site / planner.PLANNER_MODULE).read_text()
    assert source.count(RULE) == 1
    flipped = tmp_path / "flipped_planner.py"
    flipped.write_text(source.replace(RULE, "self._is_verify_all = not ("))
    assert cells(site, compact, flipped) == {0.125: 16, 0.5: 64, 1.0: 64}
    assert cells(site, tabled, flipped) == {0.125: 64, 0.5: 64, 1.0: 64}
    # A planner without its layout method: the mock refuses to guess.
    renamed = tmp_path / "renamed_planner.py"
    renamed.write_text(source.replace("def schedule_layout(", "def schedule_layout_renamed("))
    with pytest.raises(RuntimeError, match="cannot run this sglang's verify planner"):
        Scheduler(compact).plan(site, renamed)
