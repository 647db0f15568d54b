"""The Docker daemon the image tests drive, and running containers on it.

scripts/test starts a daemon of its own and exports DOCKER_HOST,
SM12X_DOCKER=/usr/bin/docker (the 20.10 CLI, which drives BuildKit without the
buildx plugin) and SM12X_REQUIRE_DOCKER=1. With that variable set a missing
daemon fails the tests that need it; without it (a laptop, SM12X_NO_DOCKER=1)
they are skipped with the reason.

Containers run the way text-generation-inference's tests run theirs: a
container that dies fails the test at once, and its logs are shown only then.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import calibrate, tiers

DOCKER = os.environ.get("SM12X_DOCKER", "docker")


def required() -> bool:
    return os.environ.get("SM12X_REQUIRE_DOCKER") == "1"


def env() -> dict[str, str]:
    return {**os.environ, "DOCKER_BUILDKIT": "1"}


def docker(
    *args: str, timeout: float = 600, check: bool = False, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    tiers.guard("talk to a Docker daemon")
    proc = subprocess.run(
        [DOCKER, *args], capture_output=True, env=env(), timeout=timeout, input=stdin, check=False
    )
    result = subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode(errors="replace"),
        proc.stderr.decode(errors="replace"),
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"docker {' '.join(args[:3])} failed ({result.returncode}):\n"
            f"{tail(result.stdout + result.stderr)}"
        )
    return result


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def unavailable() -> str | None:
    """Why the daemon cannot be used, or None when it can."""
    try:
        proc = docker("version", "--format", "{{.Server.Version}}", timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{DOCKER}: {err}"
    if proc.returncode != 0:
        return f"no Docker daemon ({DOCKER} version: {proc.stderr.strip()[:200]})"
    return None


def need_daemon() -> None:
    """Skip, or fail under SM12X_REQUIRE_DOCKER=1, when there is no daemon."""
    reason = unavailable()
    if reason is None:
        return
    message = (
        f"{reason}. scripts/test starts a daemon of its own; run the image tests "
        "through it (scripts/test tests/integration/test_image.py)"
    )
    if required():
        pytest.fail(f"SM12X_REQUIRE_DOCKER=1 but {message}", pytrace=False)
    pytest.skip(message)


def image_exists(tag: str) -> bool:
    return docker("image", "inspect", tag, timeout=60).returncode == 0


def inspect_image(tag: str) -> dict:
    return json.loads(docker("image", "inspect", tag, check=True, timeout=60).stdout)[0]


def build(
    context: Path,
    tag: str,
    build_args: Mapping[str, str],
    *,
    dockerfile: Path | None = None,
    target: str | None = None,
    network: str = "host",
    secrets: Mapping[str, Path] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """`docker build` with BuildKit; the result carries the plain progress log.
    The limit: 1800 s on the idle CI machine, stretched by how loaded it is now."""
    if timeout is None:
        timeout = calibrate.scaled(1800)
    args = ["build", "--progress", "plain", "--network", network, "-t", tag]
    if dockerfile is not None:
        args += ["-f", str(dockerfile)]
    if target:
        args += ["--target", target]
    for key, value in build_args.items():
        args += ["--build-arg", f"{key}={value}"]
    for name, path in (secrets or {}).items():
        args += ["--secret", f"id={name},src={path}"]
    started = time.time()
    proc = docker(*args, str(context), timeout=timeout)
    keep_log(tag, started, proc.stderr)
    return proc


def forget_contexts() -> None:
    """Drop BuildKit's copies of the build contexts it was sent (its source.local
    records; what a build still uses stays). A stand-in's context is its
    wheelhouse; BuildKit keeps a copy only to send a changed context faster, and
    the stand-ins are built once per key: 1.0 GB of a cold run's disk for
    nothing (docs/benchmarks.md, "The disk a cold run needs"). Cache hits do not
    depend on it: a step's cache key is the content's checksum, computed again
    from a context sent afresh."""
    docker("builder", "prune", "--force", "--filter", "type=source.local", timeout=120)


def keep_log(tag: str, started: float, log: str) -> None:
    """The build's progress log under $SM12X_CACHE/build-logs/, what
    tests/support/build_steps.py reads back as a profile (scripts/test sets
    SM12X_CACHE; without it nothing is kept)."""
    cache = os.environ.get("SM12X_CACHE")
    if not cache:
        return
    folder = Path(cache) / "build-logs"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%H%M%S", time.gmtime(started))
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", tag)
    (folder / f"{stamp}-{name}-{os.getpid()}.log").write_text(log)


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def explain(self) -> str:
        return (
            f"container exited {self.code}\n--- stdout ---\n{tail(self.stdout)}\n"
            f"--- stderr ---\n{tail(self.stderr)}"
        )


def run(
    image: str,
    *args: str,
    entrypoint: str | None = None,
    environ: Mapping[str, str] | None = None,
    user: str | None = None,
    volumes: Sequence[str] = (),
    network: str = "none",
    timeout: float = 300,
) -> Run:
    """Run a one-shot container to completion (its output is the result)."""
    cmd = ["run", "--rm", "--network", network]
    if entrypoint is not None:
        cmd += ["--entrypoint", entrypoint]
    if user is not None:
        cmd += ["--user", user]
    for key, value in (environ or {}).items():
        cmd += ["-e", f"{key}={value}"]
    for volume in volumes:
        cmd += ["-v", volume]
    proc = docker(*cmd, image, *args, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def state(name: str) -> tuple[str, str]:
    """(container status, health status or '')."""
    proc = docker(
        "inspect",
        "--format",
        "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}",
        name,
        timeout=30,
    )
    if proc.returncode != 0:
        return "gone", ""
    status, _, health = proc.stdout.strip().partition(" ")
    return status, health


@contextmanager
def serving(
    image: str,
    *args: str,
    entrypoint: str | None = None,
    extra: Sequence[str] = (),
    until: str = "healthy",
    timeout: float = 120,
) -> Iterator[str]:
    """A detached container, yielded once its health status is `until`.

    Fails the test at once if the container exits first, with its logs (the only
    time they are printed); removes the container afterwards either way.
    """
    name = f"sm12x-test-{uuid.uuid4().hex[:10]}"
    cmd = ["run", "-d", "--name", name, "--network", "none", *extra]
    if entrypoint is not None:
        cmd += ["--entrypoint", entrypoint]
    started = docker(*cmd, image, *args, timeout=120)
    try:
        if started.returncode != 0:
            pytest.fail(f"docker run failed: {started.stderr.strip()}", pytrace=False)
        deadline = time.monotonic() + timeout
        while True:
            status, health = state(name)
            if health == until:
                break
            if status not in ("created", "running"):
                logs = docker("logs", name, timeout=60)
                pytest.fail(
                    f"container {name} {status} before it was {until}:\n"
                    f"{tail(logs.stdout + logs.stderr)}",
                    pytrace=False,
                )
            if time.monotonic() > deadline:
                logs = docker("logs", name, timeout=60)
                pytest.fail(
                    f"container {name} not {until} after {timeout:.0f} s (health "
                    f"{health or 'none'}):\n{tail(logs.stdout + logs.stderr)}",
                    pytrace=False,
                )
            time.sleep(0.5)
        yield name
    finally:
        docker("rm", "-f", "-v", name, timeout=120)
