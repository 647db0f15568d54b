"""Throwaway site-packages trees of the real sglang and flashinfer wheels.

The patch tests never touch the test virtualenv's site-packages: each sglang
or flashinfer version is unzipped into its own folder, patched there with
scripts/apply-patches (the same mechanism the image uses), and code runs in a
subprocess with PYTHONPATH=<sglang tree>:<flashinfer tree>:<repo>, so several
versions can be exercised in one session.

The trees the patch tests only read (tests/patch/conftest.py) are made once
per run, not once per worker: `shared` builds each under a lock in a folder
every xdist worker of the run sees, renamed into place when complete.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sm12x.mock import wheels

REPO = Path(__file__).resolve().parents[2]
APPLY = REPO / "scripts" / "apply-patches"


def patched_files(version: str) -> tuple[str, ...]:
    """Every file the version's patch series changes: each patch's target and
    whatever else its diff names (a patch may change several files)."""
    files = set()
    for patch in wheels.patch_series()["patch"]:
        if version not in patch["sglang"]:
            continue
        files.add(patch["target"])
        diff = REPO / "patches" / "sglang" / version / patch["file"]
        for line in diff.read_text(encoding="utf-8").splitlines():
            if line.startswith("+++ b/"):
                files.add(line[len("+++ b/") :].split("\t")[0])
    return tuple(sorted(files))


def run_folder(tmp_path_factory) -> Path:
    """A folder of this run shared by its workers: xdist gives each worker a
    base temporary folder inside the run's (one process: the run's own)."""
    base = Path(tmp_path_factory.getbasetemp())
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "trees"


def shared(root: Path, name: str, make: Callable[[Path], object]) -> Path:
    """root/name made once by make(FOLDER) across the run's processes: under a
    lock, into a temporary folder renamed into place, so a reader never sees
    half a tree (a failed make leaves nothing, and raises in its caller)."""
    site = root / name
    if (site / ".complete").exists():
        return site
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (site / ".complete").exists():
            return site
        building = root / f".{name}.{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        try:
            make(building)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        (building / ".complete").write_text("made once for the run (tests/support/trees.py)\n")
        building.rename(site)
    return site


def unpack_sglang(version: str, dest: Path, full: bool = True) -> Path:
    """full=False keeps only what apply-patches needs: the files the version's
    patch series changes (fast, for the patch tests)."""
    members = () if full else ("sglang/__init__.py", "sglang/kernels/", *patched_files(version))
    return wheels.unpack("sglang", version, dest, members)


def unpack_flashinfer(version: str, dest: Path) -> Path:
    return wheels.unpack("flashinfer-python", version, dest)


def apply_patches(site: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(APPLY), "--site-packages", str(site), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def sglang_in(tree: Path) -> str | None:
    """The version of the sglang unpacked in `tree`, if one is."""
    found = sorted(Path(tree).glob("sglang-*.dist-info"))
    return found[0].name[len("sglang-") : -len(".dist-info")] if found else None


def run_python(
    trees: list[Path], args: list[str], env: dict | None = None, timeout: int = 900
) -> subprocess.CompletedProcess:
    """python ARGS with the trees first on sys.path (after the sglang tree's own pins,
    wheels.pythonpath), from a neutral folder."""
    # Small tensors everywhere: one OpenMP thread (spinning workers on a busy
    # machine made small copies up to 50x slower).
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    overlay = [p for t in trees if (v := sglang_in(t)) for p in wheels.pythonpath(v)]
    full_env["PYTHONPATH"] = os.pathsep.join([*overlay, *(str(t) for t in trees), str(REPO)])
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=trees[0],
    )


def selftest(trees: list[Path], out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """python -m sm12x.selftest --json OUT; returns the process and the report."""
    proc = run_python(trees, ["-m", "sm12x.selftest", "--json", str(out), *extra])
    report = json.loads(out.read_text()) if out.exists() else {}
    return proc, report


def series_upto(version: str, last: str, dest: Path) -> Path:
    """A patches/sglang folder whose series for `version` stops at patch file `last`
    (apply-patches --patches DIR applies exactly that prefix)."""
    import tomllib

    source = REPO / "patches" / "sglang"
    meta = tomllib.loads((source / "patches.toml").read_text())
    names = sorted(p["file"] for p in meta["patch"] if version in p["sglang"])
    if last not in names:
        raise ValueError(f"{last} is not in sglang {version}'s series: {names}")
    keep = names[: names.index(last) + 1]
    (dest / version).mkdir(parents=True, exist_ok=True)
    lines = []
    for patch in meta["patch"]:
        if version in patch["sglang"] and patch["file"] in keep:
            (dest / version / patch["file"]).write_bytes(
                (source / version / patch["file"]).read_bytes()
            )
            lines.append(
                "[[patch]]\n"
                + "".join(f"{key} = {json.dumps(value)}\n" for key, value in patch.items())
            )
    (dest / "patches.toml").write_text("\n".join(lines))
    return dest
