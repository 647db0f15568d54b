"""Where `sm12x tune` keeps SPS tables, and which one a launch may use.

A table is measured for one recipe on one image, depth and parallel layout,
on one kind and number of GPU. Its path carries what the launcher knows
before it looks at the machine (recipe, gamma, TP/DP/EP, track):

    $SM12X_CACHE_DIR/sps/<recipe>/g<gamma>-tp<N>-dp<N>-ep<N>-<track>.json

and a sidecar `<same>.meta.json` records everything it was measured for
(the same, plus the sglang and sm12x versions, the GPUs nvidia-smi named and
the kind of table: sglang's 2-D `SpsAdditiveCostTable`, fit from the
profiler's off-diagonal `--fracs` sweep, or its 1-D `SpsCostTable`, fit from
the diagonal static sweep; sglang's planner prices the two by different
formulas, and a recipe with ragged verify wants the additive one, so a 1-D
table is stale for it, as is a sidecar that names no kind: tune wrote only
1-D tables before it recorded the kind).
The launcher renders that path and uses it only when the sidecar matches the
launch in every field; any other table of the recipe is stale, and `stale()`
says in which fields it differs.

Both files are written to temporary names in the same folder and renamed
into place, the table first: a reader that finds the sidecar finds the whole
table, and an interrupted write leaves no sidecar, so nothing half-written is
ever used.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from sm12x import bounded
from sm12x.recipe.derived import attention_dp, dp_size
from sm12x.recipe.model import Recipe

FOLDER = "sps"
META_SUFFIX = ".meta.json"
# A sidecar is a few hundred bytes.
META_LIMIT = 64 * 1024
SCHEMA = "sm12x-sps-table/1"
# sglang's two table kinds (dspark_sps.py), as its loader tells them apart.
ADDITIVE = "SpsAdditiveCostTable"
STATIC = "SpsCostTable"


@dataclass(frozen=True)
class Layout:
    tp: int
    dp: int
    ep: int

    def __str__(self) -> str:
        return f"TP{self.tp} DP{self.dp} EP{self.ep}"


def layout(recipe: Recipe) -> Layout:
    """The parallel layout the recipe's flags give sglang (each 1 when absent)."""

    def size(flag: str) -> int:
        value = recipe.flag_value(flag)
        return int(value) if value is not None else 1

    # DP is the ranks that schedule their own batches: DP attention's, whichever
    # spelling the track takes (--attn-dp-size on 0.5.23, --dp-size with
    # --enable-dp-attention before), or plain data-parallel replicas.
    dp = max(dp_size(recipe), attention_dp(recipe))
    return Layout(size("--tp-size"), dp, size("--ep-size"))


@dataclass(frozen=True)
class TableKey:
    """What a table was measured for. `gpu` is None where nothing could tell
    (a launch's dry run without nvidia-smi, or `sm12x tune --url` run where
    nvidia-smi does not see the server's GPUs): then only the count is
    compared."""

    recipe: str
    gamma: int
    tp: int
    dp: int
    ep: int
    track: str
    sglang: str
    sm12x: str
    gpu: str | None
    gpu_count: int
    # The table's kind (ADDITIVE or STATIC); None: any (nothing asks for one).
    kind: str | None = None

    @property
    def slug(self) -> str:
        return slug(self.gamma, Layout(self.tp, self.dp, self.ep), self.track)

    def describe(self) -> str:
        gpus = f"{self.gpu_count}x {self.gpu}" if self.gpu else f"{self.gpu_count} GPUs"
        return (
            f"{self.recipe}, gamma {self.gamma}, {Layout(self.tp, self.dp, self.ep)}, "
            f"sglang {self.sglang} ({self.track} track), sm12x {self.sm12x}, {gpus}"
        )


def slug(gamma: int, parallel: Layout, track: str) -> str:
    return f"g{gamma}-tp{parallel.tp}-dp{parallel.dp}-ep{parallel.ep}-{track}"


def key_for(
    recipe: Recipe,
    *,
    track: str,
    sglang: str,
    sm12x: str,
    gpu: str | None,
    gpu_count: int | None = None,
) -> TableKey:
    parallel = layout(recipe)
    return TableKey(
        recipe.name,
        recipe.dspark.block_size,
        parallel.tp,
        parallel.dp,
        parallel.ep,
        track,
        sglang,
        sm12x,
        gpu,
        gpu_count or recipe.hardware.total_gpus,
        wanted_kind(recipe),
    )


def kind_of(table_text: str) -> str:
    """Which of sglang's two kinds a table's JSON is, by its loader's own rule
    (dspark_sps.load_sps_table_from_path: "bias_seconds" makes it additive)."""
    return ADDITIVE if '"bias_seconds"' in table_text else STATIC


def wanted_kind(recipe: Recipe) -> str | None:
    """The table kind a recipe wants: ragged verify (compact, cap-accept) budgets
    its verify rows with the additive table `sm12x tune` fits from the
    off-diagonal sweep; static verify reads no table."""
    return ADDITIVE if recipe.dspark.ragged_verify != "static" else None


def relative_path(recipe: Recipe, track: str) -> str:
    """The table's path under the cache folder, as the launcher renders it."""
    return f"{FOLDER}/{recipe.name}/{slug(recipe.dspark.block_size, layout(recipe), track)}.json"


def table_path(cache_dir: str | Path, key: TableKey) -> Path:
    return Path(cache_dir) / FOLDER / key.recipe / f"{key.slug}.json"


def meta_path(table: Path) -> Path:
    return table.with_name(table.name.removesuffix(".json") + META_SUFFIX)


# --- reading ----------------------------------------------------------------------

# The fields a launch compares, grouped as the messages name them.
GROUPS = {
    "gamma": ("gamma",),
    "layout": ("tp", "dp", "ep"),
    "image": ("track", "sglang", "sm12x"),
    "GPU": ("gpu", "gpu_count"),
    "kind": ("kind",),
}


@dataclass(frozen=True)
class Stored:
    """A table on disk and what its sidecar says it was measured for."""

    table: Path
    key: TableKey
    created: str


def read_meta(path: Path) -> Stored | None:
    """The sidecar's key, or None when it is unreadable or its table is missing."""
    try:
        # Bounded: a sidecar may be a FIFO, a link to /dev/zero or JSON nested
        # 200k deep (bounded refuses each; the table is then not used).
        data = bounded.loads(bounded.read_bytes(path, META_LIMIT))
        known = {f.name: data["key"][f.name] for f in fields(TableKey) if f.name != "kind"}
        # A sidecar without a kind is from a tune that fit only 1-D tables.
        key = TableKey(**known, kind=str(data.get("kind") or data["key"].get("kind") or STATIC))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    table = path.with_name(path.name.removesuffix(META_SUFFIX) + ".json")
    if not table.is_file():
        return None
    return Stored(table, key, str(data.get("created", "")))


def stored(cache_dir: str | Path, recipe: str) -> list[Stored]:
    """Every complete table of the recipe, newest first."""
    folder = Path(cache_dir) / FOLDER / recipe
    found = [s for p in sorted(folder.glob(f"*{META_SUFFIX}")) if (s := read_meta(p))]
    return sorted(found, key=lambda s: s.created, reverse=True)


def differences(made: TableKey, wanted: TableKey) -> list[str]:
    """How a stored table differs from the launch, one phrase per group."""
    out = []
    for group, names in GROUPS.items():
        if group == "GPU" and wanted.gpu is None:
            continue  # nothing could tell which GPUs this machine has
        if group == "kind" and wanted.kind is None:
            continue  # the launch reads no table kind in particular
        if group == "GPU" and made.gpu is None:
            # Made where nvidia-smi could not tell (tune --url from another machine):
            # keyed by the recipe's GPU model (the launch's recipe) and count only.
            names = ("gpu_count",)
        if any(getattr(made, n) != getattr(wanted, n) for n in names):
            out.append(f"{group} {_show(made, group)} (this launch: {_show(wanted, group)})")
    return out


def _show(key: TableKey, group: str) -> str:
    if group == "gamma":
        return str(key.gamma)
    if group == "layout":
        return str(Layout(key.tp, key.dp, key.ep))
    if group == "image":
        return f"sglang {key.sglang} {key.track} track, sm12x {key.sm12x}"
    if group == "kind":
        return (
            "sglang's 1-D SpsCostTable (the diagonal static sweep; the recipe's ragged "
            "verify prices with the additive table of the off-diagonal sweep: run "
            "`sm12x tune` again)"
            if key.kind == STATIC
            else f"{key.kind}"
        )
    if key.gpu is None:
        return f"{key.gpu_count} GPUs of the recipe's model (nvidia-smi named none)"
    return f"{key.gpu_count}x {key.gpu}"


@dataclass(frozen=True)
class Lookup:
    """The table a launch may use (None when there is none), and why not."""

    table: Path | None
    wanted: TableKey
    stale: Stored | None = None
    stale_by: tuple[str, ...] = ()
    searched: Path | None = None  # the recipe's table folder; None: no SM12X_CACHE_DIR

    def problem(self) -> str:
        """Why there is no usable table, in a phrase."""
        if self.searched is None:
            return "SM12X_CACHE_DIR is not set, so no tuned SPS table can be read"
        if self.stale is not None:
            return f"the tuned SPS table {self.stale.table} is stale: made for " + "; ".join(
                self.stale_by
            )
        return f"there is no tuned SPS table for {self.wanted.describe()} in {self.searched}"


def lookup(cache_dir: str | Path | None, wanted: TableKey) -> Lookup:
    """The table for `wanted`: only the one at its own path can be rendered, so
    only that one is used, and only when its sidecar matches in every field."""
    if cache_dir is None:
        return Lookup(None, wanted)
    folder = Path(cache_dir) / FOLDER / wanted.recipe
    tables = stored(cache_dir, wanted.recipe)
    own = table_path(cache_dir, wanted)
    for item in tables:
        if item.table == own and not differences(item.key, wanted):
            return Lookup(item.table, wanted, searched=folder)
    # The one at the launch's own path first (same gamma and layout), else the newest.
    at_path = [s for s in tables if s.table == own]
    if not (at_path or tables):
        return Lookup(None, wanted, searched=folder)
    closest = (at_path or tables)[0]
    return Lookup(None, wanted, closest, tuple(differences(closest.key, wanted)), folder)


# --- writing ----------------------------------------------------------------------


def _atomic_write(path: Path, text: str) -> None:
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write(
    cache_dir: str | Path, key: TableKey, table_text: str, extra: Mapping[str, Any] | None = None
) -> Path:
    """Store a table and its sidecar (its kind read from the table itself);
    returns the table's path."""
    key = replace(key, kind=kind_of(table_text))
    path = table_path(cache_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = meta_path(path)
    meta.unlink(missing_ok=True)  # the old sidecar must not vouch for the new table
    _atomic_write(path, table_text)
    created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = {
        "schema": SCHEMA,
        "created": created,
        "key": asdict(key),
        "kind": key.kind,
        **(extra or {}),
    }
    _atomic_write(meta, json.dumps(body, indent=2) + "\n")
    return path
