"""`sm12x tune`: profile the SPS cost table a throughput configuration reads.

    sm12x tune                         # boot the rig's throughput recipe in profiling mode
                                       # (compose), profile it, store the table, remove it
    sm12x tune --url http://127.0.0.1:30000   # a server already in profiling mode
    sm12x tune --deadline 1800         # stop after 30 minutes; run again to resume

The recipe (SM12X_RECIPE: a rig, whose throughput configuration is tuned, or
a recipe that reads a tuned table; auto from the GPUs), the cache folder the
table goes to (SM12X_CACHE_DIR; compose: the cache volume) and the track come
from the settings every sm12x command reads. The table is measured by
sglang's own profiler (sm12x.tune.profiler) and stored keyed by what it was
measured for (sm12x.sps.tables), where `sm12x launch` looks for it.

Boot mode starts a one-off container of the rig's compose service with
`sm12x launch --sps-profile` (per-step records, speculation accepting
nothing: never a server for clients), runs this command inside it
(`--attach`, where the cache volume and sglang are), then removes it.
`--boot-command` starts any command instead (its output is the log) and
profiles from here. Two phases (docs/tune.md): the diagonal on a static server
(its 1-D table), then the off-diagonal sweep on a compact server loading that
table; boot mode relaunches between them. Exit status: 0 the table was
written; 3 phase 1 is done (relaunch the server with its table, run again); 1
no table (bad input, the server not in profiling mode or compact without a
table, a cell that did not run its budget, the profiler failed, the deadline).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sm12x import __version__, fields, settings
from sm12x.bench import provenance, runner
from sm12x.cli import Command
from sm12x.errors import UserError
from sm12x.fields import NonNegativeFloat, PositiveFloat, PositiveFraction, option_type
from sm12x.launch import configuration, gpus
from sm12x.launch.choice import AUTO, following, select_recipe
from sm12x.recipe import Recipe
from sm12x.recipe.tracks import track_refusal
from sm12x.settings import Loaded
from sm12x.sps import tables as store
from sm12x.tune import probe, proof
from sm12x.tune.profiler import (
    DEFAULTS,
    FIT_TIMEOUT_S,
    MODULE,
    NO_USABLE_ROUNDS,
    REFERENCE_FRACS,
    DeadlineReached,
    Python,
    Rounds,
    Work,
    abort_all,
    fit,
    has_session,
    run_profiler,
    session_identity,
)
from sm12x.versions import load_versions

REQUEST_TIMEOUT_S = 30.0
# Phase 1 (the diagonal's 1-D table) is done: relaunch the server with it and resume.
PHASE_TWO = 3
DIAGONAL = "diagonal.json"
DEFAULT_DEADLINE_S = 3600.0
WORK = ".work"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    server = parser.add_argument_group("server")
    server.add_argument(
        "--url",
        help="profile the server there (it must run in profiling mode: "
        "`sm12x launch --sps-profile`) instead of booting one",
    )
    server.add_argument(
        "--attach",
        action="store_true",
        help="profile the server at http://SM12X_BIND:SM12X_PORT, already "
        "running in profiling mode (what boot mode runs inside the container)",
    )
    server.add_argument(
        "--boot-command",
        help="boot with any command that starts the server "
        "in profiling mode (its output is the log), then profile from here; "
        "default: a one-off container of the rig's compose service",
    )
    server.add_argument("--compose-file")
    server.add_argument(
        "--boot-timeout",
        type=option_type(PositiveFloat),
        default=5400.0,
        help="seconds the boot may take (default 5400; within --deadline)",
    )
    bound = parser.add_argument_group("time and resumption")
    bound.add_argument(
        "--deadline",
        type=option_type(PositiveFloat),
        default=DEFAULT_DEADLINE_S,
        help="seconds the whole tune may take, boot included (default 3600): "
        "then it stops, keeps the rounds measured so far and writes no table; "
        "run it again to resume",
    )
    bound.add_argument(
        "--fresh",
        action="store_true",
        help="discard the rounds an earlier, unfinished run measured",
    )
    sweep = parser.add_argument_group("the profiler's sweep (its own flags)")
    sweep.add_argument(
        "--batch-size",
        type=fields.count,
        nargs="+",
        metavar="N",
        help="running requests per DP rank to measure (default: the profiler's "
        "sweep up to the server's largest decode CUDA graph)",
    )
    sweep.add_argument(
        "--max-batch-size",
        type=fields.count,
        metavar="N",
        help="the top of the profiler's sweep, per DP rank",
    )
    sweep.add_argument(
        "--fracs",
        type=option_type(PositiveFraction),
        nargs="+",
        metavar="F",
        default=list(REFERENCE_FRACS),
        help="the verify-budget fractions in (0, 1] of the off-diagonal sweep, per batch "
        "size (default: the reference deployment's eighths, 0.125 ... 1.0)",
    )
    sweep.add_argument("--input-len", type=fields.count, default=DEFAULTS["input_len"])
    sweep.add_argument(
        "--min-steady-steps", type=fields.count, default=DEFAULTS["min_steady_steps"]
    )
    sweep.add_argument(
        "--min-steady-seconds",
        type=option_type(NonNegativeFloat),
        default=DEFAULTS["min_steady_seconds"],
    )
    sweep.add_argument(
        "--round-timeout", type=option_type(PositiveFloat), default=DEFAULTS["round_timeout"]
    )
    where = parser.add_argument_group("process")
    where.add_argument(
        "--python",
        help="the Python whose sglang runs the profiler (default: this "
        "one; without sglang, the image SM12X_IMAGE)",
    )
    where.add_argument(
        "--tokenizer",
        help="the tokenizer folder for the profiler (default: the server's, else SM12X_MODEL_DIR)",
    )
    # --recipe, --cache-dir, --track, --image, --docker, --bind/--port, --model-dir,
    # --env-file, --explain: the settings every command shares.
    settings.add_arguments(parser, "tune")


PASSED_ON = (
    "fresh",
    "batch_size",
    "max_batch_size",
    "fracs",
    "input_len",
    "min_steady_steps",
    "min_steady_seconds",
    "round_timeout",
    "tokenizer",
)


def _say(err: Console, text: str) -> None:
    err.print(f"sm12x tune: {text}", highlight=False, markup=False, soft_wrap=True)


# --- which recipe -------------------------------------------------------------------


def tuned_recipe(loaded: Loaded, err: Console) -> tuple[Recipe, Loaded]:
    """The recipe whose table is made (the named one when it reads a tuned table,
    else the named rig's configuration that does), and the settings with its own
    track where SM12X_TRACK says none, as `sm12x launch` reads them (the table is
    filed under the track the launch will look in)."""
    choice = loaded.settings.recipe
    named, why = select_recipe(choice, origin=loaded.origin("recipe"))
    if choice == AUTO:
        _say(err, why)
    if configuration.reads_tuned_table(named):
        recipe = named
    else:
        found = [
            r
            for r in configuration.configurations(named.rig).values()
            if configuration.reads_tuned_table(r)
        ]
        if not found:
            raise UserError(
                f"no configuration of rig {named.rig} reads a tuned SPS table "
                "(dspark.sps_table: tuned): there is nothing to tune for it"
            )
        recipe = found[0]
    loaded = following(loaded, recipe)
    problem = track_refusal(recipe, loaded.settings.track_name)
    if problem:
        raise UserError(problem)  # it ends with the one setting that fixes it
    return recipe, loaded


# --- attach: profile a running server -----------------------------------------------


def machine_gpu(recipe: Recipe, remote: bool, err: Console) -> str | None:
    """The GPU name the table is keyed by, from nvidia-smi where tune runs.

    Profiling a server at --url, tune need not run on its machine: where
    nvidia-smi cannot tell (not there, or other GPUs here), the table is keyed
    by the recipe's GPU model and count only (name None), said once. Inside the
    server's container (--attach, boot mode) the GPUs are the server's: they
    must be there."""
    try:
        found = gpus.query_gpus()
    except gpus.GpuQueryError as exc:
        if remote:
            _say(
                err,
                "nvidia-smi cannot tell the GPUs here, so the table is keyed by the "
                f"recipe's {recipe.hardware.total_gpus}x {recipe.hardware.gpu} only (not by the "
                "name nvidia-smi prints on the server's machine)",
            )
            return None
        raise UserError(
            "tune keys the table by the GPUs that measured it, and nvidia-smi cannot "
            f"tell them here ({exc.message.split(':')[0]}): run tune on the server's "
            "machine (boot mode runs it in the container)"
        ) from None
    models = {g.model for g in found}
    if models != {recipe.hardware.gpu}:
        if remote:
            _say(
                err,
                f"this machine has {gpus.describe_gpus(found)}, not the server's: the table "
                f"is keyed by the recipe's {recipe.hardware.total_gpus}x {recipe.hardware.gpu} only",
            )
            return None
        raise UserError(
            f"{recipe.name} is for {recipe.hardware.gpu} GPUs but this machine has "
            f"{gpus.describe_gpus(found)}: tune on the rig the recipe is for"
        )
    return found[0].name


def where_to_run(
    args: argparse.Namespace,
    loaded: Loaded,
    reads: tuple[str, ...],
    server: probe.ServerFacts | None = None,
    err: Console | None = None,
) -> Python:
    """This Python when it has sglang, else (the server being sm12x mock-server)
    this Python with the release's wheel standing in, else the image."""
    python = args.python or sys.executable
    missing = runner.python_has_benchmark(python, module=MODULE)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if missing is None:
        return Python(python, None, env)
    if args.python:
        raise UserError(
            f"{missing}: pass --python with one that has sglang, or leave it out to "
            "run the profiler in the image"
        )
    if server is not None and server.mock:
        # Trying tune on a CPU machine: the mock's extra carries no sglang, so the
        # profiler is the served release's own, from its wheel (the mock's cache).
        if err is not None:
            _say(
                err,
                f"the profiler: sglang {server.sglang}'s own, from its wheel (this Python "
                "has no sglang and the server is sm12x mock-server)",
            )
        return Python(python, None, env, ("-m", runner.WHEEL_RUNNER, server.sglang))
    s = loaded.settings
    docker = shutil.which(s.docker)
    image = s.image_ref()
    problem = runner.image_problem(docker, image) if docker else f"no docker ({s.docker})"
    if problem:
        raise UserError(
            f"{missing}, and the image {image} cannot run it here ({problem}): run "
            "tune in the service (docker compose exec SERVICE sm12x tune --attach), "
            "or pass --python with one that has sglang"
        )
    assert docker is not None  # no problem found means docker was found
    return Python(python, runner.InImage(docker, image, f"{os.getuid()}:{os.getgid()}", reads), env)


def tokenizer_args(
    args: argparse.Namespace, loaded: Loaded, server: probe.ServerFacts, in_image: bool
) -> tuple[list[str], tuple[str, ...]]:
    """--local-tokenizer-path when the server's own path is not readable here."""
    if args.tokenizer:
        path = args.tokenizer
    elif server.tokenizer_path and Path(server.tokenizer_path).exists() and not in_image:
        return [], ()
    elif loaded.settings.model_dir and Path(loaded.settings.model_dir).is_dir():
        path = loaded.settings.model_dir
    else:
        raise UserError(
            f"the server's tokenizer ({server.tokenizer_path}) is not on this "
            "machine: pass --tokenizer DIR or set SM12X_MODEL_DIR"
        )
    path = str(Path(path).resolve())
    return ["--local-tokenizer-path", path], (path,)


def check_input_len(input_len: int, recipe: Recipe, info: object = None) -> None:
    """The profiled prompt and its one generated token must fit the context: the
    recipe's --context-length, else the server's context_length (/server_info)."""
    flag = recipe.flag_value("--context-length")
    served = info.get("context_length") if isinstance(info, dict) else None
    if type(flag) is int and flag > 0:
        context, where = flag, f"recipe {recipe.name}'s --context-length"
    elif type(served) is int and served > 0:
        context, where = served, "the server's context_length (/server_info)"
    else:
        return
    if input_len >= context:
        raise UserError(
            f"--input-len {input_len:,} does not fit {where} ({context:,} tokens, the prompt "
            f"and one generated token): give at most {context - 1:,}"
        )


def attach(
    args: argparse.Namespace,
    loaded: Loaded,
    recipe: Recipe,
    base_url: str,
    deadline_at: float,
    err: Console,
) -> int:
    s = loaded.settings
    if not s.cache_dir:
        raise UserError(
            "SM12X_CACHE_DIR is not set: tune writes the table where the launcher "
            "reads it (compose: the cache volume, /cache in the container); set it, "
            "or run tune without --url/--attach (it boots the rig in compose)"
        )
    info = probe.fetch(base_url, REQUEST_TIMEOUT_S)
    check_input_len(args.input_len, recipe, info)
    server = probe.facts(info, base_url)
    problems = probe.recipe_problems(server, recipe)
    if problems:
        raise UserError(
            f"{base_url} does not run {recipe.name}: it runs "
            f"{'; '.join(problems)}; its table would be filed under the wrong key: "
            f"boot the recipe with `sm12x tune` (without --url)"
        )
    want = load_versions(s.track_name)["SGLANG_VERSION"]
    # The server's word, checked by the one function bench uses too.
    served = provenance.served_release(info, s.key())
    if served != want:
        raise UserError(
            f"the server runs sglang {served}, but SM12X_TRACK={s.track_name} "
            f"is sglang {want}: set SM12X_TRACK to the server's track"
        )
    key = store.key_for(
        recipe,
        track=s.track_name,
        sglang=server.sglang,
        sm12x=__version__,
        gpu=machine_gpu(recipe, remote=bool(args.url), err=err),
    )
    top = args.max_batch_size or server.cuda_graph_max_bs
    if top > server.cuda_graph_max_bs:
        raise UserError(
            f"--max-batch-size {top} is past the server's largest decode CUDA graph "
            f"({server.cuda_graph_max_bs} per DP rank): the profiler refuses to "
            "measure eager steps"
        )
    if server.max_running_per_dp:
        top = min(top, server.max_running_per_dp)
    python = where_to_run(args, loaded, (), server, err)
    token_argv, reads = tokenizer_args(args, loaded, server, python.in_image is not None)
    if python.in_image is not None and reads:
        python.in_image = runner.InImage(
            python.in_image.docker, python.in_image.image, python.in_image.user, reads
        )
    rounds = Rounds(
        args.input_len, args.min_steady_steps, args.min_steady_seconds, args.round_timeout
    )
    folder = Path(s.cache_dir) / store.FOLDER / recipe.name / WORK / key.slug
    folder.mkdir(parents=True, exist_ok=True)
    diagonal = folder / DIAGONAL
    relaunch = relaunch_command(args, recipe, server, diagonal)
    tableless = server.mode == "compact" and not server.sps_table
    if tableless and not has_session(folder):
        # No earlier work to keep, so no phase 1 table: said before asking the profiler.
        refuse_tableless(base_url, relaunch, False)
    sweep = sorted(set(args.batch_size)) if args.batch_size else python.sweep(top, folder)
    fracs = sorted({float(f) for f in args.fracs})
    work = Work.open(
        folder,
        session_identity(key, rounds, sweep, fracs),
        args.fresh,
        lambda text: _say(err, text),
    )
    if not args.batch_size:
        work.remember(python, top, sweep)
    log_path = work.folder / "profiler.log"
    extra = [*rounds.argv(), *token_argv]
    if server.mode == "static":
        code = PHASE_TWO
        if not diagonal.is_file():
            code = phase_one(
                args, python, work, sweep, base_url, extra, log_path, deadline_at, relaunch, err
            )
        else:
            _say(err, f"phase 1 of 2 was done: relaunch the profiling server ({relaunch})")
        if args.attach:
            print(diagonal, flush=True)  # for the outer tune that relaunches (boot mode)
        return code
    if tableless:
        refuse_tableless(base_url, relaunch, diagonal.is_file())
    _say(
        err,
        f"profiling {key.describe()} at {base_url}: {len(sweep) * len(fracs)} round(s), "
        f"running requests per DP rank {', '.join(map(str, sweep))} x verify-budget "
        f"fractions {' '.join(f'{f:g}' for f in fracs)} (the off-diagonal sweep, "
        f"on the server's table {server.sps_table or 'none'})",
    )
    tiers = server.token_tiers()

    def prove(segment: Path, frac: float) -> None:
        proof.check_segment(segment, frac, server.gamma, tiers, relaunch)

    measured = measure(
        python,
        work,
        sweep,
        fracs,
        base_url,
        extra,
        log_path,
        deadline_at,
        args.deadline,
        err,
        prove,
    )
    measured = {cell: item for cell, item in measured.items() if cell[1] is not None}
    proof.check_flat(measured, server.gamma, tiers)
    remaining = deadline_at - time.monotonic()
    if remaining <= 1:
        raise DeadlineReached(deadline_message(args.deadline, work, sweep, fracs))
    text = fit(python, work, measured, log_path, min(FIT_TIMEOUT_S, remaining))
    kind = store.kind_of(text)
    if kind != store.ADDITIVE:
        raise UserError(
            f"sglang's SPS profiler fit a {kind}, not the {store.ADDITIVE} the off-diagonal "
            f"sweep makes: no table was written (log: {log_path})"
        )
    path = store.write(
        s.cache_dir,
        key,
        text,
        extra={
            "profiler": {
                "module": MODULE,
                "rounds": asdict(rounds),
                "sweep": sweep,
                "fracs": fracs,
                "measured": work.complete(fracs),
                "cells": len(measured),
                "skipped": work.skipped,
            },
            "server": {
                "url": base_url,
                "dp_ranks": server.dp_ranks,
                "cuda_graph_max_bs": server.cuda_graph_max_bs,
            },
            # Which table the profiling server ran with: `sm12x launch` warns on none.
            "profiled_with": proof.profiled_with(server.sps_table, diagonal),
        },
    )
    shutil.rmtree(work.folder, ignore_errors=True)
    _say(
        err,
        f"wrote {path} and {store.meta_path(path).name}: sglang's {kind} (the 2-D "
        f"additive table compact verify prices with; {len(measured)} round(s), each "
        "at the verify tier its pinned budget calls for"
        + (f"; skipped by the profiler's capacity guards: {work.skipped}" if work.skipped else "")
        + ")",
    )
    _say(err, launch_line(args, recipe))
    return 0


def refuse_tableless(base_url: str, relaunch: str, has_diagonal: bool) -> NoReturn:
    raise UserError(
        f"{base_url} runs compact verify without an SPS table, where sglang verifies "
        "every row and ignores the budgets the off-diagonal sweep pins (each cell "
        "would time one full-width step): "
        + (
            f"relaunch it with phase 1's table ({relaunch})"
            if has_diagonal
            else "start it for phase 1 (static verify) with `sm12x launch --sps-profile` "
            "without --sps-table"
        )
        + ", then run `sm12x tune` again"
    )


def phase_one(
    args: argparse.Namespace,
    python: Python,
    work: Work,
    sweep: list[int],
    base_url: str,
    extra: list[str],
    log_path: Path,
    deadline_at: float,
    relaunch: str,
    err: Console,
) -> int:
    """The diagonal sweep on the static profiling server, fit as the 1-D table the
    profiling server loads for phase 2 (compact verify honours pinned budgets only
    with a table). Exit PHASE_TWO: relaunch, then resume."""
    _say(
        err,
        f"phase 1 of 2 at {base_url} (static verify): measuring the diagonal "
        f"({len(sweep)} round(s), running requests per DP rank {', '.join(map(str, sweep))}) "
        "for the 1-D table phase 2 runs with",
    )
    measured = measure(
        python, work, sweep, [None], base_url, extra, log_path, deadline_at, args.deadline, err
    )
    measured = {cell: item for cell, item in measured.items() if cell[1] is None}
    remaining = deadline_at - time.monotonic()
    if remaining <= 1:
        raise DeadlineReached(deadline_message(args.deadline, work, sweep, [None]))
    text = fit(python, work, measured, log_path, min(FIT_TIMEOUT_S, remaining))
    if store.kind_of(text) != store.STATIC:
        raise UserError(
            f"sglang's SPS profiler fit a {store.kind_of(text)} from the diagonal, not its "
            f"1-D {store.STATIC} (log: {log_path})"
        )
    temporary = work.folder / f".{DIAGONAL}.tmp"
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(work.folder / DIAGONAL)
    _say(
        err,
        f"phase 1 of 2 done: {len(measured)} round(s) fit as the 1-D table "
        f"{work.folder / DIAGONAL}; relaunch the profiling server with it ({relaunch}) and "
        "run `sm12x tune` again: it resumes at phase 2",
    )
    return PHASE_TWO


def relaunch_command(
    args: argparse.Namespace, recipe: Recipe, server: probe.ServerFacts, table: Path
) -> str:
    """How to start the profiling server with phase 1's table."""
    if server.mock:
        return f"sm12x mock-server --sps-profile {recipe.name} --sps-table {table}"
    if args.boot_command:
        return f"add --sps-table {table} to the `sm12x launch --sps-profile` of --boot-command"
    return f"sm12x launch --sps-profile --recipe {recipe.name} --sps-table {table}"


def launch_line(args: argparse.Namespace, tuned: Recipe) -> str:
    """What `sm12x launch` runs with the user's own settings (recipe, configuration,
    track: read again, before tune followed the tuned recipe), now the table is there."""
    from sm12x.launch.choice import gpu_name

    def table_finder(user: Loaded):
        def find(recipe: Recipe) -> store.Lookup:
            track = user.settings.track_name
            sglang = load_versions(track)["SGLANG_VERSION"]  # the track's image
            key = store.key_for(
                recipe, track=track, sglang=sglang, sm12x=__version__, gpu=gpu_name()
            )
            return store.lookup(user.settings.cache_dir, key)

        return find

    try:
        user = settings.from_args(args, "tune")
        named, _ = select_recipe(user.settings.recipe, origin=user.origin("recipe"))
        user = following(user, named)
        s = user.settings
        resolved = configuration.resolve(
            named, s.configuration, s.track_name, table_finder(user), dry_run=True
        )
    except UserError as exc:
        return f"`sm12x launch` with your settings refuses: {exc.message}"
    said = f"SM12X_RECIPE={named.name}, SM12X_CONFIGURATION={s.configuration}"
    if resolved.recipe.name == tuned.name and not resolved.warning:
        return f"`sm12x launch` with your settings ({said}) now runs {tuned.name} on this table"
    why = resolved.warning or resolved.notice or ""
    return (
        f"`sm12x launch` with your settings ({said}) runs {resolved.recipe.name}, not "
        f"{tuned.name}" + (f": {why}" if why else "")
    )


def deadline_message(
    deadline: float, work: Work, sweep: list[int], fracs: Sequence[float | None]
) -> str:
    cells = len(work.finished())
    done = work.complete(fracs)
    return (
        f"--deadline {deadline:g} s reached after {cells} of {len(sweep) * len(fracs)} round(s)"
        + (f" (every fraction measured at {', '.join(map(str, done))} per DP rank)" if done else "")
        + f"; no table was written. What was measured is kept in {work.folder}: run "
        "`sm12x tune` again (with a longer --deadline) to resume"
    )


def measure(
    python: Python,
    work: Work,
    sweep: list[int],
    fracs: Sequence[float | None],
    base_url: str,
    extra: list[str],
    log_path: Path,
    deadline_at: float,
    deadline: float,
    err: Console,
    prove: Callable[[Path, float], None] | None = None,
) -> dict:
    """Run the profiler until every cell of the sweep is measured or skipped: one
    segment per fraction (None: the diagonal) over the batch sizes missing it (a
    batch size cut off part-way gets only its missing ones); `prove` holds each
    finished off-diagonal segment to the tiers its pins call for."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )
    total = len(sweep) * len(fracs)
    with progress:
        task = progress.add_task("SPS rounds", total=total)

        def tick() -> None:
            done = work.finished()
            last = max(done, key=lambda c: (c[0], c[1] or 0)) if done else None
            skipped = len(work.skipped) * len(fracs)
            progress.update(
                task,
                completed=min(total, len(done) + skipped),
                description="SPS rounds"
                + (f" (last: {last[0]}/rank at {last[1]:g})" if last and last[1] else ""),
            )

        while True:
            missing = work.missing(sweep, fracs)
            if not missing:
                break
            if time.monotonic() >= deadline_at:
                raise DeadlineReached(deadline_message(deadline, work, sweep, fracs))
            # One segment per fraction (the records of a segment then name their cell
            # by batch size alone: sm12x.tune.proof), every batch size still missing it.
            frac = next(f for f in fracs if any(f in left for left in missing.values()))
            sizes = [bs for bs, left in missing.items() if frac in left]
            segment = work.new_segment()
            argv = [
                "-m",
                MODULE,
                "run",
                "--base-url",
                base_url,
                "--out",
                str(segment / "table.json"),
                "--batch-size",
                *map(str, sizes),
                *(["--fracs", f"{frac:g}"] if frac is not None else []),
                *extra,
            ]
            # The fit needs a little time too: the profiler stops a bit before.
            reserve = min(60.0, deadline * 0.1)
            outcome = run_profiler(
                python, argv, work.folder, log_path, deadline_at=deadline_at - reserve, on_tick=tick
            )
            if outcome.killed:
                abort_all(base_url)
                raise DeadlineReached(deadline_message(deadline, work, sweep, fracs))
            if outcome.exit_code == 0 and frac is not None and prove is not None:
                prove(segment, frac)
            after = work.missing(sweep, fracs)
            left = [bs for bs in sizes if frac in after.get(bs, [])]
            if outcome.exit_code == 0 or NO_USABLE_ROUNDS in "\n".join(outcome.tail):
                # Batch sizes the profiler skipped on its capacity guards: not retried.
                work.session["skipped"] = sorted(set(work.skipped) | set(left))
                work.save()
                continue
            abort_all(base_url)
            said = runner.summarise(outcome.tail)
            raise UserError(
                f"sglang's SPS profiler failed (exit {outcome.exit_code}): {said}; "
                f"{len(work.finished())} finished round(s) are kept in {work.folder}: run "
                f"`sm12x tune` again to resume (log: {log_path})"
            )
    measured = work.finished()
    if not measured:
        raise UserError(
            f"the profiler skipped every round on its capacity guards (running "
            f"requests or KV capacity): nothing to fit; lower --max-batch-size "
            f"(log: {log_path})"
        )
    return measured


# --- boot: start the server in profiling mode ------------------------------------------


def answers(base_url: str) -> bool:
    """Whether anything answers HTTP there (/health answers 200 with no JSON body)."""
    _, problem = provenance.get_json(f"{base_url}/health", None, 5.0)
    return problem is None or "not JSON" in problem or "HTTP " in problem


def boot_and_tune(
    args: argparse.Namespace, loaded: Loaded, recipe: Recipe, deadline_at: float, err: Console
) -> int:
    from verify.boot import BootFailure, Server, boot

    base_url = loaded.settings.base_url()
    if answers(base_url):
        raise UserError(
            f"a server already answers at {base_url}: tune boots its own profiling "
            "server there; stop that one (docker compose down), or profile it with "
            "--url if it runs in profiling mode (sm12x launch --sps-profile)"
        )

    def start(table: str | None):
        if args.boot_command:
            return Server.command(args.boot_command)
        from sm12x.deploy import compose

        service = compose.profiling_service(recipe, loaded, args.compose_file, sps_table=table)
        for note in service.notes:
            _say(err, note)
        return Server.launched_by(service)

    table: str | None = None
    while True:
        server = start(table)
        try:
            limit = min(args.boot_timeout, deadline_at - time.monotonic())
            try:
                for line in boot(server, base_url, limit, err):
                    _say(err, f"boot: {line}")
            except BootFailure as exc:
                tail = "; ".join(exc.log_tail[-3:])
                raise UserError(
                    f"the profiling server did not boot: {exc.problem} ({exc.cause}); "
                    f"{exc.fix}" + (f"; log tail: {tail}" if tail else "")
                ) from None
            if args.boot_command:
                return attach(args, loaded, recipe, base_url, deadline_at, err)
            code, said = tune_inside(args, server, recipe, deadline_at, loaded)
        finally:
            # A profiling server accepts no draft token: it must never be left serving.
            server.teardown()
            _say(err, "the profiling server is stopped; start serving with `docker compose up -d`")
        if code != PHASE_TWO or table is not None or not said:
            return code
        # Phase 2: the same service again, loading phase 1's table (its path in the
        # container, which the inner run printed).
        table = said
        _say(err, f"phase 2: relaunching the profiling server with {table}")


def tune_inside(
    args: argparse.Namespace, server, recipe: Recipe, deadline_at: float, loaded: Loaded
) -> tuple[int, str | None]:
    """This command again, in the profiling container (sglang and the cache volume are
    there), its output here; with its exit status, what it printed on stdout (after
    phase 1: the 1-D table's path in the container)."""
    container = server.down[-1]
    remaining = max(1, int(deadline_at - time.monotonic()))
    inner = [
        loaded.settings.docker,
        "exec",
        *(["-t"] if sys.stdout.isatty() else []),
        container,
        "sm12x",
        "tune",
        "--attach",
        "--recipe",
        recipe.name,
        "--deadline",
        str(remaining),
    ]
    for name in PASSED_ON:
        value = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if value is True:
            inner.append(flag)
        elif isinstance(value, list):
            inner += [flag, *map(str, value)]
        elif value not in (None, False) and value != DEFAULTS.get(name):
            inner += [flag, str(value)]
    try:
        done = subprocess.run(
            inner, timeout=remaining + 120, check=False, stdout=subprocess.PIPE, text=True
        )
        lines = (done.stdout or "").strip().splitlines()
        return done.returncode, lines[-1] if lines else None
    except subprocess.TimeoutExpired:
        raise DeadlineReached(
            f"--deadline {args.deadline:g} s reached inside the container; "
            "run `sm12x tune` again to resume"
        ) from None


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    loaded = settings.from_args(args, "tune")
    if args.explain:
        sys.stdout.write(settings.explain(loaded, "tune"))
        return 0
    if args.url and args.attach:
        raise UserError("--url or --attach, not both")
    if args.boot_command and (args.url or args.attach):
        raise UserError("--boot-command boots a server; --url/--attach profile a running one")
    recipe, loaded = tuned_recipe(loaded, err)
    check_input_len(args.input_len, recipe)  # before booting anything
    deadline_at = started + args.deadline
    if args.url or args.attach:
        base_url = (args.url or loaded.settings.base_url()).rstrip("/")
        return attach(args, loaded, recipe, base_url, deadline_at, err)
    return boot_and_tune(args, loaded, recipe, deadline_at, err)


COMMAND = Command(
    name="tune",
    help="profile the SPS table a throughput configuration reads, on this rig",
    description=__doc__.split("\n\n")[0].replace("\n", " "),
    add_arguments=add_arguments,
    run=run,
)
