"""`sm12x launch --dry-run` once per environment, all in one container of the image.

tests/integration/test_image.py holds the image's dry run of every recipe to its
golden command. One `docker run` per recipe paid a container start and, on the
current track, 5 CPU s of importing sglang's server arguments (torch and
transformers under them) per run. This runs inside the image instead, as
`python3 -c <this file> CASES` (CASES: a JSON list of environments, each
what `docker run -e` would add): it imports what the launcher imports once,
then forks a child per case, which runs the image's own `sm12x` console script
entry with `launch --dry-run`, the image's environment plus the case's, and
stdout and stderr of its own. It prints one JSON list: per case, the exit code,
stdout and stderr, and whether it was forked.

The import cannot answer for a case whose variables it read: each variable the
import read by name is recorded (sm12x.mock.forkserver's RecordingEnviron), and
a case that sets one of them, or any case after an import that iterated the
whole environment, runs in a fresh process of the console script instead. What
the import printed is printed again at the start of each forked child's output,
as a fresh process would. test_image.py also runs some recipes with a real
`docker run` and holds those to this one's answer.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

# What `sm12x launch` imports in the image: the CLI, and sglang's server arguments
# (sm12x.sglang_parser.real_parser: the image's sglang is the judge of the argv;
# where they do not import, the launcher reads the parser's description, and a
# child's import fails again as a fresh process's would).
PRELOAD = ("sm12x.cli", "sglang.srt.server_args")
ARGV = ["launch", "--dry-run"]


def entry_point():
    (found,) = [
        e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == "sm12x"
    ]
    return found


def exit_code(value: object) -> int:
    """What the interpreter exits with for sys.exit(value)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def preload() -> tuple[set[str], list[str], set[str], dict[int, bytes]]:
    """Import PRELOAD with reads recorded: (names read, whole-environment
    iterations not known, prefixes scanned, what it printed by fd)."""
    from sm12x.mock.forkserver import RecordingEnviron

    recorder = RecordingEnviron(os.environ)
    real = os.environ
    printed = {fd: tempfile.TemporaryFile() for fd in (1, 2)}  # noqa: SIM115
    saved = {fd: os.dup(fd) for fd in printed}
    for fd, file in printed.items():
        os.dup2(file.fileno(), fd)
    # Replaced, not cleared (as the forkserver does): os.getenv reads this global too.
    os.environ = recorder  # type: ignore[assignment]  # noqa: B003
    try:
        for module in PRELOAD:
            before = set(sys.modules)
            try:
                importlib.import_module(module)
            except ImportError:  # as the launcher takes it: the parser's description
                # What the failed import left of its package goes, so a child's
                # import is a first attempt, as in a fresh process.
                top = module.split(".")[0]
                for name in set(sys.modules) - before:
                    if name == top or name.startswith(top + "."):
                        del sys.modules[name]
        entry_point().load()
    finally:
        recorder.recording = False
        os.environ = real  # noqa: B003 - the real one back
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
    out = {}
    for fd, file in printed.items():
        file.seek(0)
        out[fd] = file.read()
        file.close()
    return recorder.reads, recorder.scans, recorder.prefixes, out


def forked(main, base: dict[str, str], case: dict[str, str], printed: dict[int, bytes]) -> dict:
    files = {fd: tempfile.TemporaryFile() for fd in (1, 2)}  # noqa: SIM115
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70
        try:
            for fd, file in files.items():
                os.dup2(file.fileno(), fd)
                os.write(fd, printed[fd])
            os.environ.clear()
            os.environ.update({**base, **case})
            sys.argv = [shutil.which("sm12x") or "sm12x", *ARGV]
            try:
                code = exit_code(main())
            except SystemExit as stop:
                code = exit_code(stop.code)
            except BaseException:
                traceback.print_exc()
                code = 1
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    out = {}
    for fd, file in files.items():
        file.seek(0)
        out[fd] = file.read().decode()
        file.close()
    return {
        "code": os.waitstatus_to_exitcode(status),
        "stdout": out[1],
        "stderr": out[2],
        "forked": True,
    }


def fresh(base: dict[str, str], case: dict[str, str]) -> dict:
    script = shutil.which("sm12x")
    assert script, "no sm12x on PATH"
    proc = subprocess.run(
        [script, *ARGV],
        env={**base, **case},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return {"code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "forked": False}


def main() -> int:
    cases: list[dict[str, str]] = json.loads(sys.argv[1])
    script = shutil.which("sm12x")
    with open(script or "", encoding="utf-8") as handle:
        shebang = handle.readline()[2:].strip()
    # The console script's own interpreter, or the imports would be another Python's.
    if os.path.realpath(shebang) != os.path.realpath(sys.executable):
        print(f"run this with {shebang}, not {sys.executable}", file=sys.stderr)
        return 2
    base = dict(os.environ)
    reads, scans, prefixes, printed = preload()
    main_of_script = entry_point().load()
    results = []
    for case in cases:
        read = sorted(n for n in case if n in reads or n.startswith(tuple(prefixes)))
        if scans or read:
            result = fresh(base, case)
            result["why_fresh"] = f"the import read {read}" if read else f"it scanned {scans}"
        else:
            result = forked(main_of_script, base, case, printed)
        results.append(result)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
