"""What the image's sglang patch series makes safe, read from patches/sglang/patches.toml.

scripts/apply-patches applies, for an sglang version, every [[patch]] whose `sglang`
list holds it; this module reads the same file, so a recipe lint can ask what that
series guarantees instead of repeating it.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from sm12x.paths import data_path

# sglang 0.5.16-0.5.17's DeepSeek-V4 compress plan keeps at most this many rows of a
# speculative verify in the compressor's state ring (kMaxMTPDraftTokens = 4 in
# c_plan.cuh): a DSPARK verify is depth + 1 rows. A patch that plans more says how
# many in its `verify_rows` field.
UNPATCHED_VERIFY_ROWS = 4


class PatchSeriesError(ValueError):
    pass


@dataclass(frozen=True)
class VerifyRows:
    """The widest verify the series plans whole, and the patch that makes it so."""

    rows: int
    patch: str | None  # file name, None when no patch in the series widens it


def patches_toml() -> Path:
    return data_path("patches") / "sglang" / "patches.toml"


@functools.cache
def load_patches(path: Path | None = None) -> tuple[dict, ...]:
    path = path or patches_toml()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise PatchSeriesError(f"cannot read the patch series {path}: {err}") from err
    return tuple(data.get("patch", []))


def series(version: str, path: Path | None = None) -> list[dict]:
    """The patches apply-patches applies to sglang `version`, in order."""
    return sorted((p for p in load_patches(path) if version in p["sglang"]),
                  key=lambda p: p["file"])


def verify_rows(version: str, path: Path | None = None) -> VerifyRows:
    best = VerifyRows(UNPATCHED_VERIFY_ROWS, None)
    for patch in series(version, path):
        rows = patch.get("verify_rows")
        if rows is not None and rows > best.rows:
            best = VerifyRows(int(rows), patch["file"])
    return best
