"""The caller's side of server_args_zygote.py: which zygote may answer a validation.

A zygote is reused only where nothing its import could have depended on differs
(server_args_zygote.py's docstring lists what that is): the key is the interpreter,
PYTHONPATH (the sglang and flashinfer trees, whose paths carry the wheel version and
the patch series hash); then the stubbed GPU and count where the import asked
torch.cuda anything, and every variable read during the import, must match. Otherwise a new zygote starts for the request's
environment. At most MAX_LIVE live in a process (each holds torch and sglang, about
1 GB); the least recently used one is closed first.

The first request of a key starts a full zygote (sglang imported: a fork answers in
under a second); a request no full zygote fits goes to a base zygote of its key (the
third-party libraries only: its child imports sglang with the request's environment,
about 3.5 s, where a new full zygote would import everything again, about 11 s).
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import subprocess
import sys
import tempfile
from pathlib import Path

MAX_LIVE = 4
SANDBOX = ("HOME", "PATH")


class ZygoteGone(RuntimeError):
    pass


class Zygote:
    def __init__(self, probe: Path, key: tuple, env: dict[str, str], hello: dict, timeout: int):
        self.key = key
        self.stage = hello.get("stage", "full")
        self.home = tempfile.TemporaryDirectory(prefix="sm12x-zygote-")
        env = {**env, "HOME": self.home.name}
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self.proc = subprocess.Popen(
            [sys.executable, str(probe), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            env=env,
            cwd=self.home.name,
            text=True,
        )
        ready = self._exchange(hello, timeout)
        self.reads: dict[str, str | None] = ready["reads"]
        self.prefixes: tuple[str, ...] = tuple(ready["prefixes"])
        self.unknown_scans: list[str] = ready["unknown_scans"]
        self.imported: list[str] = ready["imported"]
        self.device_asked: list[str] = ready["device_asked"]
        self.gpu = (hello["gpu"], hello["gpus"])
        self.started_env = {k: v for k, v in env.items() if k not in SANDBOX}
        self.prefixes = (*self.prefixes,)
        self.answered = 0

    def fits(self, env: dict[str, str], request: dict) -> bool:
        """True when `env` and the request's GPU agree with the zygote's on everything
        its import read."""
        if self.device_asked and (request["gpu"], request["gpus"]) != self.gpu:
            return False
        if self.unknown_scans:
            return {k: v for k, v in env.items() if k not in SANDBOX} == self.started_env
        if any(env.get(k) != v for k, v in self.reads.items() if k not in SANDBOX):
            return False
        return self._scanned(env) == self._scanned(self.started_env)

    def _scanned(self, env: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if k.startswith(self.prefixes) and self.prefixes}

    def ask(self, env: dict[str, str], cwd: Path, request: dict, timeout: int) -> dict:
        out = self._exchange({"env": env, "cwd": str(cwd), "request": request}, timeout)
        self.answered += 1
        return out

    def _exchange(self, message: dict, timeout: int) -> dict:
        assert self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise ZygoteGone(self._why()) from None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                self.close()
                raise TimeoutError(f"the sglang validation zygote gave no answer in {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            raise ZygoteGone(self._why())
        return json.loads(line)

    def _why(self) -> str:
        self.proc.wait(timeout=30)
        self.errors.seek(0)
        tail = self.errors.read()[-2000:].decode(errors="replace")
        return f"the sglang validation zygote exited {self.proc.returncode}: {tail}"

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.errors.close()
        self.home.cleanup()


class Zygotes:
    def __init__(self, probe: Path, full: bool = True):
        self.probe = probe
        self.full = full  # False: base zygotes only (a test's)
        self.live: list[Zygote] = []  # most recently used last
        self.started = 0
        self.last: Zygote | None = None  # the one that answered last
        atexit.register(self.close)

    @staticmethod
    def key(env: dict[str, str], request: dict) -> tuple:
        return (
            sys.executable,
            env.get("PYTHONPATH", ""),
        )

    def ask(self, env: dict[str, str], cwd: Path, request: dict, timeout: int) -> dict | None:
        """The probe's answer from a fitting zygote (started if none fits); None when
        the zygote died, so that the caller runs the one-shot probe instead."""
        key = self.key(env, request)
        mine = [z for z in self.live if z.key == key]
        fit = sorted((z for z in mine if z.fits(env, request)), key=lambda z: z.stage != "full")
        zygote = fit[0] if fit else None
        try:
            if zygote is None:
                full = self.full and not any(z.stage == "full" for z in mine)
                stage = "full" if full else "base"
                hello = {"gpu": request["gpu"], "gpus": request["gpus"], "stage": stage}
                zygote = Zygote(self.probe, key, env, hello, timeout)
                self.started += 1
                self.live.append(zygote)
                while len(self.live) > MAX_LIVE:
                    self.live.pop(0).close()
            else:
                self.live.remove(zygote)
                self.live.append(zygote)
            self.last = zygote
            return zygote.ask(env, cwd, request, timeout)
        except ZygoteGone as err:
            print(f"server_args_check: {err}; running the one-shot probe", file=sys.stderr)
            if zygote in self.live:
                self.live.remove(zygote)
            zygote.close() if zygote else None
            return None

    def close(self) -> None:
        while self.live:
            self.live.pop().close()


def enabled() -> bool:
    """SM12X_SERVER_ARGS_ZYGOTE=0 runs every validation in its own process."""
    return os.environ.get("SM12X_SERVER_ARGS_ZYGOTE", "1") != "0"
