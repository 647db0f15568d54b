"""Driving `python -m sglang.benchmark.serving`, one process per concurrency.

The flags below are sglang 0.5.16's (`cli_main()` in
sglang/benchmark/serving.py); tests/integration/test_bench_process.py runs
this driver against a stand-in that builds its parser from the real wheel,
so a renamed flag fails there. Each run:

- writes to its own --output-file (runs/c16.jsonl), read back after exit;
- passes --tag sm12x:c16:n160 so a recorded line says how many requests
  were sent (sglang's line does not);
- has a wall-clock limit: past it the whole process group is killed and the
  run is reported as failed (a hung server cannot hang bench);
- keeps its full output in logs/c16.log and feeds tqdm's `n/total` counter
  to the progress display.

Where: a Python of this machine that has sglang; against `sm12x mock-server`
from a Python without sglang, that Python running the served release's own
client from its wheel (WHEEL_RUNNER, sm12x.mock.wheel_python); else the sm12x
image (InImage: `docker run --network host`, the output folder
mounted at the same path, the key passed by name in the environment, never
in argv).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sm12x import proc as bounded
from sm12x.bench.lines import make_tag
from sm12x.http.redact import Redactor

MODULE = "sglang.benchmark.serving"
# Runs an sglang module from the release's wheel in a Python without sglang
# (`python -m WHEEL_RUNNER VERSION [--patched] -m MODULE ...`): bench's client
# and tune's profiler against the mock on a CPU machine.
WHEEL_RUNNER = "sm12x.mock.wheel_python"
# sglang's --ready-check-timeout-sec: bench has already checked the server.
READY_CHECK_S = 60
_TQDM = re.compile(r"(\d+)/(\d+) \[")
MAX_LINE = 64 * 1024


@dataclass(frozen=True)
class Spec:
    """Everything one benchmark process needs."""

    base_url: str
    concurrency: int
    num_prompts: int
    input_len: int = 1024
    output_len: int = 512
    range_ratio: float = 1.0
    backend: str = "sglang"
    dataset_path: str | None = None
    tokenizer: str | None = None
    model: str | None = None
    extra_args: tuple[str, ...] = ()

    @property
    def dataset_name(self) -> str:
        # random-ids: prompts of random token ids, nothing to download.
        # random + a path: the seed's workload (ShareGPT text cut to length).
        return "random" if self.dataset_path else "random-ids"

    def argv(self, python: str, output_file: Path, prefix: Sequence[str] = ()) -> list[str]:
        """The benchmark's command; prefix: words between the Python and its -m."""
        argv = [
            python, *prefix, "-m", MODULE,
            "--backend", self.backend,
            "--base-url", self.base_url,
            "--dataset-name", self.dataset_name,
            "--random-input-len", str(self.input_len),
            "--random-output-len", str(self.output_len),
            "--random-range-ratio", str(self.range_ratio),
            "--num-prompts", str(self.num_prompts),
            "--max-concurrency", str(self.concurrency),
            "--output-file", str(output_file),
            "--tag", make_tag(self.concurrency, self.num_prompts),
            "--ready-check-timeout-sec", str(READY_CHECK_S),
        ]  # fmt: skip
        if self.dataset_path:
            argv += ["--dataset-path", self.dataset_path]
        if self.tokenizer:
            argv += ["--tokenizer", self.tokenizer]
        if self.model:
            argv += ["--model", self.model]
        return argv + list(self.extra_args)


@dataclass(frozen=True)
class InImage:
    """Run the benchmark in the sm12x image, for a host without sglang.

    Host networking, so the server's address means the same inside; the run
    folder mounted at its own path (sglang writes --output-file there) and
    the files the run reads (tokenizer, dataset) read-only at theirs; this
    user's uid:gid, so what it writes is the caller's; the key by name
    (`--env OPENAI_API_KEY`): docker copies its value from its own
    environment, so it is never on a command line.
    """

    docker: str
    image: str
    user: str
    reads: tuple[str, ...] = ()  # host paths the run reads

    def argv(self, spec: Spec, output_file: Path, workdir: Path, name: str) -> list[str]:
        _, *module = spec.argv("python3", output_file)
        return self.python(module, workdir, name)

    def python(self, args: Sequence[str], workdir: Path, name: str) -> list[str]:
        """`docker run` of the image's python3 with args (e.g. -m MODULE ...)."""
        argv = [
            self.docker, "run", "--rm", "--name", name,
            "--network", "host", "--init", "--user", self.user,
            "--env", "OPENAI_API_KEY", "--env", "PYTHONUNBUFFERED=1", "--env", "HOME=/tmp",
            "--volume", f"{workdir}:{workdir}", "--workdir", str(workdir),
        ]  # fmt: skip
        for path in self.reads:
            argv += ["--volume", f"{path}:{path}:ro"]
        # The image's entrypoint is `sm12x launch`: run its python3 instead.
        return [*argv, "--entrypoint", "python3", self.image, *args]

    def stop(self, name: str) -> None:
        """Remove the container: killing `docker run` does not stop it."""
        bounded.run([self.docker, "rm", "--force", name], timeout=60)

    def probe_prefix(self) -> list[str]:
        """A command prefix that runs the image's python3 (provenance's probe)."""
        return [
            self.docker,
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "python3",
            self.image,
        ]


def image_problem(docker: str, image: str, timeout: float = 60.0) -> str | None:
    """None when docker answers and the image is on this machine, else why not."""
    done = bounded.run([docker, "image", "inspect", "--format", "{{.Id}}", image], timeout)
    if done.error:
        return done.error
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return f"`{docker} image inspect {image}`: {said[-1] if said else done.returncode}"
    return None


@dataclass
class Process:
    """How one benchmark process ended."""

    exit_code: int | None
    timed_out: bool
    wall_s: float
    lines: list[str]
    log_tail: list[str] = field(default_factory=list)
    error: str | None = None


def benchmark_env(environ: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    env = dict(environ)
    # sglang's benchmark sends OPENAI_API_KEY as `Authorization: Bearer`.
    if api_key:
        env["OPENAI_API_KEY"] = api_key
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_one(
    spec: Spec,
    python: str,
    workdir: Path,
    *,
    timeout_s: float,
    env: Mapping[str, str],
    on_progress: Callable[[int, int], None] | None = None,
    redactor: Redactor | None = None,
    in_image: InImage | None = None,
    prefix: Sequence[str] = (),
) -> Process:
    """Run one benchmark process (in the image with in_image); never raises for
    what the process does. Its log and tail go through redactor (credentials
    in --base-url, a key the server echoes)."""
    clean = redactor.text if redactor is not None else (lambda text: text)
    runs = workdir / "runs"
    logs = workdir / "logs"
    runs.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    output_file = runs / f"c{spec.concurrency}.jsonl"
    output_file.unlink(missing_ok=True)
    log_path = logs / f"c{spec.concurrency}.log"
    name = f"sm12x-bench-{os.getpid()}-c{spec.concurrency}"
    if in_image is not None:
        argv = in_image.argv(spec, output_file, workdir, name)
    else:
        argv = spec.argv(python, output_file, prefix)
    started = time.monotonic()
    tail: list[str] = []
    with log_path.open("w", encoding="utf-8", errors="replace") as log:
        log.write(clean("$ " + shlex.join(argv)) + "\n")
        log.flush()
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env),
                cwd=workdir,
                start_new_session=True,  # its own process group, killed as one
            )
        except OSError as exc:
            return Process(None, False, 0.0, [], error=f"could not start {argv[0]}: {exc}")
        reader = threading.Thread(
            target=pump, args=(proc, log, tail, on_progress, clean), daemon=True
        )
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
        except BaseException:
            kill_group(proc)
            raise
        finally:
            if in_image is not None and (
                timed_out or proc.returncode is None or proc.returncode < 0
            ):
                in_image.stop(name)
        reader.join(timeout=10)
    wall = time.monotonic() - started
    lines = []
    if output_file.exists():
        lines = [ln for ln in output_file.read_text(errors="replace").splitlines() if ln.strip()]
    error = None
    if timed_out:
        error = f"did not finish within {timeout_s:.0f} s (--run-timeout); killed"
    elif proc.returncode != 0:
        error = f"exit status {proc.returncode}: {summarise(tail)}"
    return Process(proc.returncode, timed_out, wall, lines, tail[-40:], error)


def pump(proc: subprocess.Popen, log, tail: list[str], on_progress, clean) -> None:
    """Copy the process's output to its log, keep a tail, report tqdm's counter."""
    assert proc.stdout is not None
    buffer = b""
    while True:
        chunk = proc.stdout.read1(65536) if hasattr(proc.stdout, "read1") else proc.stdout.read(1)
        if not chunk:
            break
        buffer += chunk
        parts = re.split(rb"[\r\n]", buffer)
        buffer = parts.pop()
        for raw in parts:
            _line(clean(raw.decode(errors="replace")), log, tail, on_progress)
        if len(buffer) > MAX_LINE:  # a line that never ends is cut, not held whole
            _line(clean(buffer[:MAX_LINE].decode(errors="replace")), log, tail, on_progress)
            buffer = b""
    if buffer:
        _line(clean(buffer.decode(errors="replace")), log, tail, on_progress)


def _line(text: str, log, tail: list[str], on_progress) -> None:
    if not text.strip():
        return
    match = _TQDM.search(text)
    if match and on_progress is not None:
        on_progress(int(match[1]), int(match[2]))
        return  # progress redraws are not worth keeping in the log
    log.write(text + "\n")
    log.flush()
    tail.append(text)
    del tail[:-200]


def kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


_ERROR = re.compile(r"(Error|Exception|error:|Traceback|not ready|Failed|failed)")


def summarise(tail: Sequence[str]) -> str:
    """The line of the output that best says what went wrong."""
    for line in reversed(tail):
        if _ERROR.search(line) and not line.startswith("Traceback"):
            return line.strip()[:300]
    return tail[-1].strip()[:300] if tail else "no output"


def python_has_benchmark(python: str, timeout: float = 60.0, module: str = MODULE) -> str | None:
    """None if `python -m MODULE` (an sglang module) can start, else why not."""
    # Look for the file without importing sglang (its __init__ pulls in most
    # of the package): find the top-level package, then the module's file.
    relative = module.split(".", 1)[1].replace(".", "/") + ".py"
    code = (
        "import importlib.util, os, sys\n"
        "spec = importlib.util.find_spec('sglang')\n"
        "dirs = list(spec.submodule_search_locations or []) if spec else []\n"
        f"ok = any(os.path.isfile(os.path.join(d, {relative!r})) for d in dirs)\n"
        "sys.exit(0 if ok else 3)\n"
    )
    try:
        done = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return f"{python} did not answer within {timeout:.0f} s"
    except OSError as exc:
        return f"{python}: {exc.strerror or exc}"
    if done.returncode == 0:
        return None
    if done.returncode == 3:
        return f"{python} has no {module} (sglang is not installed there)"
    said = (done.stderr or done.stdout).strip().splitlines()
    return f"{python} failed to look for sglang: {said[-1] if said else done.returncode}"
