"""What the image's sglang patch series makes safe, read from patches/sglang/patches.toml.

scripts/apply-patches applies, for an sglang version, every [[patch]] whose `sglang`
list holds it, and needs nothing for a release where the retirement rule retires
every patch (sm12x.patches.rules, shared with the script); this module reads the same
file, so a recipe lint can ask what a release with its series guarantees instead of
repeating it. [[release]] entries record what a release's own code guarantees.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from sm12x.patches import rules as patch_rules
from sm12x.paths import data_path

# sglang 0.5.16-0.5.17's DeepSeek-V4 compress plan keeps at most this many rows of a
# speculative verify in the compressor's state ring (kMaxMTPDraftTokens = 4 in
# c_plan.cuh): a DSPARK verify is depth + 1 rows. A patch that plans more says how
# many in its `verify_rows` field; a release whose own plan keeps more says so in a
# [[release]] entry.
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
def _load(path: Path | None = None) -> dict:
    path = path or patches_toml()
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise PatchSeriesError(f"cannot read the patch series {path}: {err}") from err


def load_patches(path: Path | None = None) -> tuple[dict, ...]:
    return tuple(_load(path).get("patch", []))


def releases(path: Path | None = None) -> dict[str, dict]:
    """[[release]] entries by sglang version."""
    return {entry["sglang"]: entry for entry in _load(path).get("release", [])}


def series(version: str, path: Path | None = None) -> list[dict]:
    """The patches apply-patches applies to sglang `version`, in order."""
    return patch_rules.series(list(load_patches(path)), version)


def plan(version: str, flashinfer: str | None, path: Path | None = None) -> patch_rules.Plan:
    """apply-patches' verdict for sglang `version` beside flashinfer `flashinfer`."""
    try:
        return patch_rules.plan(list(load_patches(path)), version, flashinfer)
    except patch_rules.RuleError as err:
        raise PatchSeriesError(f"patches.toml: {err}") from err


def v41_verify_rows(version: str, path: Path | None = None) -> int | None:
    """The widest DSPARK verify DeepSeek-V4.1's own compress paths (ratios 2 and 1,
    no c4/c128 layer) serve on sglang `version`, from its [[release]] entry; None
    where no entry says (no patch of the series touches those paths)."""
    rows = releases(path).get(version, {}).get("v41_verify_rows")
    return None if rows is None else int(rows)


def verify_rows(version: str, path: Path | None = None) -> VerifyRows:
    own = releases(path).get(version, {}).get("verify_rows", UNPATCHED_VERIFY_ROWS)
    best = VerifyRows(int(own), None)
    for patch in series(version, path):
        rows = patch.get("verify_rows")
        if rows is not None and rows > best.rows:
            best = VerifyRows(int(rows), patch["file"])
    return best


def compact_full_rank_fix(version: str, path: Path | None = None) -> str | None:
    """What makes compact ragged verify safe at a DP rank that fills its largest decode
    graph on sglang `version`: the series' patch with `compact_full_rank = true` (its
    file name), the [[release]] entry that says so ("sglang <version>"), else None."""
    if releases(path).get(version, {}).get("compact_full_rank"):
        return f"sglang {version}"
    for patch in series(version, path):
        if patch.get("compact_full_rank"):
            return str(patch["file"])
    return None


def compact_context_limit_fix(version: str, path: Path | None = None) -> str | None:
    """What keeps compact verify's padding rows inside their request's req_to_token row
    near the context limit on sglang `version` (the rows a full rank's last request, or
    any eager batch's, carries): the series' patch with `compact_context_limit = true`,
    the [[release]] entry that says so, else None."""
    if releases(path).get(version, {}).get("compact_context_limit"):
        return f"sglang {version}"
    for patch in series(version, path):
        if patch.get("compact_context_limit"):
            return str(patch["file"])
    return None
