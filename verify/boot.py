"""Boot mode: start the server, follow its log, stop early on a known failure,
wait for health with a deadline.

The server is started by a Launcher (the commands that start it, follow its
log and take it down: sm12x.deploy.compose gives one for a compose service)
or by any command (its own output is the log). This module knows nothing of
compose or of sm12x's launcher: it runs the commands it is given. The log
drives a progress display (weight loading, CUDA graph capture) and is
matched against KNOWN_FAILURES.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import httpx
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from sm12x.http import transport
from sm12x.http.transport import Limits, auth_hint

HEALTH_LIMITS = Limits(timeout=5.0, stall=2.0, connect=2.0, max_body=64 * 1024)

PATCH_FIX = (
    "run an sm12x image (its sglang carries the sm_12x sparse-MLA dispatch patch): "
    "`sm12x launch` / the compose profiles use it; or lower DSPARK to a supported "
    "configuration"
)

# (pattern, problem, likely cause, fix): first match in the log stops the boot.
KNOWN_FAILURES = [
    (
        re.compile(r"num_tokens\s*>\s*64|ICHECK_GT\(num_tokens, 64\)"),
        "sparse-MLA prefill check `num_tokens > 64` failed",
        "the unpatched sm_120 sparse-MLA dispatch sends a DSPARK draft batch (topk 192) to the "
        "prefill kernel: the known boot crash of sglang 0.5.16-0.5.18 with DSPARK on sm_12x",
        PATCH_FIX,
    ),
    (
        re.compile(r"Unsupported sparse-MLA prefill configuration"),
        "`Unsupported sparse-MLA prefill configuration`",
        "flashinfer has no sm_120 prefill kernel for DSPARK's topk 192: the same unpatched dispatch",
        PATCH_FIX,
    ),
    (
        re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"),
        "CUDA out of memory",
        "the weights, KV cache and CUDA graphs do not fit at this --mem-fraction-static",
        "lower --mem-fraction-static (by 0.02-0.05) or --cuda-graph-max-bs / "
        "--max-running-requests; check nothing else holds GPU memory (nvidia-smi)",
    ),
    (
        re.compile(
            r"NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|"
            r"ncclRemoteError|NCCL WARN .*(failed|Error)"
        ),
        "NCCL error",
        "the GPUs cannot talk: P2P over PCIe without custom all-reduce disabled, wrong "
        "NCCL_SOCKET_IFNAME / NCCL_IB_HCA (DGX Spark), or a peer that died",
        "keep --disable-custom-all-reduce (the recipes set it); on DGX Spark check the NCCL_* "
        "interface and HCA names and that both nodes run the same image",
    ),
    (
        re.compile(r'could not select device driver "nvidia"'),
        "no NVIDIA container runtime",
        "Docker cannot give the container GPUs",
        "install nvidia-container-toolkit and restart dockerd",
    ),
    (
        re.compile(r"\bKilled\b|exited with code 137|OOMKilled"),
        "the server process was killed (exit 137)",
        "the host ran out of memory while loading (DGX Spark's unified memory)",
        "lower --mem-fraction-static, add swap, use fewer loader threads",
    ),
]
READY = re.compile(r"The server is fired up and ready to roll")
WEIGHTS = re.compile(r"Loading safetensors checkpoint shards:\s*(\d+)%")
GRAPHS = re.compile(r"Capturing batches \(bs=\d+[^)]*\):\s*(\d+)%|Capture cuda graph begin")
# A JIT compile at first boot (minutes, and sglang says nothing meanwhile):
# flashinfer >= 0.7's own line (jit/core.py, "Building JIT module %s; this can
# take several minutes on first use.") and sm12x launch's announcement
# (sm12x/gpucode/firstboot.py PREFIX), which names the module for older ones.
COMPILING = re.compile(
    r"Building JIT module (\S+?);|sm12x: first boot compiles JIT module \w+ (\S+)"
)


def compiling(line: str) -> str | None:
    """The JIT module a log line says is being compiled, or None."""
    m = COMPILING.search(line)
    return (m.group(1) or m.group(2)) if m else None


class BootFailure(Exception):
    def __init__(self, problem: str, cause: str, fix: str, log_tail: list[str]):
        super().__init__(problem)
        self.problem, self.cause, self.fix, self.log_tail = problem, cause, fix, log_tail


def scan(line: str) -> tuple[str, str, str] | None:
    """The known failure a log line shows, or None."""
    for pattern, problem, cause, fix in KNOWN_FAILURES:
        if pattern.search(line):
            return problem, cause, fix
    return None


class Launcher(Protocol):
    """What boot mode needs from whatever starts the server: three commands."""

    @property
    def up(self) -> list[str]: ...  # starts it and returns (compose up -d)

    @property
    def logs(self) -> list[str]: ...  # follows its log until it stops

    @property
    def down(self) -> list[str]: ...  # takes it down


@dataclass
class Server:
    """How to start, follow and stop the server under test."""

    up: list[str] | str
    logs: list[str] | None = None  # compose: a separate log follower; None: up's own output
    down: list[str] | None = None
    log_path: str | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    log: list[str] = field(default_factory=list)
    read_to: int = 0  # how far into log_path the follower has read

    @classmethod
    def launched_by(cls, launcher: Launcher) -> Server:
        return cls(up=list(launcher.up), logs=list(launcher.logs), down=list(launcher.down))

    @classmethod
    def command(cls, command: str) -> Server:
        return cls(up=command)

    def _follow(self, proc: subprocess.Popen, path: str) -> None:
        # The output goes to a file, not a pipe: a server left running after
        # verify exits must not die of a broken pipe.
        with open(path, encoding="utf-8", errors="replace") as log:
            pending = ""
            while True:
                chunk = log.readline()
                if chunk:
                    self.read_to = log.tell()
                    pending += chunk
                    if pending.endswith("\n"):
                        self.lines.put(pending.rstrip("\n"))
                        pending = ""
                    continue
                if proc.poll() is not None:
                    rest = log.read()
                    for line in (pending + rest).splitlines():
                        self.lines.put(line)
                    break
                time.sleep(0.05)
        self.lines.put(None)

    def _spawn(self, cmd) -> subprocess.Popen:
        fd, path = tempfile.mkstemp(prefix="sm12x-verify-", suffix=".log")
        with os.fdopen(fd, "w") as out:
            proc = subprocess.Popen(
                cmd,
                shell=isinstance(cmd, str),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.procs.append(proc)
        self.log_path = path
        threading.Thread(target=self._follow, args=(proc, path), daemon=True).start()
        return proc

    def settle(self, patience: float = 2.0) -> list[str]:
        """The lines written before now that the boot loop has not taken yet: the
        follower gets until it has read as far as the file reaches now (bounded,
        so a log that keeps growing cannot hold the boot), then the queue is
        emptied. /health can answer between a line's write and its read."""
        if self.log_path:
            try:
                size = os.path.getsize(self.log_path)
            except OSError:
                size = 0
            until = time.monotonic() + patience
            while self.read_to < size and time.monotonic() < until:
                time.sleep(0.02)
        taken: list[str] = []
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return taken
            if line is None:  # the end mark stays for whoever reads next
                self.lines.put(None)
                return taken
            taken.append(line)

    def start(self) -> None:
        if self.logs is None:
            self.main = self._spawn(self.up)
            return
        done = subprocess.run(self.up, capture_output=True, text=True, timeout=600)
        for line in (done.stdout + done.stderr).splitlines():
            self.log.append(line)
            found = scan(line)
            if found:
                raise BootFailure(*found, self.log[-20:])
        if done.returncode != 0:
            raise BootFailure(
                f"`{shlex.join(self.up)}` exited {done.returncode}",
                "compose could not start the service",
                "read the output above; check the profile name and docker",
                self.log[-20:],
            )
        self.main = self._spawn(self.logs)

    def exited(self) -> int | None:
        return self.main.poll()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass

    def teardown(self) -> None:
        self.stop()
        if self.down:
            subprocess.run(self.down, capture_output=True, text=True, timeout=300)


def boot(
    server: Server, base_url: str, deadline_s: float, console: Console, headers: dict | None = None
) -> list[str]:
    """Start the server and return once /health answers 200; raise BootFailure."""
    start = time.monotonic()
    server.start()
    ended = False
    next_poll = 0.0
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        stage = progress.add_task("starting", total=None)
        while True:
            elapsed = time.monotonic() - start
            if elapsed > deadline_s:
                raise BootFailure(
                    f"not healthy within {deadline_s:.0f} s",
                    "still loading (DGX Spark cold starts can take an hour or more) or stuck",
                    "raise --boot-timeout, or read the log tail",
                    server.log[-20:],
                )
            try:
                line = server.lines.get(timeout=0.2)
            except queue.Empty:
                line = ""
            if line is None:
                ended = True
            elif line:
                server.log.append(line)
                found = scan(line)
                if found:
                    raise BootFailure(*found, server.log[-20:])
                if m := WEIGHTS.search(line):
                    progress.update(
                        stage, description="loading weights", total=100, completed=int(m.group(1))
                    )
                elif m := GRAPHS.search(line):
                    progress.update(
                        stage,
                        description="capturing CUDA graphs",
                        total=100,
                        completed=int(m.group(1) or 0),
                    )
                elif module := compiling(line):
                    progress.update(stage, description=f"compiling JIT kernels: {module}")
                elif READY.search(line):
                    progress.update(stage, description="ready, waiting for /health")
            code = server.exited()
            # A command that exits 0 may have started a daemon: keep polling.
            # A command that fails, or compose's log follower ending, is a crash.
            if ended and code is not None and (code != 0 or server.logs is not None):
                raise BootFailure(
                    "the container exited (its log ended) before it was healthy"
                    if server.logs is not None
                    else f"the server exited (code {code}) before it was healthy",
                    "a crash during start-up; the log tail shows the last words",
                    "read the log tail; rerun without --boot to see the full log",
                    server.log[-20:],
                )
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + 1.0
                status = _health(base_url, headers)
                if status == 200:
                    for line in server.settle():
                        server.log.append(line)
                        found = scan(line)
                        if found:
                            raise BootFailure(*found, server.log[-20:])
                    return [
                        f"healthy after {time.monotonic() - start:.1f} s",
                        f"log lines seen: {len(server.log)}",
                    ]
                hint = auth_hint(status or 0, bool(headers))
                if hint:
                    raise BootFailure(
                        f"/health answered {hint}",
                        "authentication, not a boot problem: the server is up",
                        "set SM12X_API_KEY or pass --api-key",
                        server.log[-20:],
                    )


def _health(base_url: str, headers: dict | None) -> int | None:
    """GET /health's status, bounded (a trickling answer cannot hold the boot
    loop past its deadline), or None when nothing answered."""
    with transport.client(HEALTH_LIMITS, headers=headers or {}) as http:
        try:
            return http.get(base_url.rstrip("/") + "/health").status_code
        except httpx.HTTPError:
            return None
