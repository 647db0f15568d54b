"""What each cell of the off-diagonal sweep proves it ran, and what the table
records about the server that measured it.

sglang's profiler labels a cell from the fraction it pinned and checks only
that the replayed verify tier is not smaller than bs + the pinned budget
(dspark_sps_profiler.postprocess_round), which a server verifying every row
passes (compact verify without a table: the planner's `_is_verify_all`,
docs/tune.md). So tune reads the per-step records the profiler wrote for the
segment (`<out stem>.records.jsonl`: one line per DP rank and decode step,
with num_running_reqs and num_verify_tokens, the replayed tier in tokens) and
holds every cell to the tier its pin calls for: the smallest captured token
tier (each captured decode batch x (gamma + 1)) >= bs + int(frac x bs x gamma).
tune runs one profiler segment per fraction, so within a segment the batch
size alone names the cell. Flatness across budgets is a second guard.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sm12x.errors import UserError

RECORDS = "table.records.jsonl"
ROUNDS = "table.rounds.jsonl"
REFUSED = ".refused"
# Within this relative spread of step times across a batch size's budgets, a
# batch size is flat; a table whose every batch size is flat is refused.
FLAT_SPREAD = 0.01


class CellNotRun(UserError):
    pass


def pinned_budget(bs: int, frac: float, gamma: int) -> int:
    """The budget the profiler pins (dspark_sps_profiler: int(frac x bs x (width - 1)))."""
    return int(frac * bs * gamma)


def expected_tier(bs: int, frac: float, gamma: int, tiers: Sequence[int]) -> int | None:
    """The smallest captured token tier >= bs + the pinned budget (None: past the grid)."""
    total = bs + pinned_budget(bs, frac, gamma)
    return next((t for t in sorted(tiers) if t >= total), None)


def _lines(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


def check_segment(
    segment: Path, frac: float, gamma: int, tiers: Sequence[int], relaunch: str
) -> None:
    """Refuse the first cell of a one-fraction segment that replayed another tier
    than its pin calls for; its rounds are then set aside (measured anew on resume)."""
    records = _lines(segment / RECORDS)
    for item in _lines(segment / ROUNDS):
        bs = int(item["batch_size_per_rank"])
        want = expected_tier(bs, frac, gamma, tiers)
        ran = sorted(
            {
                int(r["num_verify_tokens"])
                for r in records
                if r.get("batch_size_per_rank") == bs and r.get("num_running_reqs") == bs
            }
        )
        if want is not None and ran == [want]:
            continue
        (segment / ROUNDS).rename(segment / (ROUNDS + REFUSED))
        budget = pinned_budget(bs, frac, gamma)
        shown = ", ".join(map(str, ran)) or "none recorded"
        raise CellNotRun(
            f"cell {bs}/rank at budget fraction {frac:g} ran verify tier(s) {shown} tokens, "
            f"not {want} (the smallest captured tier >= {bs} + {budget} pinned): the server "
            "did not honour the pinned budget, most likely compact verify without a usable "
            "SPS table (sglang then verifies every row); no table was written: relaunch "
            f"the profiling server with a table ({relaunch}) and run `sm12x tune` again"
        )


def check_flat(
    cells: Mapping[tuple[int, float | None], Mapping[str, Any]], gamma: int, tiers: Sequence[int]
) -> None:
    """Refuse a sweep whose step times do not move with the budget at any batch
    size where the pins call for different tiers."""
    spreads = []
    for bs in sorted({b for b, _ in cells}):
        mine = {f: c for (b, f), c in cells.items() if b == bs and f is not None}
        if len({expected_tier(bs, f, gamma, tiers) for f in mine}) < 2:
            continue
        rates = [float(c["steps_per_sec"]) for c in mine.values()]
        spreads.append(max(rates) / min(rates) - 1.0)
    if not spreads:
        raise UserError(
            "every batch size's budget fractions call for one verify tier, so the "
            "additive table's budget term cannot be fit: widen --fracs (e.g. 0.125 ... 1)"
        )
    if max(spreads) < FLAT_SPREAD:
        raise UserError(
            f"the step time moves by less than {FLAT_SPREAD:.0%} across the budgets at every "
            "batch size: the cells are flat (the server ran one verify width whatever the "
            "pin); no table was written: check the profiling server's SPS table"
        )


def profiled_with(path: str | None, ours: Path | None) -> dict[str, Any]:
    """The sidecar's record of the table the profiling server ran with: none, or
    its path, kind and sha256 (when its file is readable here)."""
    if not path:
        return {"kind": "none"}
    record: dict[str, Any] = {"path": path, "kind": "unknown", "sha256": None}
    local = ours if ours is not None and str(ours) == path else Path(path)
    try:
        text = local.read_text(encoding="utf-8")
    except OSError:
        return record
    record["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    record["kind"] = "SpsAdditiveCostTable" if '"bias_seconds"' in text else "SpsCostTable"
    return record
