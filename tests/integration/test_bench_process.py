"""`sm12x bench` as a process, driving a stand-in for sglang.benchmark.serving
that parses its arguments with sglang's real parser (read from the wheel) and
writes recorded lines, against a small HTTP server with sglang's endpoints."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from sm12x.bench import provenance, runner
from sm12x.versions import load_versions
from tests.support import bench_cli
from tests.support.cli import ROOT
from tests.support.local_http import LocalServer

FIXTURES = ROOT / "tests" / "fixtures" / "bench"
FAKE_BENCH = ROOT / "tests" / "support" / "fake_bench"
NVIDIA_SMI = ROOT / "tests" / "fixtures" / "nvidia-smi"
MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"
# A folder with a tokenizer file (bench checks it is one; the stand-in loads nothing).
TOKENIZER = (FIXTURES / "tokenizer").resolve()


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(), parse_constant=lambda _c: None)


class Server:
    """/v1/models, /server_info and /set_internal_state, as sglang answers them."""

    def __init__(self, api_key: str | None = None, reset: bool = True) -> None:
        self.requests: list[tuple[str, str]] = []
        info = fixture("c16.json")["server_info"]
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, body) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorised(self) -> bool:
                return not api_key or self.headers.get("Authorization") == f"Bearer {api_key}"

            def do_GET(self):  # noqa: N802
                outer.requests.append(("GET", self.path))
                if not self._authorised():
                    return self._send(401, {"error": "Unauthorized"})
                if self.path == "/v1/models":
                    return self._send(200, {"object": "list", "data": [{"id": MODEL}]})
                if self.path == "/server_info":
                    return self._send(200, info)
                return self._send(404, {"detail": "Not Found"})

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                outer.requests.append(("POST", self.path))
                if self.path == "/set_internal_state" and reset and body == {"server_args": {}}:
                    return self._send(200, [True])
                return self._send(404, {"detail": "Not Found"})

        self.httpd = LocalServer(Handler).start()
        self.url = self.httpd.url

    def close(self) -> None:
        self.httpd.close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def healthy_scenario() -> dict:
    return {"runs": {str(c): {"line": fixture(f"c{c}.json")} for c in (16, 32, 64)}}


def bench(
    tmp_path: Path,
    url: str,
    *args: str,
    scenario: dict | None = None,
    env: dict | None = None,
    stand_in: bool = True,
    path: str = "/usr/bin:/bin",
    timeout: float = 180,
    tokenizer: bool = True,
):
    tmp_path.mkdir(parents=True, exist_ok=True)
    scenario_file = tmp_path / "scenario.json"
    scenario_file.write_text(json.dumps(scenario or healthy_scenario()))
    record = tmp_path / "argv.jsonl"
    pythonpath = [str(ROOT), str(ROOT / "tests")]
    if stand_in:
        pythonpath.insert(0, str(FAKE_BENCH))
    full_env = {
        "PATH": path,
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "COLUMNS": "200",
        "PYTHONPATH": os.pathsep.join(pythonpath),
        "SM12X_FAKE_BENCH_SCENARIO": str(scenario_file),
        "SM12X_FAKE_BENCH_RECORD": str(record),
        **({"SM12X_CACHE": os.environ["SM12X_CACHE"]} if "SM12X_CACHE" in os.environ else {}),
        **(env or {}),
    }
    out = tmp_path / "out"
    if tokenizer and "--tokenizer" not in args and "SM12X_MODEL_DIR" not in (env or {}):
        # bench resolves the tokenizer before it runs (the server's /model is not
        # here, and the Hub is not asked in tests): a folder that holds one.
        args = (*args, "--tokenizer", str(TOKENIZER))
    done = subprocess.run(
        [sys.executable, "-m", "sm12x.cli", "bench", "--url", url, "--out", str(out), *args],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    calls = (
        [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    )
    result = (
        json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else None
    )
    return done, result, calls, out


def test_default_workload_through_sglangs_real_cli(tmp_path, server):
    done, result, calls, out = bench(
        tmp_path, server.url, "--recipe", "rtx-pro-6000-tp4", "--container", "none"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    parser = bench_cli.real_parser(load_versions()["SGLANG_VERSION"])
    assert len(calls) == 3
    for call, concurrency in zip(calls, (16, 32, 64)):
        args = parser.parse_args(call["argv"])
        assert args.max_concurrency == concurrency
        assert args.num_prompts == 10 * concurrency
        assert args.dataset_name == "random-ids" and args.dataset_path == ""
        assert (args.random_input_len, args.random_output_len, args.random_range_ratio) == (
            1024,
            512,
            1.0,
        )
        assert args.backend == "sglang" and args.base_url == server.url
        assert args.output_file == str(out / "runs" / f"c{concurrency}.jsonl")
        assert args.tag == f"sm12x:c{concurrency}:n{10 * concurrency}"
    assert [r["status"] for r in result["runs"]] == ["ok"] * 3
    assert [r["accept_length_scope"] for r in result["runs"]] == ["per-run"] * 3
    assert server.requests.count(("POST", "/set_internal_state")) == 3
    assert result["workload"]["dataset_name"] == "random-ids"
    assert result["environment"]["sglang_version"] == "0.5.16"
    assert result["environment"]["sources"]["sglang_version"] == "server /server_info"
    assert result["server"]["speculative_algorithm"] == "DSPARK"
    assert len((out / "runs.jsonl").read_text().splitlines()) == 3
    log = (out / "logs" / "c16.log").read_text()
    assert log.startswith("$ ") and "Starting main benchmark run" in log
    assert "concurrency 16" in done.stderr  # the progress display
    assert (out / "chart.png").stat().st_size > 20_000
    assert "Traceback" not in done.stderr


def test_a_dataset_path_runs_the_seeds_random_dataset(tmp_path, server):
    sharegpt = tmp_path / "ShareGPT_V3_unfiltered_cleaned_split.json"
    sharegpt.write_text("[]")
    done, result, calls, _ = bench(
        tmp_path,
        server.url,
        "--recipe",
        "rtx-pro-6000-tp4",
        "--container",
        "none",
        "--concurrency",
        "16",
        "--num-prompts",
        "48",
        "--dataset-path",
        str(sharegpt),
    )
    assert done.returncode == 0, done.stderr
    args = bench_cli.real_parser(load_versions()["SGLANG_VERSION"]).parse_args(calls[0]["argv"])
    assert args.dataset_name == "random" and args.dataset_path == str(sharegpt)
    assert args.num_prompts == 48
    assert result["workload"]["dataset_path"] == sharegpt.name  # never the folder


def test_a_misspelt_flag_is_refused_by_sglangs_parser(tmp_path, server):
    done, result, calls, _ = bench(
        tmp_path,
        server.url,
        "--recipe",
        "rtx-pro-6000-tp4",
        "--container",
        "none",
        "--concurrency",
        "16",
        "--extra=--max-concurency=8",
    )
    assert done.returncode == 1
    assert calls == []  # argparse refused it before the stand-in recorded anything
    run = result["runs"][0]
    assert run["status"] == "failed" and run["exit_code"] == 2
    assert "unrecognized arguments: --max-concurency=8" in " ".join(run["problems"])


def test_failures_are_reported_and_a_hung_run_is_killed(tmp_path, server):
    scenario = {
        "runs": {
            "16": {
                "line": None,
                "exit": 1,
                "output": "ValueError: Warmup failed - Please make sure "
                "benchmark arguments are correctly specified. Error: Bad Request",
            },
            "32": {"line": None, "sleep": 120},
            "64": {"line": fixture("c64.json"), "exit": 1, "output": "Traceback: late crash"},
        }
    }
    started = time.monotonic()
    done, result, calls, out = bench(
        tmp_path,
        server.url,
        "--recipe",
        "rtx-pro-6000-tp4",
        "--container",
        "none",
        "--run-timeout",
        "4",
        scenario=scenario,
    )
    assert time.monotonic() - started < 90
    assert done.returncode == 1
    runs = {r["concurrency"]: r for r in result["runs"]}
    assert runs[16]["status"] == "failed"
    assert "Warmup failed" in runs[16]["problems"][0]
    assert runs[32]["status"] == "failed"
    assert "did not finish within 4 s (--run-timeout); killed" in runs[32]["problems"][0]
    assert runs[32]["wall_s"] < 30
    hung = next(c["pid"] for c in calls if "32" in c["argv"])
    with pytest.raises(ProcessLookupError):
        os.kill(hung, 0)
    # A line followed by a crash keeps its figures but is not ok.
    assert runs[64]["status"] == "failed"
    assert runs[64]["metrics"]["output_tokens_per_s"] == 1296.0
    assert "the benchmark process failed" in runs[64]["problems"][0]
    assert "3 of 3 run(s) did not complete every request" in done.stderr
    assert "log: logs/c16.log" in done.stdout
    assert result["passed"] is False


def test_all_requests_failed_line(tmp_path, server):
    scenario = {"default": {"line": fixture("all-failed-c16.jsonl")}}
    done, result, _, _ = bench(
        tmp_path,
        server.url,
        "--recipe",
        "rtx-pro-6000-tp4",
        "--container",
        "none",
        "--concurrency",
        "16",
        scenario=scenario,
    )
    assert done.returncode == 1
    assert result["runs"][0]["status"] == "failed"
    assert "no request completed" in result["runs"][0]["problems"][0]
    assert_progress_agrees(done.stderr, "failed")


def assert_progress_agrees(stderr: str, status: str) -> None:
    """The progress display's last lines: the overall bar counts what the runs'
    own bars count (issue 29: "all runs 8/8" above "concurrency 4: failed 0/8")."""
    import re

    def counts(label: str) -> tuple[int, int]:
        lines = [line for line in stderr.splitlines() if line.lstrip().startswith(label)]
        assert lines, (label, stderr)
        done, total = re.search(r"(\d+)/(\d+)", lines[-1]).groups()
        return int(done), int(total)

    overall = counts("all runs")
    run = counts(f"concurrency 16: {status}")
    assert overall == run, (overall, run, stderr)


def test_the_mock_server_gets_the_backend_and_tokenizer_it_serves(tmp_path):
    """`sm12x bench --url <mock>` as docs/bench.md writes it: no --backend, no
    --tokenizer. The mock says it is one and where its tokenizer is
    (/server_info), so bench runs sglang's OpenAI chat backend with that folder
    (never the Hub), and the run goes through sglang's real parser."""
    from sm12x.mock import tokenizer_v4
    from sm12x.mock.server import MockServer

    scenario = {"default": {"line": fixture("c16.json")}}
    with MockServer() as mock:
        done, result, calls, _ = bench(
            tmp_path,
            mock.base_url,
            "--recipe",
            "rtx-pro-6000-tp4",
            "--container",
            "none",
            "--concurrency",
            "16",
            scenario=scenario,
            tokenizer=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "backend: sglang-oai-chat (the server is sm12x mock-server" in done.stderr
    (call,) = calls
    args = bench_cli.real_parser(load_versions()["SGLANG_VERSION"]).parse_args(call["argv"])
    assert args.backend == "sglang-oai-chat"
    assert args.tokenizer == str(tokenizer_v4.folder())
    assert result["workload"]["backend"] == "sglang-oai-chat"
    assert_progress_agrees(done.stderr, "ok")


def test_against_the_mock_a_python_without_sglang_runs_the_wheel_s_own_client(tmp_path):
    """docs/bench.md's command against the mock from a Python without sglang (a
    CPU user's, the mock extra's): no stand-in benchmark on the path, so bench runs
    the served release's own `sglang.benchmark.serving` from its wheel, patched
    as the image's (sm12x.mock.wheel_python), and that real client measures
    every request the mock answers."""
    from sm12x.mock.server import MockServer

    version = load_versions()["SGLANG_VERSION"]
    with MockServer() as mock:
        done, result, calls, out = bench(
            tmp_path,
            mock.base_url,
            "--recipe", "rtx-pro-6000-tp4", "--container", "none",
            "--concurrency", "4", "--num-prompts", "8",
            "--input-len", "128", "--output-len", "64",
            stand_in=False,
            tokenizer=False,
            env={"SM12X_OFFLINE": "1"},
            timeout=900,
        )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert calls == []  # no stand-in ran
    assert (
        f"the client: sglang {version}'s own benchmark, from its wheel (this Python has no "
        "sglang and the server is sm12x mock-server)"
    ) in done.stderr, said
    assert "concurrency 4: ok, 8/8 requests" in said
    (run,) = result["runs"]
    assert run["status"] == "ok" and run["completed"] == 8, run
    line = run["sglang_line"]  # written by sglang's own client
    assert line["completed"] == 8 and line["total_output_tokens"] == 8 * 64, line
    assert line["backend"] == "sglang-oai-chat"
    assert result["client"]["sglang_version"] == version
    log = (out / run["log"]).read_text()
    first = log.splitlines()[0]
    assert f"-m sm12x.mock.wheel_python {version} --patched -m sglang.benchmark.serving" in first
    # Offline from the Hub: the client asked it for the model's config.json and
    # retried for 55 s where there is no Hub (this machine's case).
    assert "Retrying in" not in log, log[-3000:]


def test_no_acceptance_reset_on_a_server_without_it(tmp_path):
    server = Server(reset=False)
    try:
        done, result, _, _ = bench(
            tmp_path,
            server.url,
            "--recipe",
            "rtx-pro-6000-tp4",
            "--container",
            "none",
            "--concurrency",
            "16",
        )
    finally:
        server.close()
    assert done.returncode == 0
    assert result["runs"][0]["accept_length_scope"] == "server-lifetime"
    assert any("acceptance counters not reset" in w for w in result["warnings"])


def test_api_key_reaches_the_server_and_the_benchmark(tmp_path):
    server = Server(api_key="s3cret")
    try:
        done, result, _, _ = bench(
            tmp_path,
            server.url,
            "--recipe",
            "rtx-pro-6000-tp4",
            "--container",
            "none",
            "--concurrency",
            "16",
            env={"SM12X_API_KEY": "s3cret"},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert result["runs"][0]["status"] == "ok"
        done, _, _, _ = bench(
            tmp_path / "nokey", server.url, "--recipe", "rtx-pro-6000-tp4", "--container", "none"
        )
        assert done.returncode == 1
        # Said as authentication, naming the setting: not "cannot reach".
        assert "HTTP 401" in done.stderr and "authentication" in done.stderr
        assert "SM12X_API_KEY" in done.stderr and "cannot reach" not in done.stderr
    finally:
        server.close()


def test_no_server(tmp_path):
    from sm12x.mock.server import free_port

    done, result, calls, _ = bench(
        tmp_path, f"http://127.0.0.1:{free_port()}", "--recipe", "rtx-pro-6000-tp4"
    )
    assert done.returncode == 1 and result is None and calls == []
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "cannot reach the server" in errors[0]
    assert "Traceback" not in done.stderr


def test_python_without_sglang_and_no_docker(tmp_path, server):
    done, _, _, _ = bench(
        tmp_path,
        server.url,
        "--recipe",
        "rtx-pro-6000-tp4",
        stand_in=False,
        env={"SM12X_DOCKER": str(tmp_path / "no-docker")},
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, done.stderr
    assert "has no sglang.benchmark.serving" in errors[0] and "no docker" in errors[0]
    assert "docker compose exec" in errors[0] and "pip install sglang" in errors[0]


def test_an_explicit_python_without_sglang_is_not_swapped_for_the_image(tmp_path, server):
    done, _, _, _ = bench(
        tmp_path,
        server.url,
        "--recipe",
        "rtx-pro-6000-tp4",
        "--python",
        sys.executable,
        stand_in=False,
    )
    assert done.returncode == 1
    assert "pass --python with one that has sglang" in done.stderr


# --- a host without sglang: the benchmark in the image ------------------------------------


IMAGE = "registry.local/sm12x:bench-test"


def image_docker(tmp_path: Path, present: bool = True) -> tuple[Path, Path]:
    """A `docker` whose `run` is the image: it reads docker's own options as
    docker does, then runs the command in a clean environment holding only what
    --env passed, in --workdir, with the stand-in sglang as the image's (what a
    container can see is only what the options give it). Records each call."""
    record = tmp_path / "docker-calls.jsonl"
    script = tmp_path / "bin" / "docker"
    script.parent.mkdir(exist_ok=True)
    image_path = os.pathsep.join([str(FAKE_BENCH), str(ROOT), str(ROOT / "tests")])
    script.write_text(f"""#!{sys.executable}
import json, os, subprocess, sys
args = sys.argv[1:]
with open({str(record)!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:2] == ["image", "inspect"]:
    if {present!r} and args[-1] == {IMAGE!r}:
        print("sha256:" + "5e" * 32)
        sys.exit(0)
    print("Error: No such image: " + args[-1], file=sys.stderr)
    sys.exit(1)
if args[:1] == ["rm"]:
    sys.exit(0)
assert args[0] == "run", args
i, env, workdir, entrypoint = 1, {{}}, "/", None
while args[i].startswith("--"):
    option = args[i]
    if option in ("--rm", "--init"):
        i += 1
        continue
    value, i = args[i + 1], i + 2
    if option == "--env":
        name, eq, given = value.partition("=")
        if eq:
            env[name] = given
        elif name in os.environ:
            env[name] = os.environ[name]
    elif option == "--workdir":
        workdir = value
    elif option == "--entrypoint":
        entrypoint = value
assert args[i] == {IMAGE!r}, args[i]
assert entrypoint == "python3", entrypoint
inside = {{"PATH": "/usr/bin:/bin", "PYTHONPATH": {image_path!r}, **env}}
for name in ("SM12X_FAKE_BENCH_SCENARIO", "SM12X_FAKE_BENCH_RECORD", "SM12X_CACHE"):
    if name in os.environ:
        inside[name] = os.environ[name]
sys.exit(subprocess.run([sys.executable, *args[i + 1:]], env=inside, cwd=workdir).returncode)
""")
    script.chmod(0o755)
    return script, record


def test_a_host_without_sglang_runs_the_benchmark_in_the_image(tmp_path):
    server = Server(api_key="sk-image")
    try:
        docker, record = image_docker(tmp_path)
        (tmp_path / ".env").write_text(
            f"SM12X_API_KEY=sk-image\nSM12X_IMAGE={IMAGE}\nSM12X_DOCKER={docker}\n"
        )
        done, result, calls, out = bench(
            tmp_path,
            server.url,
            "--recipe",
            "rtx-pro-6000-tp4",
            "--container",
            "none",
            "--concurrency",
            "16",
            stand_in=False,
            env={"SM12X_ENV_FILE": ""},
        )
    finally:
        server.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "running the benchmark in the image registry.local/sm12x:bench-test" in done.stderr
    runs = [json.loads(line) for line in record.read_text().splitlines()]
    argv = next(a for a in runs if a[0] == "run" and "sglang.benchmark.serving" in a)
    at = argv.index(IMAGE)
    assert argv[: at + 1] == [
        "run",
        "--rm",
        "--name",
        argv[3],
        "--network",
        "host",
        "--init",
        "--user",
        f"{os.getuid()}:{os.getgid()}",
        "--env",
        "OPENAI_API_KEY",
        "--env",
        "PYTHONUNBUFFERED=1",
        "--env",
        "HOME=/tmp",
        "--volume",
        f"{out}:{out}",
        "--workdir",
        str(out),
        "--volume",
        f"{TOKENIZER}:{TOKENIZER}:ro",
        "--entrypoint",
        "python3",
        IMAGE,
    ]
    assert argv[3].startswith("sm12x-bench-") and argv[3].endswith("-c16")
    # What follows the image is the host command's module part, unchanged, and
    # sglang's own parser takes it (the stand-in in the "image" recorded it).
    assert argv[at + 1 : at + 3] == ["-m", "sglang.benchmark.serving"]
    (call,) = calls
    assert call["argv"] == argv[at + 3 :]
    parsed = bench_cli.real_parser(load_versions()["SGLANG_VERSION"]).parse_args(call["argv"])
    assert parsed.output_file == str(out / "runs" / "c16.jsonl")
    # The key went by name through docker's environment: never on a command line.
    assert not [a for a in runs if "sk-image" in " ".join(a)]
    assert [r["status"] for r in result["runs"]] == ["ok"]
    assert server.requests.count(("POST", "/set_internal_state")) == 1


def test_the_image_must_be_on_this_machine(tmp_path, server):
    docker, _ = image_docker(tmp_path, present=False)
    done, result, calls, _ = bench(
        tmp_path,
        server.url,
        "--recipe",
        "rtx-pro-6000-tp4",
        "--container",
        "none",
        stand_in=False,
        env={"SM12X_DOCKER": str(docker), "SM12X_IMAGE": IMAGE},
    )
    assert done.returncode == 1 and result is None and calls == []
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "No such image" in errors[0]
    # Build it: no registry has the image until it is published (no `pull`).
    assert "docker buildx bake image-amd64 --load" in errors[0] and "--python" in errors[0]
    assert "docker compose pull" not in errors[0]


def test_recipe_auto_needs_gpus(tmp_path, server):
    done, _, _, _ = bench(tmp_path, server.url, "--container", "none")
    assert done.returncode == 1
    assert "pass --recipe NAME" in done.stderr


# --- provenance: the container on this machine ------------------------------------------------

PROBE_ANSWER = {
    "sglang": "0.5.16",
    "flashinfer": "0.6.15.post1",
    "torch": "2.11.0",
    "nvidia_smi": (NVIDIA_SMI / "rtx-pro-6000-x4.csv").read_text(),
    "nvidia_smi_error": None,
}
IMAGE_ID = "sha256:" + "1f" * 32
DIGEST = "ghcr.io/sm12x/sm12x@sha256:" + "2e" * 32


def fake_docker(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    inspect = {
        "Image": IMAGE_ID,
        "Config": {
            "Image": "ghcr.io/sm12x/sm12x:0.1.0",
            "Labels": {"org.opencontainers.image.version": "0.1.0"},
        },
    }
    script = bin_dir / "docker"
    script.write_text(f"""#!/bin/sh
case "$1" in
  ps) printf 'sm12x-rtx-pro-6000-tp4-1\\trtx-pro-6000-tp4\\n' ;;
  inspect) [ "$4" = sm12x-rtx-pro-6000-tp4-1 ] || exit 1
           printf '%s\\n' {shlex.quote(json.dumps(inspect))} ;;
  image) printf '%s\\n' {shlex.quote(json.dumps([DIGEST]))} ;;
  exec) [ "$3" = python3 ] && [ "$4" = -c ] || exit 64
        printf '%s\\n' {shlex.quote(json.dumps(PROBE_ANSWER))} ;;
  *) echo "unexpected: $*" >&2; exit 64 ;;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return f"{bin_dir}:/usr/bin:/bin"


def test_versions_image_and_gpus_come_from_the_container(tmp_path, server):
    done, result, _, _ = bench(
        tmp_path, server.url, "--concurrency", "16", path=fake_docker(tmp_path)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    env = result["environment"]
    assert env["image"] == {
        "ref": "ghcr.io/sm12x/sm12x:0.1.0",
        "id": IMAGE_ID,
        "digest": DIGEST,
        "version": "0.1.0",
    }
    assert env["flashinfer_version"] == "0.6.15.post1" and env["torch_version"] == "2.11.0"
    assert env["gpus"] == ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"] * 4
    assert env["compute_capability"] == "12.0" and env["gpu_driver"] == "580.95.05"
    assert env["sources"]["gpus"] == "nvidia-smi in sm12x-rtx-pro-6000-tp4-1"
    assert env["sources"]["flashinfer_version"] == "inside container sm12x-rtx-pro-6000-tp4-1"
    # recipe auto: picked from the container's GPUs.
    assert result["recipe"]["name"] == "rtx-pro-6000-tp4"
    assert "recipe: rtx-pro-6000-tp4 (auto:" in done.stderr


def test_flags_override_what_cannot_be_seen(tmp_path, server):
    done, result, _, _ = bench(
        tmp_path,
        server.url,
        "--concurrency",
        "16",
        "--container",
        "none",
        "--recipe",
        "rtx-5090-tp8",
        "--image",
        "ghcr.io/sm12x/sm12x:0.1.0",
        "--image-digest",
        "sha256:" + "9" * 64,
        *sum((["--gpu", "NVIDIA GeForce RTX 5090"] for _ in range(8)), []),
    )
    env = result["environment"]
    assert env["image"]["version"] == "0.1.0" and env["image"]["digest"] == "sha256:" + "9" * 64
    assert len(env["gpus"]) == 8 and env["sources"]["gpus"] == "--gpu"
    assert env["flashinfer_version"] is None
    assert env["sources"]["flashinfer_version"].startswith("unknown")
    # The server says TP4, the recipe TP8: reported, not hidden.
    assert any("tp_size=4, recipe rtx-5090-tp8 says 8" in w for w in result["warnings"])


def test_probe_script_runs_on_its_own(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat {shlex.quote(str(NVIDIA_SMI / 'dgx-spark.csv'))}\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    done = subprocess.run(
        [sys.executable, "-c", provenance.PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
    )
    data = json.loads(done.stdout)
    assert data["nvidia_smi"].startswith("NVIDIA GB10")
    assert data["torch"]  # the test venv has torch
    assert set(data) == {"sglang", "flashinfer", "torch", "nvidia_smi", "nvidia_smi_error"}


def test_runner_spec_only_uses_flags_of_every_patched_release():
    spec = runner.Spec(
        base_url="http://x:1",
        concurrency=8,
        num_prompts=80,
        dataset_path="/d.json",
        tokenizer="/m",
        model="m",
    )
    argv = spec.argv("python", Path("/o.jsonl"))
    ours = {a for a in argv if a.startswith("--")}
    for version in ("0.5.16", "0.5.17", "0.5.18"):
        assert ours <= bench_cli.flags(version), (version, ours - bench_cli.flags(version))
        bench_cli.real_parser(version).parse_args(argv[3:])


def test_bench_deadline_reports_the_runs_it_left_out(tmp_path, server):
    """--deadline bounds all runs together (issue 21): the run going when it
    fires is killed, the rest are reported as not run, the result is written."""
    scenario = {
        "runs": {
            "16": {"line": None, "sleep": 120},
            "32": {"line": fixture("c32.json")},
            "64": {"line": fixture("c64.json")},
        }
    }
    done, result, calls, _ = bench(
        tmp_path,
        server.url,
        "--recipe",
        "rtx-pro-6000-tp4",
        "--container",
        "none",
        "--deadline",
        "4",
        scenario=scenario,
    )
    assert done.returncode == 1, done.stderr
    runs = {r["concurrency"]: r for r in result["runs"]}
    assert "did not finish within" in runs[16]["problems"][0]
    for c in (32, 64):
        assert runs[c]["status"] == "failed"
        assert runs[c]["problems"][0] == "not run: --deadline 4 s had passed"
    assert [c for c in calls if "32" in c["argv"] or "64" in c["argv"]] == []


def test_compare_configurations_benchmarks_each_and_marks_comparable_figures(
    tmp_path, monkeypatch, capsys
):
    """`--compare-configurations`: the rig's baseline and throughput configuration, the
    same workload against each one's server, one comparison table and chart."""
    from sm12x.bench import main as bench_main
    from sm12x.recipe import load
    from tests.support import throughput

    folder = throughput.recipes_with_it(tmp_path / "recipes")
    monkeypatch.setattr(load, "recipes_dir", lambda: folder)
    baseline, fast = Server(), Server()
    try:

        def scaled(factor: float) -> dict:
            runs = {}
            for c in (16, 64):
                line = fixture(f"c{c}.json")
                line["output_throughput"] = line["output_throughput"] * factor
                runs[str(c)] = {"line": line}
            return {"runs": runs}

        scenario = tmp_path / "scenario.json"
        scenario.write_text(
            json.dumps({"servers": {baseline.url: scaled(1.0), fast.url: scaled(1.9)}})
        )
        monkeypatch.setenv(
            "PYTHONPATH", os.pathsep.join([str(FAKE_BENCH), str(ROOT), str(ROOT / "tests")])
        )
        monkeypatch.setenv("SM12X_FAKE_BENCH_SCENARIO", str(scenario))
        monkeypatch.setenv("PATH", "/usr/bin:/bin")
        parser = __import__("argparse").ArgumentParser()
        bench_main.add_arguments(parser)
        out = tmp_path / "out"
        args = parser.parse_args(
            [
                "--compare-configurations",
                "--recipe",
                throughput.RIG,
                "--url-baseline",
                baseline.url,
                "--url-throughput",
                fast.url,
                "--concurrency",
                "16,64",
                "--container",
                "none",
                "--tokenizer",
                str(TOKENIZER),
                "--out",
                str(out),
            ]
        )
        assert bench_main.run(args) == 0, capsys.readouterr()
    finally:
        baseline.close()
        fast.close()
    summary = json.loads((out / "comparison.json").read_text())
    assert summary["configurations"]["baseline"]["recipe"] == throughput.RIG
    assert summary["configurations"]["throughput"]["recipe"] == throughput.THROUGHPUT
    # Each configuration was benchmarked against its own server, same workload.
    for kind in ("baseline", "throughput"):
        result = json.loads((out / kind / "result.json").read_text())
        assert result["recipe"]["name"] == summary["configurations"][kind]["recipe"]
        assert [r["concurrency"] for r in result["runs"]] == [16, 64]
    rows = {row["concurrency"]: row for row in summary["rows"]}
    assert abs(rows[16]["ratio"] - 1.9) < 0.01
    # The published figures each recipe marks comparable sit with that configuration.
    assert [p["output_tokens_per_s"] for p in rows[64]["throughput_published"]] == [2461]
    assert rows[64]["baseline_published"] == []  # the seed's TP4 figures are context only
    text = capsys.readouterr().out
    assert "marks comparable to that configuration" in text and "1.90x" in text
    assert (out / "comparison.png").stat().st_size > 10_000
