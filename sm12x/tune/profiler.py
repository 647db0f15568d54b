"""Driving sglang's own SPS profiler, resumably, within a deadline.

`python -m sglang.benchmark.dspark_sps_profiler` (the same file in sglang
0.5.17 and 0.5.23) is a client of a running server. Its `run` subcommand
sweeps running-request counts per DP rank (`--batch-size`) and, with
`--fracs`, for each of them the verify budgets it pins (the off-diagonal
sweep: one cell per batch size and fraction), and appends each finished cell
to `<out stem>.rounds.jsonl` as it goes; its `fit` subcommand turns a rounds
file into the table and reads it back (self-check): the 2-D
`SpsAdditiveCostTable` when the cells carry a fraction, else the 1-D
`SpsCostTable`. `run` deletes the rounds file of its own `--out` when it
starts, so every run here gets an `--out` of its own (a segment of the work
folder):

- resuming reads the finished cells of every earlier segment and asks the
  profiler only for the cells still missing (a batch size cut off part-way
  gets only its missing fractions): a finished cell is never measured again
  (a cell cut off by a deadline or a crash is measured anew);
- the batch sizes the profiler skipped on its capacity guards are remembered
  as skipped, not retried;
- the sweep itself is the profiler's (`build_request_count_sweep`) up to the
  server's largest captured decode CUDA graph (the profiler refuses to sweep
  past it);
- at the deadline the profiler's process group is killed and the server's
  requests aborted; the finished cells stay for the next run.

The table and its sidecar are published by sm12x.sps.tables (atomically);
the work folder is removed only after that.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sm12x import proc as bounded
from sm12x.bench import provenance
from sm12x.bench.runner import InImage, kill_group, pump, summarise
from sm12x.errors import UserError

MODULE = "sglang.benchmark.dspark_sps_profiler"
# Runs MODULE from a release's wheel in a Python without sglang (named, never
# imported: the mock is a leaf).
SESSION = "session.json"
NO_USABLE_ROUNDS = "No usable rounds"
# The profiler's own default for --input-len etc. (dspark_sps_profiler.py).
DEFAULTS: dict[str, Any] = {
    "input_len": 16,
    "min_steady_steps": 32,
    "min_steady_seconds": 10.0,
    "round_timeout": 300.0,
}
# The verify-budget fractions of the off-diagonal sweep. sglang's --fracs has no
# default (omitted, the profiler runs the diagonal static sweep and fits the 1-D
# table); these eighths are the reference deployment's (the ombori 4x RTX PRO
# 6000 README's "Regenerating the SPS table": --fracs 0.125 ... 1.0), the sweep
# its shipped gamma-7 additive table was fit from.
REFERENCE_FRACS = (0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0)
FIT_TIMEOUT_S = 300.0
ABORT_TIMEOUT_S = 10.0


class DeadlineReached(UserError):
    pass


@dataclass(frozen=True)
class Rounds:
    """The profiler's per-round settings (its own flags)."""

    input_len: int = DEFAULTS["input_len"]
    min_steady_steps: int = DEFAULTS["min_steady_steps"]
    min_steady_seconds: float = DEFAULTS["min_steady_seconds"]
    round_timeout: float = DEFAULTS["round_timeout"]

    def argv(self) -> list[str]:
        return [
            "--input-len",
            str(self.input_len),
            "--min-steady-steps",
            str(self.min_steady_steps),
            "--min-steady-seconds",
            f"{self.min_steady_seconds:g}",
            "--round-timeout",
            f"{self.round_timeout:g}",
        ]


@dataclass
class Python:
    """Where the profiler runs: a Python with sglang, or the image (in_image)."""

    python: str
    in_image: InImage | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # Words between the Python and its `-m`/`-c`: runner.WHEEL_RUNNER's, when sglang
    # comes from the release's wheel (a Python without sglang, the mock's).
    prefix: tuple[str, ...] = ()

    def command(self, args: Sequence[str], workdir: Path, name: str) -> list[str]:
        if self.in_image is not None:
            return self.in_image.python(list(args), workdir, name)
        return [self.python, *self.prefix, *args]

    def fixed_code(self) -> list[str] | None:
        """What names the profiler's code when that code cannot change under the same
        words: a release's wheel (the prefix names its version; the tree is that wheel
        as shipped). None for a Python or an image with sglang installed, which an
        upgrade changes in place."""
        return [self.python, *self.prefix] if self.prefix and self.in_image is None else None

    def sweep(self, max_per_rank: int, workdir: Path) -> list[int]:
        """The profiler's own batch-size sweep up to max_per_rank (its function)."""
        asked = _asked(self, max_per_rank)
        if asked is not None:
            kept = _read_session(workdir).get(ASKED)
            if isinstance(kept, dict) and kept.get("of") == asked and kept.get("sweep"):
                return [int(v) for v in kept["sweep"]]
        code = (
            "import json; from sglang.benchmark.dspark_sps_profiler import "
            f"build_request_count_sweep as s; print(json.dumps(s({max_per_rank})))"
        )
        done = bounded.run(
            self.command(["-c", code], workdir, "sm12x-tune-sweep"), timeout=300, env=self.env
        )
        lines = (done.stdout or "").strip().splitlines()
        try:
            values = json.loads(lines[-1]) if done.returncode == 0 and lines else None
        except ValueError:
            values = None
        if not isinstance(values, list) or not values:
            said = done.error or summarise((done.stderr or done.stdout).splitlines())
            raise UserError(f"sglang's SPS profiler did not start ({MODULE}): {said}")
        return [int(v) for v in values]


# The session's record of the sweep the profiler gave (Python.sweep, Work.remember):
# build_request_count_sweep is a pure function of its release's code and the top, so
# phase 2 and a resumed run reuse it instead of a process that imports the profiler.
ASKED = "sweep_asked"


def _asked(python: Python, max_per_rank: int) -> dict[str, Any] | None:
    code = python.fixed_code()
    return None if code is None else {"python": code, "max_per_rank": int(max_per_rank)}


def _read_session(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / SESSION).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def has_session(folder: Path) -> bool:
    """Whether earlier work is in folder (without it Work.open starts anew)."""
    return (folder / SESSION).is_file()


@dataclass
class Work:
    """The work folder of one table: the session and its profiler segments."""

    folder: Path
    session: dict[str, Any]

    @classmethod
    def open(
        cls, folder: Path, identity: dict[str, Any], fresh: bool, say: Callable[[str], None]
    ) -> Work:
        """Resume the work for the same measurement, or start anew (saying why)."""
        path = folder / SESSION
        if path.is_file() and not fresh:
            try:
                old = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                old = None
            if isinstance(old, dict) and old.get("identity") == identity:
                work = cls(folder, old)
                if work.finished():
                    say(
                        f"resuming: {len(work.finished())} round(s) already measured are kept "
                        f"({folder})"
                    )
                return work
            say(f"earlier work in {folder} was for another measurement: starting anew")
        elif path.is_file():
            say(f"--fresh: discarding earlier work in {folder}")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        work = cls(folder, {"identity": identity, "skipped": [], "segments": 0})
        work.save()
        return work

    def remember(self, python: Python, max_per_rank: int, sweep: Sequence[int]) -> None:
        """Keep the sweep the profiler gave up to max_per_rank, for Python.sweep next time."""
        asked = _asked(python, max_per_rank)
        if asked is not None and self.session.get(ASKED, {}).get("of") != asked:
            self.session[ASKED] = {"of": asked, "sweep": list(sweep)}
            self.save()

    def save(self) -> None:
        temporary = self.folder / f".{SESSION}.tmp"
        temporary.write_text(json.dumps(self.session, indent=2) + "\n", encoding="utf-8")
        temporary.replace(self.folder / SESSION)

    def finished(self) -> dict[Cell, dict[str, Any]]:
        """Finished cells by (batch size per rank, fraction), from every segment's
        rounds file, the first of each kept (a line cut off mid-write is not a
        finished cell)."""
        rounds: dict[Cell, dict[str, Any]] = {}
        for path in sorted(self.folder.glob("seg-*/table.rounds.jsonl")):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    item = json.loads(line)
                    frac = item.get("frac")
                    cell = (int(item["batch_size_per_rank"]), None if frac is None else float(frac))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
                rounds.setdefault(cell, item)
        return rounds

    def missing(
        self, sweep: Sequence[int], fracs: Sequence[float | None]
    ) -> dict[int, list[float | None]]:
        """The fractions still to measure (None: the diagonal), per batch size not skipped."""
        done = self.finished()
        out = {}
        for bs in sweep:
            if bs in self.skipped:
                continue
            left = [f for f in fracs if (bs, _frac(f)) not in done]
            if left:
                out[bs] = left
        return out

    def complete(self, fracs: Sequence[float | None]) -> list[int]:
        """The batch sizes every fraction of which is measured."""
        done = self.finished()
        sizes = {bs for bs, _ in done}
        return sorted(b for b in sizes if all((b, _frac(f)) in done for f in fracs))

    @property
    def skipped(self) -> list[int]:
        return list(self.session.get("skipped", []))

    def new_segment(self) -> Path:
        self.session["segments"] = int(self.session.get("segments", 0)) + 1
        self.save()
        folder = self.folder / f"seg-{self.session['segments']:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder


Cell = tuple[int, float | None]


def _frac(value: float | None) -> float | None:
    return None if value is None else float(value)


@dataclass
class Outcome:
    exit_code: int | None
    tail: list[str]
    killed: bool


def run_profiler(
    python: Python,
    args: Sequence[str],
    workdir: Path,
    log_path: Path,
    *,
    deadline_at: float,
    on_tick: Callable[[], None],
) -> Outcome:
    """One profiler process, its output to log_path; killed (with its process
    group) at deadline_at. on_tick runs about twice a second (the progress)."""
    name = f"sm12x-tune-{workdir.name}"
    argv = python.command(args, workdir, name)
    tail: list[str] = []
    with log_path.open("a", encoding="utf-8", errors="replace") as log:
        log.write("$ " + shlex.join(argv) + "\n")
        log.flush()
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(python.env),
                cwd=workdir,
                start_new_session=True,
            )
        except OSError as exc:
            raise UserError(f"could not start {argv[0]}: {exc.strerror or exc}") from None
        reader = threading.Thread(
            target=pump, args=(proc, log, tail, None, lambda t: t), daemon=True
        )
        reader.start()
        killed = False
        try:
            while proc.poll() is None:
                if time.monotonic() >= deadline_at:
                    killed = True
                    kill_group(proc)
                    break
                on_tick()
                try:
                    proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
        except BaseException:
            kill_group(proc)
            raise
        finally:
            if python.in_image is not None and (killed or (proc.returncode or 0) < 0):
                python.in_image.stop(name)
        reader.join(timeout=10)
    on_tick()
    return Outcome(proc.returncode, tail, killed)


def abort_all(base_url: str) -> None:
    """Drop the load a killed profiler left running (sglang's /abort_request)."""
    provenance.request_json(
        "POST", f"{base_url}/abort_request", None, ABORT_TIMEOUT_S, {"abort_all": True}
    )


def fit(
    python: Python, work: Work, rounds: dict[Cell, dict[str, Any]], log_path: Path, timeout: float
) -> str:
    """The profiler's `fit` over every finished cell; the table's JSON text."""
    folder = work.folder / "fit"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    lines = [json.dumps(rounds[cell]) for cell in sorted(rounds, key=lambda c: (c[0], c[1] or 0))]
    (folder / "table.rounds.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = python.command(
        ["-m", MODULE, "fit", "--out", str(folder / "table.json"), "--no-plot"],
        work.folder,
        "sm12x-tune-fit",
    )
    done = bounded.run(argv, timeout=timeout, env=python.env, cwd=str(work.folder))
    with log_path.open("a", encoding="utf-8") as log:
        log.write("$ " + shlex.join(argv) + "\n" + (done.stdout or "") + (done.stderr or ""))
    table = folder / "table.json"
    if done.returncode != 0 or not table.is_file():
        said = done.error or summarise(((done.stderr or "") + (done.stdout or "")).splitlines())
        raise UserError(f"sglang's SPS profiler could not fit the table: {said} (log: {log_path})")
    return table.read_text(encoding="utf-8")


def session_identity(
    key: Any, rounds: Rounds, sweep: Sequence[int], fracs: Sequence[float]
) -> dict[str, Any]:
    """What makes earlier cells reusable: the same table, settings and sweep."""
    return {
        "key": asdict(key),
        "rounds": asdict(rounds),
        "sweep": list(sweep),
        "fracs": [float(f) for f in fracs],
    }
