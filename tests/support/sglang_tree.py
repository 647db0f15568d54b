"""A track's whole sglang tree, scanned (tests/support/sglang_scan.py) into one inventory.

The tree is the release's wheel (sm12x.mock.wheels) or a folder holding its
`sglang/` package (a copy the injection test edits). Every module but sglang's
own test package is read. The inventory:

- `reads`: every variable read by name, with its first place (path:line) and
  form; written to sm12x/launch/sglang_env.json for the launcher;
- `dynamic`: reads whose name is computed, by path::function;
- `servers`: every server start, by path::function, with the call;
- `routes`: every route whose path is not a constant, by path::function, with
  the variable that sets it and its default.

A module is parsed only when its text holds a word one of the forms needs
(`PREFILTER`, a superset of what the scanner matches), which halves the time.
Each module's outcome (its scan, or nothing where the prefilter skips it) is
kept by the sha256 of its text and of the scanner's source (`_SCANS`), and a
wheel's are written beside its inventory: a copy of the tree (the injection
test's, which differs by one module) reads and hashes every file but scans only
the ones no scan of this code has seen.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import json
import os
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.sglang_scan import Scan, scan

SKIP = ("sglang/test/",)
PREFILTER = re.compile(
    r"env|uvicorn|web\.|Server|server|bind\(|listen\(|APIRouter|add_api_route|add_route", re.I
)


@dataclass
class Inventory:
    reads: dict[str, str] = field(default_factory=dict)  # name -> path:line (form)
    dynamic: dict[str, list[int]] = field(default_factory=dict)  # path::function -> lines
    servers: dict[str, list[str]] = field(default_factory=dict)  # path::function -> calls
    # path::function:line -> (variable or None, default path or None)
    routes: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)


def modules_of_wheel(wheel: Path) -> Iterator[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        for path in sorted(archive.namelist()):
            if path.endswith(".py") and not path.startswith(SKIP):
                yield path, archive.read(path).decode("utf-8", "replace")


def modules_of_folder(site: Path) -> Iterator[tuple[str, str]]:
    for file in sorted((site / "sglang").rglob("*.py")):
        path = file.relative_to(site).as_posix()
        if not path.startswith(SKIP):
            yield path, file.read_text(encoding="utf-8", errors="replace")


def code_digest() -> str:
    """The scanner's own source (this file and sglang_scan.py): part of every key."""
    here = Path(__file__).parent
    code = b"".join((here / n).read_bytes() for n in ("sglang_scan.py", "sglang_tree.py"))
    return hashlib.sha256(code).hexdigest()


# (code_digest(), sha256 of a module's text) -> its scan, or None: the prefilter skipped it
_SCANS: dict[tuple[str, str], Scan | None] = {}


def _scan_of(code: str, source: str) -> Scan | None:
    key = (code, hashlib.sha256(source.encode()).hexdigest())
    if key not in _SCANS:
        _SCANS[key] = scan(source) if PREFILTER.search(source) else None
    return _SCANS[key]


def inventory(modules: Iterator[tuple[str, str]]) -> Inventory:
    out = Inventory()
    code = code_digest()
    for path, source in modules:
        found = _scan_of(code, source)
        if found is None:
            continue
        for name, line, form in found.reads:
            out.reads.setdefault(name, f"{path}:{line} ({form})")
        for function, line in found.dynamic:
            out.dynamic.setdefault(f"{path}::{function}", []).append(line)
        for function, line, call in found.servers:
            out.servers.setdefault(f"{path}::{function}", []).append(f"{call}:{line}")
        for function, line, variable, default in found.routes:
            out.routes[f"{path}::{function}:{line}"] = (variable, default)
    return out


def _cache_file(wheel: Path) -> Path:
    """Where a wheel's inventory is kept: keyed by the wheel's bytes (sha256:
    a rebuilt wheel of the same name and size scans again) and by this
    scanner's own source, so a change to either scans again."""
    from sm12x.mock import wheels

    digest = hashlib.sha256(code_digest().encode())
    with wheel.open("rb") as f:
        digest.update(hashlib.file_digest(f, "sha256").digest())
    return wheels.cache_root() / "sglang-tree" / f"{wheel.stem}-{digest.hexdigest()[:16]}.json"


def _read(cache: Path) -> Inventory:
    data = json.loads(cache.read_text(encoding="utf-8"))
    _load_scans(data.pop("scans", {}))
    data["routes"] = {k: tuple(v) for k, v in data["routes"].items()}
    return Inventory(**data)


def _module_scans(modules: list[tuple[str, str]], code: str) -> dict[str, dict | None]:
    """The outcome of each module a scan just read, by its text's sha256."""
    out: dict[str, dict | None] = {}
    for _path, source in modules:
        digest = hashlib.sha256(source.encode()).hexdigest()
        if (code, digest) in _SCANS:  # (inventory read it: always, but for a stand-in's)
            found = _SCANS[(code, digest)]
            out[digest] = None if found is None else dataclasses.asdict(found)
    return out


def _load_scans(scans: dict[str, dict | None]) -> None:
    """Module outcomes from a cache file (its name holds the code digest they were
    made by, so they are this scanner's)."""
    code = code_digest()
    for digest, found in scans.items():
        _SCANS.setdefault((code, digest), None if found is None else _scan_from(found))


def _scan_from(data: dict) -> Scan:
    return Scan(**{k: [tuple(item) for item in v] for k, v in data.items()})


def of_wheel(wheel: Path) -> Inventory:
    """The wheel's inventory, scanned once per cache: a scan takes about 18 s
    of CPU, and several modules (test_sglang_tree, test_generated's regen,
    the surface and route checks) ask for it at once on different workers, so
    the first scans under a lock and the others wait for its file."""
    cache = _cache_file(wheel)
    if cache.is_file():
        return _read(cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cache.is_file():
            return _read(cache)
        modules = list(modules_of_wheel(wheel))
        found = inventory(iter(modules))
        data = {**dataclasses.asdict(found), "scans": _module_scans(modules, code_digest())}
        partial = cache.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(data), encoding="utf-8")
        partial.replace(cache)  # whole or not at all
    return found


@functools.cache
def of_version(version: str) -> Inventory:
    from sm12x.mock import wheels

    return of_wheel(wheels.wheel("sglang", version))


def versions() -> list[str]:
    from sm12x.versions import load_versions

    return sorted({load_versions(t)["SGLANG_VERSION"] for t in ("pinned", "current")})
