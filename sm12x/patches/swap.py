"""Applying a series all or nothing, even under a kill.

The patches are applied to copies of the files they touch in a stage beside
the tree (site-packages/.sm12x-staging), the record with them; only when the
whole series is staged is a swap journal written there, and each staged file
then replaces its original by a rename, the record last. A failure or a
signal before the journal drops the stage, so the tree is as it was; the swap
itself holds SIGINT, SIGTERM and SIGHUP until it ends, and an I/O error in it
puts every original back (each is kept in the stage as a hard link or copy).
After a SIGKILL the next run says what it found: a stage without a journal is
dropped (the tree was untouched), one with a journal is finished (the tree
becomes fully patched).

Standard library only (sm12x.patches.apply).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from sm12x.patches.unified import run_patch, touched

Say = Callable[[str], None]
RECORD = "sglang/.sm12x-patches.json"
STAGE = ".sm12x-staging"
SWAP = "swap.json"  # in the stage: written (atomically) once every file is staged
# In the stage: a hard link (else a copy) of each original the swap replaces, so
# an I/O error mid-swap puts the tree back as it was.
ORIGINALS = ".originals"
# Fault injection for tests/patch/test_apply_patches.py: a signal (SIGKILL
# unless named: "patch:2:INT") to this process at one boundary: "patch:N" after
# the Nth patch is staged, "staged" once the swap is journaled, "swap:N" after
# the Nth file is swapped in.
KILL_AT = "SM12X_TEST_KILL_AT"
FAIL_AT = "SM12X_TEST_FAIL_AT"  # tests: an I/O error at one boundary (stage, swap:N)
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class PatchError(Exception):
    """One clear reason the series cannot be applied."""


class Interrupted(BaseException):
    """A signal asked this run to stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.name = signal.Signals(signum).name
        self.status = 128 + signum
        self.after_swap = False


def boundary(name: str) -> None:
    at, _, signame = os.environ.get(KILL_AT, "").rpartition(":")
    if not signame.isupper():
        at, signame = os.environ.get(KILL_AT, ""), "KILL"
    if at == name:
        sys.stdout.flush()
        os.kill(os.getpid(), getattr(signal, f"SIG{signame}"))


def fault(name: str) -> None:
    if os.environ.get(FAIL_AT) == name:
        code = errno.ENOSPC if name == "stage" else errno.EIO
        raise OSError(code, os.strerror(code))


def apply_one(site: Path, version: str, patch: dict, check_only: bool, applied: bool) -> str:
    target = site / patch["target"]
    if not target.is_file():
        raise PatchError(f"sglang {version}: {patch['target']} is missing from {site}")
    if applied:
        state = "already applied"
    elif check_only:
        raise PatchError(f"sglang {version}: {patch['file']} is not applied to {target}")
    else:
        dry = run_patch(site, patch["path"], "--forward", "--dry-run")
        if dry.returncode != 0:
            raise PatchError(
                f"sglang {version}: {patch['path'].name} does not apply to {target} with "
                f"--fuzz=0 (is this a pristine sglang {version}?):\n{dry.stdout.strip()}"
            )
        done = run_patch(site, patch["path"], "--forward")
        if done.returncode != 0:  # passed the dry run: only I/O can get here
            said = "; ".join(
                s.strip() for s in (done.stdout + done.stderr).splitlines() if s.strip()
            )
            full = os.strerror(errno.ENOSPC)
            if full in said:  # a full disk: the one line apply_series gives every OSError
                raise OSError(errno.ENOSPC, full)
            raise PatchError(f"sglang {version}: patch failed on {target}: {said}")
        state = "applied"
    if patch["present"] not in target.read_text(encoding="utf-8"):
        raise PatchError(
            f"sglang {version}: {patch['file']} reports success but "
            f"{patch['present']!r} is not in {target}"
        )
    return state


def applied_prefix(site: Path, series: list[dict]) -> int:
    """How many patches of the series, from the first, are already in.

    Several patches may change one file, a later one inside an earlier one's
    context, so an earlier patch's reverse no longer applies to the final file
    on its own. The first k patches count as in when, on a scratch copy of the
    files the series touches, reversing patches k..1 in turn succeeds."""
    files = sorted({f for p in series for f in touched(p["path"])})
    for k in range(len(series), 0, -1):
        with tempfile.TemporaryDirectory(prefix="sm12x-apply-") as scratch:
            for name in files:
                if (site / name).is_file():
                    (Path(scratch) / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(site / name, Path(scratch) / name)
            if all(
                run_patch(Path(scratch), p["path"], "--reverse").returncode == 0
                for p in reversed(series[:k])
            ):
                return k
    return 0


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _write_json(path: Path, data: dict) -> None:
    """Written beside it and renamed, so a crash never leaves half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write_record(site: Path, version: str, series: list[dict]) -> None:
    record = {
        "sglang": version,
        "patches": [
            {"file": p["file"], "upstream": p["upstream"], "target": p["target"]} for p in series
        ],
    }
    _write_json(site / RECORD, record)


def swap_in(site: Path, stage: Path) -> None:
    """Move every staged file over its original (each an atomic rename), the
    record last, then drop the stage. Run again after a kill, it finishes the job:
    a file already moved is no longer in the stage."""
    plan = json.loads((stage / SWAP).read_text(encoding="utf-8"))
    for number, name in enumerate(plan["files"], 1):
        staged = stage / name
        if staged.is_file():
            fault(f"swap:{number}")
            os.replace(staged, site / name)
        boundary(f"swap:{number}")
    for name in plan.get("remove", []):
        if (site / name).is_file():
            (site / name).unlink()
    shutil.rmtree(stage, ignore_errors=True)


def keep_originals(site: Path, stage: Path, names: list[str]) -> None:
    """A link (else a copy) of each original the swap will replace, in the stage."""
    for name in names:
        source, kept = site / name, stage / ORIGINALS / name
        if not source.is_file():
            continue
        kept.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, kept)
        except OSError:
            shutil.copy2(source, kept)


def roll_back(site: Path, stage: Path) -> None:
    """Undo a swap an I/O error stopped: each file already moved in gets its
    original back (or goes, where there was none); the journal goes first, so a
    later run never finishes a swap this one undid. OSError if it cannot."""
    plan = json.loads((stage / SWAP).read_text(encoding="utf-8"))
    moved = [n for n in plan["files"] if not (stage / n).is_file()]
    os.replace(stage / SWAP, stage / (SWAP + ".undone"))
    for name in moved:
        kept = stage / ORIGINALS / name
        if kept.is_file():
            os.replace(kept, site / name)
        elif (site / name).is_file():
            (site / name).unlink()
    shutil.rmtree(stage, ignore_errors=True)


def recover(site: Path, check_only: bool, say: Say) -> None:
    """What a run stopped by a kill left: a stage with its swap journal is
    finished (the tree becomes fully patched), one without is dropped (the tree
    was never touched). Says which."""
    stage = site / STAGE
    if not stage.exists():
        return
    journaled = (stage / SWAP).is_file()
    if check_only:
        raise PatchError(
            "a previous run was stopped "
            + ("while swapping the patched files in" if journaled else "before it changed the tree")
            + f" ({stage} is left): run apply-patches without --check to "
            + ("finish it" if journaled else "clean it up")
        )
    if journaled:
        swap_in(site, stage)
        say(
            "apply-patches: a previous run was stopped while swapping the patched files "
            "in; finished it: the series is fully in"
        )
    else:
        shutil.rmtree(stage, ignore_errors=True)
        say(
            "apply-patches: a previous run was stopped before it changed the tree: the "
            "tree was untouched; its scratch copy is removed"
        )


def stage_series(site: Path, version: str, series: list[dict], done: int, say: Say) -> Path:
    """Every patch applied to copies of the files it touches, in a stage beside
    them (one filesystem: the swap is a rename); the tree is not touched."""
    stage = site / STAGE
    names = sorted({f for p in series for f in touched(p["path"])})
    stage.mkdir()
    existed = []
    for name in names:
        source = site / name
        if source.is_file():
            existed.append(name)
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, stage / name)
            os.chmod(stage / name, (stage / name).stat().st_mode | 0o200)
    for number, patch in enumerate(series):
        (stage / patch["target"]).parent.mkdir(parents=True, exist_ok=True)
        state = apply_one(stage, version, patch, False, applied=number < done)
        say(f"apply-patches: sglang {version}: {patch['file']}: {state}")
        boundary(f"patch:{number + 1}")
    (stage / RECORD).parent.mkdir(parents=True, exist_ok=True)
    write_record(stage, version, series)
    staged = [n for n in names if (stage / n).is_file()]
    for name in staged:
        _fsync(stage / name)
        folder = (site / name).parent
        if not os.access(folder if folder.is_dir() else site, os.W_OK):
            raise PatchError(
                f"sglang {version}: {folder} is not writable: the patched "
                f"{name} cannot replace the original"
            )
    removed = [n for n in existed if n not in staged]
    keep_originals(site, stage, [*staged, RECORD])
    fault("stage")
    _write_json(stage / SWAP, {"files": [*staged, RECORD], "remove": removed})
    boundary("staged")
    return stage


def apply_series(site: Path, version: str, series: list[dict], check_only: bool, say: Say) -> None:
    """Every patch of the series, or (on any failure, a signal or a kill) none:
    the patches are applied to copies in a stage, then swapped in under a journal
    that the next run finishes (recover)."""
    recover(site, check_only, say)
    done = applied_prefix(site, series)
    if check_only:
        for number, patch in enumerate(series):
            state = apply_one(site, version, patch, True, applied=number < done)
            say(f"apply-patches: sglang {version}: {patch['file']}: {state}")
        return
    try:
        stage = stage_series(site, version, series, done, say)
    except BaseException as err:
        shutil.rmtree(site / STAGE, ignore_errors=True)
        if isinstance(err, PatchError):
            raise PatchError(
                f"{err}; nothing was changed, the tree is as it was before this run"
            ) from None
        if isinstance(err, OSError):
            raise PatchError(
                f"sglang {version}: staging the patched files failed "
                f"({err.strerror or err}): nothing was changed, the tree is as "
                f"it was before this run; free space under {site} (or fix "
                "the error) and run apply-patches again"
            ) from None
        raise
    # Once journaled, the swap runs to its end: a signal waits for it.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        swap_in(site, stage)
    except OSError as err:
        try:
            roll_back(site, stage)
        except OSError:
            raise PatchError(
                f"sglang {version}: swapping the patched files in failed "
                f"({err.strerror or err}), and so did putting the originals "
                "back; fix that and run apply-patches again: it finishes the "
                "swap"
            ) from None
        raise PatchError(
            f"sglang {version}: swapping the patched files in failed "
            f"({err.strerror or err}): every file is back as it was, nothing "
            "was changed; fix that and run apply-patches again"
        ) from None
    finally:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)
        except Interrupted as stop:  # it arrived during the swap, which finished
            stop.after_swap = True
            raise
