"""Run the real `sm12x` CLI as a user (or the container) would.

`run_sm12x` calls `sm12x.cli.main` in this process by default: the same code,
arguments, environment, working folder, standard streams and exit status as
`python -m sm12x.cli`, without a fresh interpreter's 1-3 s of imports per call
(what kept the unit tests from a fast tier). `process=True`, or
SM12X_CLI_PROCESS=1 for the whole run, starts the real process instead;
tests/integration start the CLI as a process on their own.

In process, what a separate process would isolate is isolated by hand:
- the environment is replaced by exactly the one the test passes, and restored;
- file descriptors 1 and 2 point at files for the call, so what a command's
  own children write lands in its output as it would through a pipe;
- `os.exec*` (launch hands the process over to sglang) runs the program as a
  child and exits with its status, which is what the caller of an exec sees;
- signal handlers, the working folder and sys.argv are put back;
- imports are a fresh process's: sys.path is what `python -m sm12x.cli` would
  start with (its folder first), sys.meta_path the interpreter's own, and any
  module a fresh process would not find where this one holds it (sglang as a
  test stubbed it or put a wheel tree on sys.path, a placeholder torchvision)
  is hidden for the call and put back after it, so what earlier tests in the
  same worker loaded never decides what the CLI sees;
- an exception that escapes is printed as a traceback with status 1, as the
  interpreter would.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import importlib.machinery
import io
import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import yaml

from tests.support import forkservers

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120
# The interpreter's own finders, before any test adds one (tests/conftest.py
# imports this module first thing).
_META_PATH = tuple(sys.meta_path)


def run_sm12x(
    *args: str,
    env: dict[str, str] | None = None,
    path: str | None = None,
    cwd: Path | None = None,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`sm12x ARGS` with a clean environment: only what the test passes.

    PATH defaults to the system folders (no nvidia-smi there on a CI box);
    pass `path` to put fakes first.
    """
    base = {
        "PATH": path or "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(ROOT),
        "LANG": "C.UTF-8",
        # No .env unless the test names one (--env-file or its own SM12X_ENV_FILE).
        "SM12X_ENV_FILE": os.devnull,
        # the session's zygotes (tests/support/forkservers.py): bench's and tune's
        # runs of sglang's code from its wheel fork instead of importing again
        **forkservers.passed(),
    }
    full_env = {**base, **(env or {})}
    where = cwd or ROOT
    if process or os.environ.get("SM12X_CLI_PROCESS") == "1":
        return subprocess.run(
            [sys.executable, "-m", "sm12x.cli", *args],
            env=full_env,
            cwd=where,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    return run_in_process(list(args), full_env, where)


def run_in_process(
    args: list[str], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """`sm12x.cli.main(args)` here, as `python -m sm12x.cli ARGS` would run it."""
    with (
        _environment(env),
        _working_folder(cwd),
        fresh_imports(cwd),
        _signals(),
        _exec_as_child(),
        _captured() as streams,
    ):
        saved_argv = sys.argv
        sys.argv = ["sm12x", *args]
        try:
            # Imported here: the sm12x a fresh process in `cwd` would import.
            cli = importlib.import_module("sm12x.cli")
            status = cli.main(args)
        except SystemExit as exc:
            status = _exit_status(exc.code)
        except BaseException:  # an escaped exception, as the interpreter shows it
            traceback.print_exc()
            status = 1
        finally:
            sys.argv = saved_argv
    out, err = streams.read()
    return subprocess.CompletedProcess(["sm12x", *args], status, out, err)


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message"): printed, status 1
    return 1


@functools.cache
def _fresh_path() -> tuple[str, ...]:
    """sys.path of a fresh `python -m sm12x.cli` with PYTHONPATH=ROOT, after its first
    entry (the working folder, which the call puts first itself)."""
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return tuple(json.loads(done.stdout))


_VERDICTS: dict[tuple[str, int, tuple[str, ...]], bool] = {}


def _held_elsewhere(top: str, module: object, path: list[str]) -> bool:
    """Would a fresh process with `path` find top-level `top` somewhere else, or not at all?"""
    # id() alone could be a freed module's; its origin too makes that harmless.
    spec = getattr(module, "__spec__", None)
    key = (top, id(module), getattr(spec, "origin", None), tuple(path))
    if key not in _VERDICTS:
        _VERDICTS[key] = _judge_held_elsewhere(top, module, path)
    return _VERDICTS[key]


def _judge_held_elsewhere(top: str, module: object, path: list[str]) -> bool:
    if top in sys.builtin_module_names or top in ("__main__", "__mp_main__"):
        return False
    spec = getattr(module, "__spec__", None)
    if spec is None:  # made by hand: a test's stub
        return True
    if spec.origin in ("built-in", "frozen"):
        return False
    fresh = importlib.machinery.PathFinder.find_spec(top, path)
    if fresh is None:
        return True
    if spec.origin or fresh.origin:
        return spec.origin != fresh.origin
    return list(spec.submodule_search_locations or ()) != list(
        fresh.submodule_search_locations or ()
    )


@contextlib.contextmanager
def fresh_imports(cwd: Path) -> Iterator[None]:
    """For the block, the imports a fresh `python -m` in `cwd` would have (the
    module docstring says what that hides); tests/conftest.py runs every fast-tier
    test inside one, so what a wheel test left in the worker never reaches it."""
    path = [str(cwd), *_fresh_path()]
    tops = {name for name in sys.modules if "." not in name}
    foreign = {top for top in tops if _held_elsewhere(top, sys.modules[top], path)}
    hidden = {
        name: module for name, module in sys.modules.items() if name.partition(".")[0] in foreign
    }
    for name in hidden:
        del sys.modules[name]
    saved_path, saved_meta = sys.path[:], sys.meta_path[:]
    sys.path[:] = path
    sys.meta_path[:] = _META_PATH
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path[:] = saved_path
        sys.meta_path[:] = saved_meta
        for name in [n for n in sys.modules if n.partition(".")[0] in foreign]:
            del sys.modules[name]  # the call's own copies of what it could not see
        sys.modules.update(hidden)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _working_folder(cwd: Path) -> Iterator[None]:
    saved = os.getcwd()
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved)


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    names = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM)
    saved = {sig: signal.getsignal(sig) for sig in names}
    try:
        yield
    finally:
        signal.alarm(0)
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _exec_as_child() -> Iterator[None]:
    """The exec family runs the program to its end, then the call exits with its status."""

    def execute(program: str, argv: list[str], env: dict[str, str] | None) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        done = subprocess.run(
            [program, *list(argv)[1:]],
            env=dict(os.environ) if env is None else dict(env),
            timeout=TIMEOUT_S,
            check=False,
        )
        raise SystemExit(done.returncode if done.returncode >= 0 else 128 - done.returncode)

    replacements = {
        "execv": lambda program, argv: execute(program, argv, None),
        "execve": lambda program, argv, env: execute(program, argv, env),
        "execvp": lambda program, argv: execute(program, argv, None),
        "execvpe": lambda program, argv, env: execute(program, argv, env),
    }
    saved = {name: getattr(os, name) for name in replacements}
    for name, fn in replacements.items():
        setattr(os, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(os, name, fn)


class _Streams:
    """What the call wrote on stdout and stderr, filled in when it ends."""

    def __init__(self) -> None:
        self.text = ("", "")

    def read(self) -> tuple[str, str]:
        return self.text


@contextlib.contextmanager
def _captured() -> Iterator[_Streams]:
    """fds 1 and 2 (and sys.stdout/err over them) into files for the call; stdin empty."""
    streams = _Streams()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved_sys = (sys.stdin, sys.stdout, sys.stderr)
        for handle in saved_sys[1:]:
            handle.flush()
        saved_fds = (os.dup(1), os.dup(2))
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        wrappers = [
            io.TextIOWrapper(
                io.FileIO(fd, "w", closefd=False), encoding="utf-8", write_through=True
            )
            for fd in (1, 2)
        ]
        sys.stdin = io.StringIO("")
        sys.stdout, sys.stderr = wrappers
        try:
            yield streams
        finally:
            for wrapper in wrappers:
                with contextlib.suppress(ValueError, OSError):
                    wrapper.flush()
            sys.stdin, sys.stdout, sys.stderr = saved_sys
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
            streams.text = (_read(out), _read(err))


def _read(handle: IO[bytes]) -> str:
    handle.seek(0)
    return handle.read().decode("utf-8", errors="replace")


def fake_nvidia_smi(tmp_path: Path, body: str) -> str:
    """A bin folder whose nvidia-smi runs `body`; returns a PATH with it first.

    The fake refuses any other arguments than the query sm12x documents, so a
    change to the query shows up here.
    """
    from sm12x.launch import gpus

    query = " ".join(gpus.QUERY[1:])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$*" != {shlex.quote(query)} ]; then echo "unexpected args: $*" >&2; exit 64; fi\n'
        + body
        + "\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return f"{bin_dir}:/usr/bin:/bin"


def raw_recipe(name: str) -> dict:
    """A shipped recipe as a plain dict, to mutate into failing examples."""
    text = (ROOT / "recipes" / f"{name}.yaml").read_text()
    return copy.deepcopy(yaml.safe_load(text))


def write_recipe(tmp: Path, data: dict, name: str = "case.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def assert_one_clear_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Non-zero exit, exactly one stderr line, no traceback, and it says what it must."""
    assert result.returncode != 0, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]
