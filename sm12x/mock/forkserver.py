"""Fork instead of importing again: many short runs of sglang's code on one CPU machine.

On a machine without a GPU, `python -m sm12x.mock.wheel_python VERSION -m
sglang.benchmark.dspark_sps_profiler ...` spends about 5 of its 7 CPU seconds
importing torch, transformers and sglang's benchmark modules before it sends
its first request, and the test suite runs some forty of them (tune's
profiler and fit, bench's client). With `SM12X_MOCK_FORKSERVER` set to a
folder, the second run of a kind starts a zygote there that imports once,
waits for it, and is the first of the runs it forks a child for (a kind run
once is not worth a zygote; a second run that imported beside its zygote's
import would import twice at once). The run's own process
hands the child its stdin, stdout and stderr, its argv, environment and
working folder, passes on the signals it gets, and exits as the child did.
Unset (the default: everywhere but the test suite) none of this runs.

A zygote serves a run only where nothing its import could have read differs:
- its key: the interpreter, what runs (the sglang tree, pristine or patched,
  and the module), and every PYTHON* variable (the interpreter's own input);
- the environment: each variable the import read by name (recorded by an
  `os.environ` that notes reads) has the run's value, or is absent in both;
  if the import iterated the whole environment, all of it must be equal.
Otherwise the run imports for itself, as it would without the zygote, and a
line in the folder's log says why.

The child is the zygote's copy after the import. It gets the run's fds,
environment (os.environ, so what it starts inherits it), folder, argv and
default signal handlers, runs, runs the exit handlers and exits; the zygote
sends the wait status back. A pipe whose other end only the run's process
holds tells the child when that process is gone, even killed, and the child
is killed with it: no child outlives its run.

A zygote ends when the folder's `owner` process is gone (the test session),
when the folder is removed, or after IDLE_S without a run (IDLE_ENV's seconds,
where set); a key whose zygote idled out gets a new one at its next two runs.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

ENV = "SM12X_MOCK_FORKSERVER"
IDLE_S = 300  # each holds torch and sglang: a kind's runs come close together
IDLE_ENV = "SM12X_MOCK_FORKSERVER_IDLE_S"
POLL_S = 2.0
CONNECT_S = 5.0
READY_S = 180.0  # the run that starts a zygote waits this long for its import at most
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
# The run's fds the child takes: stdin, stdout, stderr, then the life pipe's read end.
FDS = 4
PRINTED: dict[int, bytes] = {}  # what the zygote's import printed, by fd


# Iterations of the whole environment that keep only names with a prefix, by the
# code that makes them (tests/unit/test_forkserver.py reads each function): every
# variable with the prefix is then an input of the import, not the whole environment.
KNOWN_SCANS: dict[tuple[str, str], str | None] = {
    ("tqdm/utils.py", "<genexpr>"): "TQDM_",  # env_wrap(prefix="TQDM_")
    ("fsspec/config.py", "set_conf_env"): "FSSPEC",
    ("sglang/srt/environ.py", "_convert_SGL_to_SGLANG"): "SGL_",  # 0.5.17
    ("sglang/srt/environ.py", "_handle_deprecated_envs"): "SGL_",  # 0.5.23
    # (3.11 runs the comprehension in _set_configs_from_environment as a frame)
    ("networkx/utils/backends.py", "<dictcomp>"): "NETWORKX_BACKEND_PRIORITY",
    # Copied whole at import into BaseHandler.os_environ, the start of each request's
    # environ in wsgiref's WSGI servers (prometheus_client imports it for its
    # start_http_server); what the zygotes run serves over uvicorn and starts none.
    ("wsgiref/handlers.py", "read_environ"): None,
}


def _known(filename: str, function: str) -> tuple[bool, str | None]:
    """(whether KNOWN_SCANS has the scanning code, the prefix it reads or None)."""
    for (suffix, name), prefix in KNOWN_SCANS.items():
        if filename.endswith(suffix) and function == name:
            return True, prefix
    return False, None


class RecordingEnviron(MutableMapping):
    """os.environ that notes each variable read by name, and whether anything
    iterated the whole environment, while `recording` is on. Writes go through."""

    def __init__(self, real: MutableMapping[str, str]):
        self.real = real
        self.recording = True
        self.reads: set[str] = set()
        self.prefixes: set[str] = set()  # of the KNOWN_SCANS seen
        self.scans: list[str] = []  # file:function of every other iteration of the whole

    def _note(self, key: object) -> None:
        if not (self.recording and isinstance(key, str)):
            return
        # items()/values() and a known scan's dict(os.environ) read every name for
        # an iteration, recorded as that
        code = sys._getframe(2).f_code
        if "_collections_abc" in code.co_filename or _known(code.co_filename, code.co_name)[0]:
            return
        self.reads.add(key)

    def __getitem__(self, key: str) -> str:
        self._note(key)
        return self.real[key]

    def get(self, key: str, default: Any = None) -> Any:
        self._note(key)
        return self.real.get(key, default)

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return key in self.real

    def _scan(self) -> None:
        if not self.recording:
            return
        frame: types.FrameType | None = sys._getframe(2)
        while frame is not None and "_collections_abc" in frame.f_code.co_filename:
            frame = frame.f_back
        where = (frame.f_code.co_filename, frame.f_code.co_name) if frame else ("?", "?")
        known, prefix = _known(*where)
        if prefix:
            self.prefixes.add(prefix)
        elif not known:
            self.scans.append(":".join(where))

    def __iter__(self) -> Iterator[str]:
        self._scan()
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)

    def __setitem__(self, key: str, value: str) -> None:
        self.real[key] = value

    def __delitem__(self, key: str) -> None:
        del self.real[key]

    def copy(self) -> dict[str, str]:
        self._scan()
        return dict(self.real)


def key_of(spec: Mapping[str, Any], env: Mapping[str, str]) -> str:
    data = {"python": sys.executable, "spec": spec, "env": _with("PYTHON", env)}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]


def _with(prefix: str, env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(prefix)}


def mismatch(hello: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """Why a zygote that imported with hello's record cannot serve env; None: it can."""
    if hello["scans"]:
        if dict(env) != hello["env"]:
            return f"the import iterated the environment ({hello['scans'][0]}), and it differs"
        return None
    for name, value in hello["reads"].items():
        if env.get(name) != value:
            return f"the import read {name}, and this run's value differs"
    for prefix in (*hello["prefixes"], "PYTHON"):
        if _with(prefix, env) != _with(prefix, hello["env"]):
            return f"the import read every {prefix}* variable, and this run's differ"
    return None


# --- the run's side ------------------------------------------------------------------


def _log(folder: Path, line: str) -> None:
    with contextlib.suppress(OSError), open(folder / "forkserver.log", "a") as log:
        log.write(f"{time.strftime('%H:%M:%S')} {os.getpid()} {line}\n")


def variant_of(base: str, record: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """The key of the zygote for env among those of one kind (base): the values of
    what an import of that kind read (record: a ready zygote's reads and scans)."""
    data = {
        "base": base,
        "reads": {name: env.get(name) for name in record["reads"]},
        "prefixes": {prefix: _with(prefix, env) for prefix in record["prefixes"]},
        "whole": dict(env) if record["scans"] else None,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]


def _record(home: Path, base: str) -> dict[str, Any] | None:
    """What the first zygote of this kind read while importing, once it has."""
    try:
        return json.loads((home / f"{base}.reads.json").read_text())
    except (OSError, ValueError):
        return None


def keys(home: Path, spec: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str, str]:
    """(the run's kind, the key of the zygote that may serve it). Until a zygote of
    the kind has imported, what the import reads is unknown and the key is the
    kind's; its first zygote then listens at the key of its own values."""
    base = key_of(spec, env)
    record = _record(home, base)
    return base, base if record is None else variant_of(base, record, env)


def enabled() -> Path | None:
    """The zygotes' folder where the variable names one (the test session's)."""
    folder = os.environ.get(ENV)
    return Path(folder) if folder and Path(folder).is_dir() else None


def run(spec: Mapping[str, Any], argv: list[str]) -> int | None:
    """Run `spec`'s entry with argv in a child of its zygote; the exit code, or None
    where no zygote serves it (then the caller runs it itself, as always)."""
    home = enabled()
    if home is None:
        return None
    env = dict(os.environ)
    base, key = keys(home, spec, env)
    conn = _connect(home, key)
    if conn is None:
        zygote = _start(home, base, key, spec)
        if zygote is None:
            return None
        # The run that started the zygote waits for it and is its first served run:
        # running itself beside the zygote's import would import twice at once.
        conn = _when_ready(home, spec, env, zygote)
        if conn is None:
            return None
        key = keys(home, spec, env)[1]
    with conn:
        return _served(conn, home, key, env, argv)


def _connect(home: Path, key: str) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(CONNECT_S)
    # A socket's path has at most 107 bytes, and a test's folder is longer: the
    # path through this process's own fd of the folder is short whatever it is.
    folder_fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        conn.connect(f"/proc/self/fd/{folder_fd}/{key}.sock")
    except OSError:
        conn.close()
        return None
    finally:
        os.close(folder_fd)
    return conn


def _when_ready(
    home: Path, spec: Mapping[str, Any], env: Mapping[str, str], zygote: subprocess.Popen
) -> socket.socket | None:
    """A connection to the zygote this run started, once it listens; None if it
    ended first or is not listening after READY_S (the run then imports itself).
    The key is read again each time: a kind's first zygote listens at the key of
    the values its import read, known once it has imported."""
    deadline = time.monotonic() + READY_S
    while zygote.poll() is None and time.monotonic() < deadline:
        conn = _connect(home, keys(home, spec, env)[1])
        if conn is not None:
            return conn
        time.sleep(0.05)
    why = "ended" if zygote.poll() is not None else f"was not listening after {READY_S:.0f} s"
    _log(home, f"the zygote this run started {why}: the run imports itself")
    return None


def _start(home: Path, base: str, key: str, spec: Mapping[str, Any]) -> subprocess.Popen | None:
    """Start the key's zygote at the key's second run (a key seen once, a test's
    own environment, is not worth an import of its own), and only once: whoever
    creates its lock file starts it (and waits for it: `_when_ready`)."""
    seen = home / f"{key}.seen"
    try:
        os.close(os.open(seen, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return None
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        os.close(os.open(home / f"{key}.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:
        return None
    log = open(home / f"{key}.log", "ab")  # noqa: SIM115 - the zygote's own stderr
    with log:
        zygote = subprocess.Popen(
            [sys.executable, __file__, str(home), base, json.dumps(spec)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=home,
            start_new_session=True,  # not in the run's process group: it outlives the run
        )
    _log(home, f"started a zygote for {key} of {base}: {json.dumps(spec)}")
    return zygote


def _served(
    conn: socket.socket, home: Path, key: str, env: dict[str, str], argv: list[str]
) -> int | None:
    life_read, life_write = os.pipe()
    # What this process ignores (a shell's background job ignores SIGINT) its child
    # ignores, as it would have inherited across exec.
    ignored = [int(n) for n in RELAYED if signal.getsignal(n) == signal.SIG_IGN]
    request = {"env": env, "cwd": os.getcwd(), "argv": argv, "orig_argv": sys.orig_argv,
               "ignored": ignored}  # fmt: skip
    reader = conn.makefile("rb")
    try:
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2, life_read])
        os.close(life_read)
        life_read = -1
        answer = json.loads(reader.readline() or b"{}")
    except (OSError, ValueError) as exc:
        # A zygote idling out as this connects, or too slow to answer: the run is
        # its own (a child forked meanwhile dies as life_write closes, unrun).
        answer = {"why": f"no answer ({exc!r})"}
    finally:
        if life_read >= 0:
            os.close(life_read)
    if not answer.get("served"):
        _log(home, f"not served: {answer.get('why', 'no answer')}")
        os.close(life_write)
        return None
    pid = answer["pid"]
    _log(home, f"served by {key}'s child {pid}")

    def relay(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in RELAYED:  # the ignored too: the child's code may handle them
        signal.signal(signum, relay)
    conn.settimeout(None)
    line = reader.readline()
    if not line:
        print(f"{ENV}: the zygote ended before its child {pid} did", file=sys.stderr)
        os.close(life_write)  # the child is killed with this end
        return 70
    status = json.loads(line)["status"]
    if os.WIFSIGNALED(status):
        ended_by = os.WTERMSIG(status)
        signal.signal(ended_by, signal.SIG_DFL)
        os.kill(os.getpid(), ended_by)
    return os.waitstatus_to_exitcode(status)


# --- the zygote ----------------------------------------------------------------------


def _entry(name: str) -> Any:
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def serve(home: Path, base: str, spec: dict[str, Any]) -> int:
    try:  # read before the recording: not an input of the import
        idle_s = float(os.environ.get(IDLE_ENV) or IDLE_S)
    except ValueError:
        idle_s = IDLE_S
    before = dict(os.environ)
    recorder = RecordingEnviron(os.environ)
    real = os.environ
    # Replaced, not cleared: every value stays, and os.getenv reads this global too.
    os.environ = recorder  # type: ignore[assignment]  # noqa: B003
    # What the import prints (sglang's warnings) each run prints: kept for the children.
    printed = {fd: tempfile.TemporaryFile() for fd in (1, 2)}  # noqa: SIM115
    saved = {fd: os.dup(fd) for fd in printed}
    for fd, file in printed.items():
        os.dup2(file.fileno(), fd)
    try:
        _entry(spec["setup"])(**spec["args"])
    finally:
        recorder.recording = False
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
    os.environ = real  # noqa: B003 - the real one back, for the children to set
    for fd, file in printed.items():
        file.seek(0)
        PRINTED[fd] = file.read()
        file.close()
    hello: dict[str, Any] = {"reads": {n: before.get(n) for n in sorted(recorder.reads)},
             "scans": recorder.scans, "prefixes": sorted(recorder.prefixes), "env": before}  # fmt: skip
    sys.stdout.flush()
    sys.stderr.flush()
    # What the import made lives as long as any run: out of the collector's sight,
    # so no child's collection walks (and so copies) the pages it shares with this.
    gc.collect()
    gc.freeze()
    # The kind's first zygote writes what its import read: the runs' keys are made of
    # those variables' values (a later one's own reads still decide whom it serves).
    record = _record(home, base)
    if record is None:
        record = {k: hello[k] for k in ("reads", "scans", "prefixes")}
        partial_record = home / f"{base}.reads.{os.getpid()}"
        partial_record.write_text(json.dumps(record))
        partial_record.replace(home / f"{base}.reads.json")
    key = variant_of(base, record, before)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    partial = home / f"{key}.sock.{os.getpid()}"
    listener.bind(partial.name)  # relative: this process works in home (the length limit)
    listener.listen(64)
    partial.replace(home / f"{key}.sock")  # connectable only once ready
    present = sorted(n for n, v in hello["reads"].items() if v is not None)
    print(f"ready: {len(hello['reads'])} reads (set: {present}), prefixes {hello['prefixes']}, "
          f"scans {hello['scans']}", flush=True)  # fmt: skip
    try:
        return _loop(listener, home, key, spec, hello, idle_s)
    finally:
        # Its key starts afresh: the next two runs of it start a new zygote (the
        # lock left behind would have kept the key unserved for the session).
        for name in (f"{key}.sock", f"{key}.seen", f"{key}.lock"):
            with contextlib.suppress(OSError):
                (home / name).unlink()


def _owner_alive(home: Path) -> bool:
    try:
        os.kill(int((home / "owner").read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def _loop(
    listener: socket.socket, home: Path, key: str, spec: dict, hello: dict, idle_s: float
) -> int:
    chooser = selectors.DefaultSelector()
    chooser.register(listener, selectors.EVENT_READ, None)
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, conn)
    last = time.monotonic()
    while True:
        for sel, _ in chooser.select(POLL_S):
            if sel.data is None:
                conn, _addr = listener.accept()
                child = _fork(conn, listener, chooser, spec, hello)
                if child is None:
                    conn.close()
                    continue
                pidfd = os.pidfd_open(child)
                children[pidfd] = (child, conn)
                chooser.register(pidfd, selectors.EVENT_READ, child)
            else:
                pid, conn = children.pop(sel.fd)
                chooser.unregister(sel.fd)
                os.close(sel.fd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError), conn:
                    conn.sendall(json.dumps({"status": status}).encode() + b"\n")
                last = time.monotonic()
        if not _owner_alive(home):
            return 0
        if not children and time.monotonic() - last > idle_s:
            return 0


def _fork(conn: socket.socket, listener: socket.socket, chooser: selectors.BaseSelector,
          spec: dict, hello: dict) -> int | None:  # fmt: skip
    conn.settimeout(CONNECT_S)
    try:
        data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, FDS)
        while not data.endswith(b"\n"):
            more = conn.recv(1 << 20)
            if not more:
                break
            data += more
        request = json.loads(data)
    except (OSError, ValueError):
        return None
    try:
        if len(fds) != FDS:
            return None
        why = mismatch(hello, request["env"])
        if why:
            conn.sendall(json.dumps({"served": False, "why": why}).encode() + b"\n")
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # never returns
            chooser.close()
            listener.close()
            conn.close()
            _child(fds, request, spec)
        conn.sendall(json.dumps({"served": True, "pid": pid}).encode() + b"\n")
        return pid
    finally:
        for fd in fds:
            os.close(fd)


def _child(fds: list[int], request: dict, spec: dict) -> None:
    code = 1
    try:
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        life = fds[3]
        for fd in fds:
            os.set_inheritable(fd, False)
        for signum in RELAYED:
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for signum in request["ignored"]:
            signal.signal(signum, signal.SIG_IGN)
        threading.Thread(target=_die_with_run, args=(life,), daemon=True).start()
        for fd, data in PRINTED.items():
            os.write(fd, data)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]
        sys.orig_argv = request["orig_argv"]
        unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
        for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
            stream.reconfigure(write_through=unbuffered, line_buffering=os.isatty(fd))  # type: ignore[union-attr]
        code = _run_entry(spec, request["argv"])
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter's exit
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - a crash of this code, reported as Python does
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run_entry(spec: dict, argv: list[str]) -> int:
    """The run's exit code, as `python` would make it of what the entry did."""
    try:
        _entry(spec["run"])(**spec["args"], argv=argv)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Python ends of an uncaught one by SIGINT itself
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException:  # noqa: BLE001 - as the interpreter reports an uncaught one
        traceback.print_exc()
        return 1
    return 0


def _die_with_run(life: int) -> None:
    while os.read(life, 1):
        pass
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    # Run as a file: this folder is sys.path[0], which would put sm12x/mock's
    # modules above every library of that name; the checkout's root instead.
    sys.path[0] = str(Path(__file__).resolve().parents[2])
    from sm12x.mock.forkserver import serve as _serve

    sys.exit(_serve(Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])))
