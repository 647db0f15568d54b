"""Storage and the host: the model folder, free disk, shared memory, the
.env file's place in git, and swap on unified memory.

The size thresholds are margins chosen from the figures below and the peers'
settings, not measurements; the disk one is adjustable (--min-free-gib).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from sm12x.doctor import model_dir as model_checks
from sm12x.doctor.core import GIB, Context, meminfo
from sm12x.recipe import load_all
from sm12x.recipe.lines import DEFAULT_LINE, Line, line_named

# Free disk under Docker's data root (the image and the kernel-cache volume):
# fail under 10 GiB (--min-free-gib, default core.DISK_FAIL_GIB), warn under
# 50 GiB. Not measured: a margin for the image plus flashinfer/Triton/DeepGEMM
# caches.
DISK_WARN_GIB = 50
# Shared memory: compose runs with `ipc: host`, so sglang and NCCL use the
# host's /dev/shm. Under 1 GiB is the 64 MB Docker default kind of setup that
# breaks NCCL; under 32 GiB is below what peers run (32-64 GB).
SHM_FAIL_GIB = 1
SHM_WARN_GIB = 32
# .env variables whose value must not be committed.
SECRET_NAME = re.compile(r"(API_KEY|TOKEN|SECRET|PASSWORD)$")
DISK_TITLE = "free disk (Docker)"
ENV_TITLE = ".env not in git"
SWAP_TITLE = "swap (unified memory)"


# --- the model folder ---------------------------------------------------------------


def check_model(ctx: Context) -> None:
    """SM12X_MODEL_DIR is a folder; then what is in it (sm12x.doctor.model_dir)."""
    where = ctx.settings.model_dir
    if not where:
        ctx.add(
            "model-dir",
            "model folder",
            "fail",
            "SM12X_MODEL_DIR is not set",
            "cp .env.example .env and set SM12X_MODEL_DIR (or pass --model-dir)",
        )
        return
    model = Path(where)
    if not model.is_dir():
        ctx.add(
            "model-dir",
            "model folder",
            "fail",
            f"{model} is not a folder",
            "download the checkpoint there (see .env.example) or fix SM12X_MODEL_DIR",
            path=str(model),
        )
        return
    ctx.add("model-dir", "model folder", "ok", str(model), path=str(model))
    check_checkpoint(ctx, model)


def check_checkpoint(ctx: Context, model: Path) -> None:
    """The checkpoint's config and shards (required), its revision and
    tokenizer (not: a served model may differ in them and still load)."""
    for id, title, finding in (
        ("model-config", "model config", model_checks.check_config(model, *model_line(ctx))),
        (
            "model-shards",
            "model shards",
            model_checks.check_shards(
                model, verify_hashes=ctx.options.verify_hashes, progress=ctx.progress
            ),
        ),
    ):
        ctx.add(id, title, finding.verdict, finding.detail, finding.fix, **finding.data)
    finding = model_checks.check_revision(model, expected_revision(ctx))
    ctx.add(
        "model-revision",
        "model revision",
        finding.verdict,
        finding.detail,
        finding.fix,
        required=False,
        **finding.data,
    )
    finding = model_checks.check_tokenizer(model)
    ctx.add("tokenizer", "tokenizer", finding.verdict, finding.detail, finding.fix, required=False)


def model_line(ctx: Context) -> tuple[Line, bool]:
    """The line and vision the model folder must serve: the recipe's, else the
    default line (auto, or no recipe: auto picks only default-line recipes)."""
    if ctx.recipe is None:
        return line_named(DEFAULT_LINE), False
    return ctx.recipe.model.model_line, ctx.recipe.model.vision


def expected_revision(ctx: Context) -> str | None:
    """The recipe's model.revision, else the default line's."""
    if ctx.recipe:
        return ctx.recipe.model.revision
    return next(r.model.revision for r in load_all() if r.model.line == DEFAULT_LINE)


# --- disk and shared memory -----------------------------------------------------------


def check_disk(ctx: Context) -> None:
    """Free space under Docker's data root (from `docker info`, else /):
    fail under --min-free-gib, warn under DISK_WARN_GIB."""
    root = ctx.docker_root
    where = root if ctx.host.path(root).exists() else "/"
    usage = ctx.host.disk(where)
    if usage is None:
        ctx.add(
            "disk",
            DISK_TITLE,
            "warn",
            f"cannot read free space of {where}",
            "check `df -h` by hand",
            required=False,
        )
        return
    free_gib = usage[1] / GIB
    detail = f"{free_gib:.0f} GiB free under {where}"
    data: dict[str, Any] = {"free_gib": round(free_gib, 1), "path": where}
    if free_gib < ctx.options.min_free_gib:
        ctx.add(
            "disk",
            DISK_TITLE,
            "fail",
            detail,
            "free space there: the image and the kernel-cache volume live under Docker's data root",
            **data,
        )
    elif free_gib < DISK_WARN_GIB:
        ctx.add(
            "disk",
            DISK_TITLE,
            "warn",
            detail,
            f"under {DISK_WARN_GIB} GiB: kernel caches and image updates may fill it",
            required=False,
            **data,
        )
    else:
        ctx.add("disk", DISK_TITLE, "ok", detail, **data)


def check_shm(ctx: Context) -> None:
    """The size of /dev/shm: fail under SHM_FAIL_GIB, warn under SHM_WARN_GIB."""
    usage = ctx.host.disk("/dev/shm")
    if usage is None:
        ctx.add(
            "shm",
            "shared memory",
            "fail",
            "/dev/shm is missing",
            "mount a tmpfs at /dev/shm (it is the host's, shared through ipc: host)",
        )
        return
    total_gib = usage[0] / GIB
    detail = f"/dev/shm {total_gib:.1f} GiB ({usage[1] / GIB:.1f} GiB free)"
    fix = (
        "grow it: `sudo mount -o remount,size=64G /dev/shm` (and in /etc/fstab to keep "
        "it); compose shares the host's /dev/shm with sglang (ipc: host)"
    )
    if total_gib < SHM_FAIL_GIB:
        ctx.add("shm", "shared memory", "fail", detail, fix, total_gib=round(total_gib, 2))
    elif total_gib < SHM_WARN_GIB:
        ctx.add(
            "shm",
            "shared memory",
            "warn",
            detail + f"; peers run {SHM_WARN_GIB}-64 GB",
            fix,
            required=False,
            total_gib=round(total_gib, 2),
        )
    else:
        ctx.add("shm", "shared memory", "ok", detail, total_gib=round(total_gib, 2))


# --- the .env file --------------------------------------------------------------------


def check_env_file(ctx: Context) -> None:
    """A .env holding a key must not go into git: tracked, it is committed
    with the next commit of that file; neither tracked nor ignored, with
    the next `git add -A`."""
    path = ctx.loaded.env_file.path
    if path is None or str(path) == os.devnull:
        ctx.add("env-git", ENV_TITLE, "skip", "no .env read", required=False)
        return
    secrets = sorted(k for k, v in ctx.loaded.dotenv.items() if v and SECRET_NAME.search(k))
    if not secrets:
        ctx.add("env-git", ENV_TITLE, "ok", f"{path} holds no key", required=False)
        return
    check_env_in_git(ctx, path, secrets)


def check_env_in_git(ctx: Context, path: Path, secrets: list[str]) -> None:
    """Where git has a key-bearing .env: outside a work tree, tracked,
    not ignored, or ignored."""
    where = ["git", "-C", str(path.parent)]
    tracked = ctx.host.run([*where, "ls-files", "--error-unmatch", "--", path.name])
    if tracked.error or (tracked.returncode != 0 and "not a git repository" in tracked.stderr):
        ctx.add("env-git", ENV_TITLE, "ok", f"{path} is not in a git work tree", required=False)
        return
    names = ", ".join(secrets)
    if tracked.ok:
        ctx.add(
            "env-git",
            ENV_TITLE,
            "warn",
            f"{path} holds {names} and git tracks it",
            f"stop tracking it (git rm --cached {path.name}), keep it ignored "
            "(.gitignore has .env) and change the key: it is in git's history",
            required=False,
            path=str(path),
            keys=secrets,
        )
        return
    ignored = ctx.host.run([*where, "check-ignore", "-q", "--", path.name])
    if ignored.returncode == 1:
        ctx.add(
            "env-git",
            ENV_TITLE,
            "warn",
            f"{path} holds {names} and git does not ignore it: `git add -A` would commit it",
            f"add {path.name} to .gitignore",
            required=False,
            path=str(path),
            keys=secrets,
        )
        return
    ctx.add(
        "env-git",
        ENV_TITLE,
        "ok",
        f"{path} holds {names}; git ignores it",
        required=False,
        path=str(path),
    )


# --- swap -----------------------------------------------------------------------------


def check_swap(ctx: Context) -> None:
    """Unified memory (DGX Spark) only: peers add swap against OOM kills while
    loading. No check at all on discrete cards or when meminfo has no SwapTotal."""
    if ctx.recipe is not None and not ctx.recipe.hardware.unified_memory:
        return
    swap_kib = meminfo(ctx.host).get("SwapTotal")
    if swap_kib is None:
        return
    if swap_kib == 0:
        ctx.add(
            "swap",
            SWAP_TITLE,
            "warn",
            "no swap",
            "peers add swap against OOM kills while loading on unified memory "
            "(e.g. a 32 GB swap file); the recipe also drops the page cache after load",
            required=False,
        )
    else:
        ctx.add("swap", SWAP_TITLE, "ok", f"{swap_kib / 1024**2:.0f} GiB", required=False)
