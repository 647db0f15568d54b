"""Running a command with a wall-clock limit and a cap on what it prints.

`subprocess.run(..., timeout=)` kills only the command it started, then waits
for its output pipes to close: a grandchild holding them (the docker CLI runs
its compose plugin as one) makes that wait endless, and `capture_output` keeps
all a runaway command prints. Here the command gets a process group of its
own, killed whole at the deadline or once it has printed more than the cap.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_OUTPUT = 4 * 1024 * 1024
# After the command exits, how long a grandchild may keep its pipes open.
EXIT_GRACE_S = 1.0


@dataclass(frozen=True)
class Finished:
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None  # why there is no usable result: timed out, too much output


def run(
    argv: Sequence[str],
    timeout: float,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    max_output: int = MAX_OUTPUT,
) -> Finished:
    """Run argv; never raises for what the command does, never outlives timeout."""
    name = " ".join(list(argv)[:3])
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return Finished(None, error=f"{argv[0]}: {exc.strerror or exc}")
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None and proc.stderr is not None  # both PIPE
    out: dict[Any, bytearray] = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    error = None
    exited_at = None
    with selectors.DefaultSelector() as selector:
        for stream in out:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and (now - exited_at > EXIT_GRACE_S or now >= deadline):
                break  # the command is done; something it left behind holds the pipes
            if now >= deadline:
                error = f"`{name}` did not answer within {timeout:g} s"
                break
            for key, _ in selector.select(timeout=min(deadline - now, 0.25)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                out[key.fileobj] += chunk
                if sum(len(b) for b in out.values()) > max_output:
                    error = f"`{name}` printed more than {max_output // 1024**2} MiB; stopped"
                    break
            if error:
                break
    _kill_group(proc)
    for stream in out:
        stream.close()
    stdout, stderr = (bytes(b).decode("utf-8", "replace") for b in out.values())
    return Finished(None if error else proc.returncode, stdout, stderr, error)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill what is left of the command's process group and reap the command."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
