"""sm12x.tune.proof on the files the profiler writes (its record and round lines,
dspark_sps_profiler.append_round_files); the end-to-end cases run against the
mock in tests/integration/test_tune.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm12x.errors import UserError
from sm12x.tune import proof

GAMMA = 7
TIERS = [bs * (GAMMA + 1) for bs in (1, 2, 4, 8, 16)]  # 8 16 32 64 128


def segment(folder: Path, tiers_ran: dict[int, list[int]]) -> Path:
    """A one-fraction segment: per batch size the tiers its aligned steps replayed."""
    folder.mkdir(parents=True, exist_ok=True)
    records, rounds = [], []
    for bs, tiers in tiers_ran.items():
        for ct, tier in enumerate(tiers):
            records.append(
                {
                    "batch_size_per_rank": bs,
                    "dp_rank": 0,
                    "forward_ct": ct,
                    "num_running_reqs": bs,
                    "num_verify_tokens": tier,
                    "step_time": 0.01,
                }
            )
        # A ramp step at another batch size is not the cell's.
        records.append(
            {"batch_size_per_rank": bs, "num_running_reqs": bs - 1, "num_verify_tokens": 999}
        )
        rounds.append({"batch_size_per_rank": bs, "frac": 0.125, "steps_per_sec": 80.0})
    (folder / proof.RECORDS).write_text("\n".join(map(json.dumps, records)) + "\n")
    (folder / proof.ROUNDS).write_text("\n".join(map(json.dumps, rounds)) + "\n")
    return folder


def test_the_expected_tier_is_the_smallest_captured_one_holding_the_pin():
    assert proof.expected_tier(8, 0.125, GAMMA, TIERS) == 16  # 8 + 7
    assert proof.expected_tier(8, 1.0, GAMMA, TIERS) == 64  # 8 + 56
    assert proof.expected_tier(2, 0.125, GAMMA, TIERS) == 8  # 2 + 1
    assert proof.expected_tier(16, 1.0, GAMMA, TIERS) == 128
    assert proof.expected_tier(32, 1.0, GAMMA, TIERS) is None  # past the grid


def test_a_segment_that_ran_its_tiers_passes_and_one_that_did_not_is_refused(tmp_path):
    ok = segment(tmp_path / "ok", {2: [8, 8], 8: [16, 16, 16]})
    proof.check_segment(ok, 0.125, GAMMA, TIERS, "RELAUNCH")
    assert (ok / proof.ROUNDS).is_file()
    bad = segment(tmp_path / "bad", {2: [8], 8: [64, 64]})
    with pytest.raises(proof.CellNotRun) as caught:
        proof.check_segment(bad, 0.125, GAMMA, TIERS, "RELAUNCH")
    message = caught.value.message
    assert "cell 8/rank at budget fraction 0.125 ran verify tier(s) 64 tokens, not 16" in message
    assert "RELAUNCH" in message and "\n" not in message
    assert not (bad / proof.ROUNDS).exists()  # set aside: measured anew on resume
    mixed = segment(tmp_path / "mixed", {8: [16, 64]})
    with pytest.raises(proof.CellNotRun, match="ran verify tier\\(s\\) 16, 64 tokens"):
        proof.check_segment(mixed, 0.125, GAMMA, TIERS, "RELAUNCH")


def cells(rates: dict[tuple[int, float], float]) -> dict:
    return {cell: {"steps_per_sec": rate} for cell, rate in rates.items()}


def test_a_flat_sweep_is_refused_and_a_moving_one_passes():
    moving = cells({(8, 0.125): 80.0, (8, 1.0): 60.0, (1, 0.125): 90.0, (1, 1.0): 90.0})
    proof.check_flat(moving, GAMMA, TIERS)
    flat = cells({(8, 0.125): 60.0, (8, 1.0): 60.2, (4, 0.125): 70.0, (4, 1.0): 70.0})
    with pytest.raises(UserError, match="the cells are flat"):
        proof.check_flat(flat, GAMMA, TIERS)
    one_tier = cells({(1, 0.125): 90.0, (1, 1.0): 90.0})  # 1 + 0 and 1 + 7: both 8 tokens
    with pytest.raises(UserError, match="widen --fracs"):
        proof.check_flat(one_tier, GAMMA, TIERS)


def test_the_record_of_the_profiling_servers_table(tmp_path):
    assert proof.profiled_with(None, None) == {"kind": "none"}
    table = tmp_path / "diagonal.json"
    table.write_text('{"sample_batch_tokens": [8, 64], "sample_steps_per_sec": [80, 60]}')
    record = proof.profiled_with(str(table), table)
    assert record["kind"] == "SpsCostTable" and len(record["sha256"]) == 64
    elsewhere = proof.profiled_with("/not/here.json", None)
    assert elsewhere == {"path": "/not/here.json", "kind": "unknown", "sha256": None}
