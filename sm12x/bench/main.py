"""`sm12x bench`: sglang's serving benchmark against a running server, judged
beside the recipe's published figures.

    sm12x bench                                  # the server on 127.0.0.1:$SM12X_PORT
    sm12x bench --url http://gpu-box:30000 --recipe rtx-pro-6000-tp4 --tokenizer /srv/models/...
    sm12x bench --from-jsonl runs.jsonl --recipe rtx-pro-6000-tp4   # report recorded lines
    sm12x bench --validate result.json                              # check a submission
    sm12x bench --report result.json                                # its tables and chart again
    sm12x bench --compare-configurations --recipe rtx-pro-6000-tp4 --boot   # baseline vs throughput

The server, its key, the recipe, the tokenizer (SM12X_MODEL_DIR) and the image
come from the settings every sm12x command reads (sm12x.settings: flags, the
environment, .env). A host without sglang runs the benchmark in the image
(`docker run --network host`), and says so.

Default workload: the seed PR's (random prompts, 1024 in / 512 out, range
ratio 1.0) at concurrency 16, 32 and 64, with `--dataset-name random-ids` so
nothing is downloaded. Writes result.json (schema: sm12x/bench/result.schema.json),
chart.png, runs.jsonl (sglang's own lines) and one log per run under --out.
Exit status: 0 every run completed every request; 1 a run failed or was
partial (still reported and written), or bad input.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sm12x import __version__, bounded, fields, settings
from sm12x.bench import chart, compare, configurations, lines, provenance, report, runner
from sm12x.bench.result import (
    BenchResult,
    Client,
    Environment,
    Image,
    Metrics,
    RecipeInfo,
    Run,
    Workload,
    validate,
)
from sm12x.cli import Command
from sm12x.errors import UserError
from sm12x.fields import PositiveFloat, option_type
from sm12x.http import redact
from sm12x.launch import gpus as gpu_query
from sm12x.recipe import Recipe, load_all, load_recipe
from sm12x.settings import Loaded

Count = Annotated[int, Field(ge=1)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
DEFAULT_CONCURRENCY = (16, 32, 64)
PROMPTS_PER_CONCURRENCY = 10
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
DEFAULT_BACKEND = "sglang"
MOCK_BACKEND = "sglang-oai-chat"


# --- arguments ----------------------------------------------------------------


# Past this a concurrency is no rig's working point: sglang's client opens a
# connection per stream and the machine running it gives out first.
MAX_CONCURRENCY = 4096
# What bench reads from files: sglang's lines (a few KB per run) and a result.
MAX_JSONL_BYTES = 64 * 1024 * 1024
MAX_RESULT_BYTES = 16 * 1024 * 1024


def _concurrencies(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 16,32,64, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers like 16,32,64, got {text!r}")
    if max(values) > MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(
            f"{max(values)}: at most {MAX_CONCURRENCY} streams at "
            "once (sglang's client opens a connection per stream)"
        )
    return sorted(set(values))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_argument_group("server")
    target.add_argument(
        "--url",
        help="server base URL (default: http://SM12X_BIND:SM12X_PORT, "
        "loopback for 0.0.0.0, i.e. http://127.0.0.1:30000)",
    )
    work = parser.add_argument_group("workload (defaults: the seed PR's)")
    work.add_argument(
        "--concurrency",
        type=_concurrencies,
        default=list(DEFAULT_CONCURRENCY),
        metavar="C1,C2,...",
        help="--max-concurrency of each run (default 16,32,64)",
    )
    work.add_argument(
        "--num-prompts",
        type=option_type(Count),
        help=f"requests per run (default {PROMPTS_PER_CONCURRENCY} x concurrency)",
    )
    work.add_argument("--input-len", type=option_type(Count), default=1024)
    work.add_argument("--output-len", type=option_type(Count), default=512)
    work.add_argument("--range-ratio", type=option_type(Fraction), default=1.0)
    work.add_argument(
        "--dataset-path",
        help="a ShareGPT-format JSON: runs sglang's `random` "
        "dataset on it (the seed's exact workload) instead of `random-ids`",
    )
    work.add_argument(
        "--backend",
        help="sglang's --backend (default sglang, the native /generate API; against "
        "`sm12x mock-server`, which serves only the OpenAI API, sglang-oai-chat)",
    )
    work.add_argument(
        "--tokenizer",
        help="tokenizer path or id for the benchmark client (default: "
        "SM12X_MODEL_DIR when it is here, else what the server reports)",
    )
    work.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for sglang.benchmark.serving (repeatable)",
    )
    proc = parser.add_argument_group("process")
    proc.add_argument(
        "--python",
        help="the Python whose sglang runs the benchmark (default: this one; "
        "when it has no sglang, the benchmark runs in the image, SM12X_IMAGE)",
    )
    proc.add_argument(
        "--run-timeout",
        type=option_type(PositiveFloat),
        default=3600.0,
        help="seconds one run may take before it is killed (default 3600)",
    )
    proc.add_argument(
        "--deadline",
        type=option_type(PositiveFloat),
        metavar="SECONDS",
        help="seconds all runs together may take: a run still going then is "
        "killed, the rest are not started, and the result is written (default: "
        "--run-timeout per run)",
    )
    proc.add_argument(
        "--request-timeout",
        type=option_type(PositiveFloat),
        default=30.0,
        help="seconds for each request bench itself makes, whole request, wall clock (default 30)",
    )
    proc.add_argument(
        "--no-reset-accept-stats",
        action="store_true",
        help="keep sglang's lifetime acceptance average instead of resetting it "
        "(POST /set_internal_state) before each run",
    )
    prov = parser.add_argument_group("provenance (normally found on their own)")
    prov.add_argument(
        "--container", default="auto", help="the sm12x container to inspect: auto, none or a name"
    )
    prov.add_argument("--image-digest", help="image digest (sha256:...)")
    prov.add_argument(
        "--gpu",
        action="append",
        default=[],
        metavar="NAME",
        help="a GPU name as nvidia-smi prints it, once per GPU (remote servers)",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--out",
        type=Path,
        help="folder for result.json, chart.png, runs.jsonl, logs/ "
        "(default bench-results/RECIPE-UTCSTAMP)",
    )
    out.add_argument("--no-chart", action="store_true")
    out.add_argument(
        "--from-jsonl",
        type=Path,
        metavar="FILE",
        help="no benchmark: report lines sglang already wrote (needs --recipe)",
    )
    out.add_argument(
        "--validate",
        type=Path,
        metavar="RESULT",
        help="check a result.json against the submission schema and exit",
    )
    out.add_argument(
        "--report",
        type=Path,
        metavar="RESULT",
        help="no benchmark: print an existing result.json's tables and draw its "
        "chart beside it (e.g. on the host, for a run made inside the image)",
    )
    configurations.add_arguments(parser)
    # --recipe (the references it is judged by; auto: from the server's GPUs),
    # --api-key, --bind/--port (the default --url), --model-dir (the tokenizer),
    # --image (the image to run in, and provenance), --docker, --env-file, --explain.
    settings.add_arguments(parser, "bench")


# --- helpers --------------------------------------------------------------------


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _has_tokenizer(path: str | None) -> bool:
    return bool(path) and any((Path(str(path)) / f).is_file() for f in TOKENIZER_FILES)


# How long bench asks the Hugging Face Hub whether a tokenizer id exists before
# it runs: sglang's benchmark client would otherwise wait minutes (transformers'
# retries) and then fail with an OSError.
HUB_PROBE_S = 5.0
TOKENIZER_FIX = (
    "pass --tokenizer DIR (the checkpoint folder, or any folder with tokenizer.json) "
    "or set SM12X_MODEL_DIR"
)


def hub_problem(repo_id: str, environ=None) -> str | None:
    """Why the tokenizer `repo_id` cannot be had from the Hugging Face Hub here,
    decided within HUB_PROBE_S: None when it is cached or the Hub answers for it."""
    environ = os.environ if environ is None else environ
    cached: Any = None
    try:
        from huggingface_hub import try_to_load_from_cache as cached
    except ImportError:
        pass
    for name in TOKENIZER_FILES if cached is not None else ():
        try:
            if isinstance(cached(repo_id, name), str):
                return None
        except ValueError:  # not a repository id at all
            return f"{repo_id} is neither a folder here nor a Hugging Face id"
    if environ.get("HF_HUB_OFFLINE", "").strip() not in ("", "0"):
        return f"{repo_id} is not in the Hugging Face cache and HF_HUB_OFFLINE is set"
    import urllib.error
    import urllib.request

    endpoint = environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    url = f"{endpoint}/api/models/{repo_id}"
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, method="HEAD"), timeout=HUB_PROBE_S
        ):
            return None
    except urllib.error.HTTPError as exc:
        return f"the Hugging Face Hub answers {exc.code} for {repo_id}"
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return (
            f"{repo_id} is not in the Hugging Face cache and the Hub ({endpoint}) did not "
            f"answer within {HUB_PROBE_S:.0f} s ({reason})"
        )


def default_tokenizer(
    inside: bool,
    model_dir: str | None,
    origin: object,
    info: dict | None = None,
    served: str | None = None,
) -> tuple[str | None, str]:
    """The tokenizer the benchmark client loads, decided before it runs (bounded:
    never a silent wait on the Hub). Inside the image, the server's own. Else
    SM12X_MODEL_DIR's; else the server's tokenizer path when it is a folder here
    (the mock's is); else what sglang's benchmark falls back to, the served
    model id from /v1/models, when it is a Hugging Face id that is cached or the
    Hub answers for; anything else is refused with the flag that fixes it."""
    if inside:
        return None, "the server's own (bench runs inside the image)"
    if _has_tokenizer(model_dir):
        return model_dir, f"{model_dir} (SM12X_MODEL_DIR, from {origin})"
    info = info or {}
    for key in ("tokenizer_path", "model_path"):
        reported = info.get(key)
        if isinstance(reported, str) and _has_tokenizer(reported):
            return reported, f"{reported} (the server's own {key}, a folder on this machine)"
    if not served or served.startswith("/") or served.count("/") != 1:
        where = info.get("tokenizer_path") or info.get("model_path") or "not said"
        raise UserError(
            f"the server's tokenizer (its path: {where}; its model: {served or 'not said'}) "
            f"is not on this machine: {TOKENIZER_FIX}"
        )
    problem = hub_problem(served)
    if problem:
        raise UserError(f"the server's tokenizer: {problem}: {TOKENIZER_FIX}")
    return served, f"{served} (the served model's, from the Hugging Face Hub or its cache)"


def served_id(models: object) -> str | None:
    """The first model id /v1/models lists (what sglang's benchmark loads when no
    tokenizer is given)."""
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        found = data[0].get("id")
        return found if isinstance(found, str) else None
    return None


def given_tokenizer(value: str) -> tuple[str, str]:
    """--tokenizer: a folder here, or a Hugging Face id the Hub can give (bounded)."""
    if Path(value).exists():
        if not _has_tokenizer(value):
            raise UserError(
                f"--tokenizer {value}: no tokenizer.json or tokenizer_config.json there"
            )
        return value, value
    problem = hub_problem(value)
    if problem:
        raise UserError(f"--tokenizer {value}: {problem}: pass --tokenizer DIR, a folder here")
    return value, f"{value} (from the Hugging Face Hub)"


def image_overrides(args: argparse.Namespace, loaded: Loaded) -> tuple[str | None, str]:
    """The image reference for provenance: SM12X_IMAGE when it was set, with where from."""
    if not loaded.given("image"):
        return None, ""
    origin = loaded.origin("image")
    return loaded.settings.image, (
        "--image" if origin.kind == "flag" else f"SM12X_IMAGE ({origin})"
    )


@dataclass(frozen=True)
class RunsOn:
    """Where sglang's benchmark client runs: `python [prefix] -m MODULE`, or in the image."""

    python: str
    in_image: runner.InImage | None = None
    prefix: tuple[str, ...] = ()
    # The client's sglang when it is not this Python's own (the wheel's release).
    sglang: str | None = None


def where_to_run(
    args: argparse.Namespace,
    loaded: Loaded,
    err: Console,
    reads: tuple[str, ...],
    info: dict | None = None,
) -> RunsOn:
    """This machine's Python when it has sglang's benchmark; against sm12x
    mock-server, this Python with the served release's wheel standing in; else
    the image."""
    python = args.python or sys.executable
    missing = runner.python_has_benchmark(python)
    if missing is None:
        return RunsOn(python)
    if args.python:
        raise UserError(
            f"{missing}: pass --python with one that has sglang (pip install sglang), "
            "or leave --python out to run the benchmark in the image"
        )
    if provenance.is_mock(info):
        # The server's word picks a wheel: checked as tune checks it.
        served = provenance.served_release(info, loaded.settings.key())
        # Trying bench on a CPU machine: the mock's extra carries no sglang, so
        # the client is the served release's own, from its wheel, patched as the
        # image's is (sm12x.mock.wheel_python says why patched).
        err.print(
            f"the client: sglang {served}'s own benchmark, from its wheel (this Python has "
            "no sglang and the server is sm12x mock-server)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        return RunsOn(
            python, prefix=("-m", runner.WHEEL_RUNNER, served, "--patched"), sglang=served
        )
    s = loaded.settings
    image = s.image_ref()
    docker = shutil.which(s.docker)
    if docker is None:
        raise UserError(
            f"{missing}, and there is no docker ({s.docker}) to run it in the image: install "
            "Docker, or sglang here (pip install sglang), or run bench in a service "
            "(docker compose exec <service> sm12x bench)"
        )
    problem = runner.image_problem(docker, image)
    if problem:
        raise UserError(
            f"{missing}; bench runs it in the image {image} then, which is not usable here "
            f"({problem}): build it in the sm12x checkout (docker buildx bake image-amd64 "
            '--load, image-arm64 on a DGX Spark; README "Build or pull the image": no '
            "registry has it until it is published) or set SM12X_IMAGE to one you have, run "
            "bench in a service (docker compose exec <service> sm12x bench), or pass --python "
            "with one that has sglang"
        )
    err.print(
        f"sm12x bench: {missing}: running the benchmark in the image {image} (docker run "
        "--network host)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return RunsOn(python, runner.InImage(docker, image, f"{os.getuid()}:{os.getgid()}", reads))


def choose_recipe(
    choice: str,
    found: list[gpu_query.Gpu],
    info: dict | None = None,
    api_key: str | None = None,
) -> tuple[Recipe, str]:
    if choice != "auto":
        return load_recipe(choice), f"--recipe {choice}"
    named = provenance.served_recipe(info, api_key) if provenance.is_mock(info) else None
    if named is not None:
        return load_recipe(named), f"auto: the server (sm12x mock-server) stands in for {named}"
    if not found:
        raise UserError(
            "--recipe auto needs the server's GPUs and bench cannot see them (the server is not "
            "on this machine, or nvidia-smi is missing): pass --recipe NAME"
        )
    pick = gpu_query.pick_recipe(found, load_all())
    return pick.recipe, f"auto: {pick.reason}"


def recipe_info(recipe: Recipe) -> RecipeInfo:
    return RecipeInfo(
        name=recipe.name,
        summary=recipe.summary,
        status=recipe.status.state,
        dspark_block_size=recipe.dspark.block_size,
        gpu=recipe.hardware.gpu,
        gpus_per_node=recipe.hardware.gpus_per_node,
        nodes=recipe.hardware.nodes,
    )


def server_mismatches(recipe: Recipe, server: dict) -> list[str]:
    """Where the running server differs from the recipe it is judged against."""
    if not server:
        return ["no /server_info: cannot check the server runs the recipe's settings"]
    problems = []
    expected = {
        "tp_size": recipe.flag_value("--tp-size"),
        "speculative_algorithm": "DSPARK",
        "speculative_dspark_block_size": recipe.dspark.block_size,
        "kv_cache_dtype": recipe.flag_value("--kv-cache-dtype"),
        "moe_runner_backend": recipe.flag_value("--moe-runner-backend"),
    }
    for key, want in expected.items():
        if want is None or key not in server:
            continue
        got = server[key]
        if str(got).upper() != str(want).upper():
            problems.append(f"the server runs {key}={got!r}, recipe {recipe.name} says {want!r}")
    return problems


def reset_accept_stats(base_url: str, api_key: str | None, timeout: float) -> str | None:
    """Reset sglang's acceptance counters; None on success, else why not."""
    answer, problem = provenance.request_json(
        "POST", f"{base_url}/set_internal_state", api_key, timeout, {"server_args": {}}
    )
    if problem:
        return problem
    if not (isinstance(answer, list) and answer and all(a is True for a in answer)):
        return f"POST /set_internal_state answered {answer!r}"
    return None


def build_run(outcome: lines.Outcome, **extra) -> Run:
    raw = dict(outcome.line) if outcome.line else None
    if raw is not None:
        raw.pop("server_info", None)
    return Run(
        concurrency=outcome.concurrency,
        num_prompts=outcome.num_prompts,
        completed=outcome.completed,
        status=outcome.status,
        problems=outcome.problems,
        missing_fields=outcome.missing_fields,
        metrics=Metrics(**outcome.metrics, **outcome.extra) if outcome.metrics else _no_metrics(),
        sglang_line=raw,
        **extra,
    )


def deadline_run(concurrency: int, num_prompts: int, deadline: float) -> Run:
    """A run --deadline left no time for: reported, never silently dropped."""
    outcome = lines.judge(None, concurrency, num_prompts)
    outcome.status = "failed"
    outcome.problems.insert(0, f"not run: --deadline {deadline:g} s had passed")
    return build_run(
        outcome, accept_length_scope="server-lifetime", exit_code=None, wall_s=0.0, log=None
    )


def _no_metrics() -> Metrics:
    return Metrics(
        output_tokens_per_s=None,
        mean_itl_ms=None,
        p99_itl_ms=None,
        mean_ttft_ms=None,
        p99_ttft_ms=None,
        accept_length=None,
    )


def finish(
    recipe: Recipe,
    runs: list[Run],
    workload: Workload,
    environment: Environment,
    server: dict,
    client_sglang: str | None,
    warnings: list[str],
    started: str | None,
    out: Path,
    console: Console,
    err: Console,
    no_chart: bool,
) -> int:
    comparisons = compare.compare(recipe, runs, workload)
    warnings = warnings + compare.workload_mismatches(recipe, workload)
    result = BenchResult(
        sm12x_version=__version__,
        started=started,
        finished=now(),
        recipe=recipe_info(recipe),
        environment=environment,
        client=Client(
            sm12x_version=__version__,
            python=provenance.python_version(),
            sglang_version=client_sglang,
        ),
        server=server,
        workload=workload,
        runs=runs,
        comparisons=comparisons,
        warnings=warnings,
        passed=bool(runs) and all(r.status == "ok" for r in runs),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(result.dump(), encoding="utf-8")
    report.render(result, console)
    if no_chart:
        chart_note = "chart: skipped (--no-chart)"
    else:
        skipped = chart.write_chart(result, recipe, out / "chart.png")
        chart_note = f"chart: skipped, {skipped}" if skipped else f"chart: {out / 'chart.png'}"
    console.print(f"result: {out / 'result.json'}", highlight=False, markup=False, soft_wrap=True)
    console.print(chart_note, highlight=False, markup=False, soft_wrap=True)
    failed = [r for r in runs if r.status != "ok"]
    if failed:
        err.print(
            f"sm12x bench: {len(failed)} of {len(runs)} run(s) did not complete every request: "
            + ", ".join(f"c{r.concurrency} {r.status}" for r in failed),
            highlight=False,
        )
        return 1
    return 0


# --- modes ------------------------------------------------------------------------


def _read_capped(path: Path, limit: int) -> str:
    """A file bench reads, bounded (sm12x.bounded: no FIFO or device waits)."""
    try:
        return bounded.read_text(path, limit)
    except bounded.TooBig as exc:
        raise UserError(f"{path}: not a file bench reads ({exc})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None


def _read_json(path: Path):
    text = _read_capped(path, MAX_RESULT_BYTES)
    try:
        return bounded.loads(text)
    except bounded.TooBig as exc:
        raise UserError(f"{path}: not a bench result ({exc})") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None


def run_validate(path: Path, console: Console) -> int:
    data = _read_json(path)
    problems = validate(data)
    if problems:
        for problem in problems:
            console.print(f"{path}: {problem}", highlight=False, markup=False, soft_wrap=True)
        return 1
    console.print(
        f"{path}: a valid sm12x bench result ({data.get('schema')})",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return 0


def run_report(path: Path, console: Console, no_chart: bool) -> int:
    data = _read_json(path)
    problems = validate(data)
    if problems:
        raise UserError(f"{path} is not a valid sm12x bench result: {problems[0]}")
    result = BenchResult.model_validate(data)
    report.render(result, console)
    if no_chart:
        return 0 if result.passed else 1
    recipe = load_recipe(result.recipe.name)
    skipped = chart.write_chart(result, recipe, path.parent / "chart.png")
    note = f"chart: skipped, {skipped}" if skipped else f"chart: {path.parent / 'chart.png'}"
    console.print(note, highlight=False, markup=False, soft_wrap=True)
    return 0 if result.passed else 1


def run_from_jsonl(args: argparse.Namespace, loaded: Loaded, console: Console, err: Console) -> int:
    if args.recipe == "auto":
        raise UserError("--from-jsonl needs --recipe NAME (the lines do not say which rig ran)")
    recipe = load_recipe(args.recipe)
    text = _read_capped(args.from_jsonl, MAX_JSONL_BYTES)
    parsed = lines.read_lines(text)
    warnings = [str(item) for item in parsed if isinstance(item, lines.LineError)]
    good = [item for item in parsed if isinstance(item, dict)]
    if not good:
        raise UserError(f"{args.from_jsonl}: no JSON line of sglang's serving benchmark in it")
    runs: list[Run] = []
    seen: dict[int, Run] = {}
    for line in good:
        concurrency = lines.concurrency_of(line)
        if concurrency is None:
            warnings.append("a line without max_concurrency was left out")
            continue
        num_prompts = lines.num_prompts_of(line) or args.num_prompts
        run = build_run(lines.judge(line, concurrency, num_prompts), accept_length_scope=None)
        if concurrency in seen:
            warnings.append(f"concurrency {concurrency} appears twice: the last line is used")
            runs.remove(seen[concurrency])
        seen[concurrency] = run
        runs.append(run)
    runs.sort(key=lambda r: r.concurrency)
    info = next((ln.get("server_info") for ln in reversed(good) if ln.get("server_info")), None)
    server = provenance.server_summary(info)
    image, image_source = image_overrides(args, loaded)
    overrides = provenance.Overrides(
        image, args.image_digest, list(args.gpu), "none", image_source or "--image"
    )
    sources = (
        {"sglang_version": "server_info in the recorded lines"} if server.get("version") else {}
    )
    if overrides.gpus:
        sources["gpus"] = "--gpu"
    environment = Environment(
        image=Image(
            ref=image,
            id=None,
            digest=args.image_digest,
            version=image.rsplit(":", 1)[1] if image and ":" in image.rsplit("/", 1)[-1] else None,
        ),
        sglang_version=str(server["version"]) if server.get("version") else None,
        flashinfer_version=None,
        torch_version=None,
        gpus=overrides.gpus,
        compute_capability=None,
        gpu_driver=None,
        sources=sources,
    )
    first = good[0]
    workload = Workload(
        backend=str(first.get("backend", "sglang")),
        dataset_name="random" if first.get("dataset_name") == "random" else "random-ids",
        dataset_path=None,
        input_len=int(first.get("random_input_len") or args.input_len),
        output_len=int(first.get("random_output_len") or args.output_len),
        range_ratio=float(first.get("random_range_ratio", args.range_ratio)),
        concurrencies=[r.concurrency for r in runs],
    )
    warnings += server_mismatches(recipe, server) if server else []
    out = args.out or args.from_jsonl.parent / "report"
    return finish(
        recipe,
        runs,
        workload,
        environment,
        server,
        None,
        warnings,
        None,
        out,
        console,
        err,
        args.no_chart,
    )


def run_live(args: argparse.Namespace, loaded: Loaded, console: Console, err: Console) -> int:
    base_url = (args.url or loaded.settings.base_url()).rstrip("/").removesuffix("/v1")
    api_key = loaded.settings.key()
    timeout = args.request_timeout
    secrets = redact.Redactor.for_endpoint(base_url, api_key)
    shown = redact.url(base_url)
    if args.dataset_path and not Path(args.dataset_path).is_file():
        raise UserError(f"--dataset-path {args.dataset_path} is not a file")
    if args.out and (problem := fields.writable_folder(args.out)):
        raise UserError(f"--out: {problem}")

    models, problem = provenance.get_json(f"{base_url}/v1/models", api_key, timeout)
    if models is None:
        if "authentication" in (problem or ""):
            raise UserError(f"{shown}: {secrets.text(problem or '')}")
        raise UserError(
            f"cannot reach the server at {shown} ({secrets.text(problem or '')}): start it "
            "(docker compose up -d; `sm12x verify` says when it is ready) or pass --url"
        )
    info, info_problem = provenance.server_info(base_url, api_key, timeout)
    warnings: list[str] = []
    if info is None:
        warnings.append(f"no sglang server info ({info_problem}): is this a router?")
    image, image_source = image_overrides(args, loaded)
    overrides = provenance.Overrides(
        image, args.image_digest, list(args.gpu), args.container, image_source or "--image"
    )
    inside = provenance.in_container()
    if args.backend is None:
        # The mock stands in for the OpenAI API only (its /generate is the SPS
        # profiler's): the one backend of sglang's benchmark it can serve.
        args.backend = MOCK_BACKEND if provenance.is_mock(info) else DEFAULT_BACKEND
        if args.backend == MOCK_BACKEND:
            err.print(
                f"backend: {MOCK_BACKEND} (the server is sm12x mock-server, which serves the "
                "OpenAI API only; --backend to choose)",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    try:
        tokenizer, tokenizer_note = (
            given_tokenizer(args.tokenizer)
            if args.tokenizer
            else default_tokenizer(
                inside,
                loaded.settings.model_dir,
                loaded.origin("model_dir"),
                info,
                served_id(models),
            )
        )
    except UserError as exc:
        # It may quote the server's model and paths: never the key.
        raise UserError(secrets.text(exc.message)) from None
    reads = tuple(
        str(Path(p).resolve()) for p in (tokenizer, args.dataset_path) if p and Path(p).exists()
    )
    client = where_to_run(args, loaded, err, reads, info)
    python, in_image = client.python, client.in_image
    docker = shutil.which(loaded.settings.docker)
    with err.status("collecting versions, image and GPUs"):
        facts = provenance.collect(
            base_url,
            info,
            python,
            overrides,
            timeout=timeout,
            inside=inside,
            docker=docker or loaded.settings.docker,
        )
        if in_image is not None:
            # The client is the image's sglang, not this machine's (it has none).
            probe, _ = provenance.local_probe(in_image.probe_prefix(), timeout)
            facts.client_sglang = probe.get("sglang") if probe else None
        elif client.sglang is not None:
            facts.client_sglang = client.sglang  # the wheel's, not this Python's (none)
    recipe, how = choose_recipe(args.recipe, facts.gpus, info, api_key)
    warnings += facts.notes
    warnings += server_mismatches(recipe, facts.server)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = (args.out or Path("bench-results") / f"{recipe.name}-{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    err.print(f"recipe: {recipe.name} ({how})", highlight=False, markup=False, soft_wrap=True)
    err.print(
        f"server: {shown}, sglang {facts.environment.sglang_version or '?'}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    err.print(f"tokenizer: {tokenizer_note}", highlight=False, markup=False, soft_wrap=True)
    err.print(f"writing to {out}", highlight=False, markup=False, soft_wrap=True)

    env = runner.benchmark_env(os.environ, api_key)
    started = now()
    runs: list[Run] = []
    jsonl = out / "runs.jsonl"
    jsonl.write_text("", encoding="utf-8")
    plan = [(c, args.num_prompts or PROMPTS_PER_CONCURRENCY * c) for c in args.concurrency]
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )
    with progress:
        overall = progress.add_task("all runs", total=sum(n for _, n in plan))
        done_before = 0
        end = None if args.deadline is None else time.monotonic() + args.deadline
        for concurrency, num_prompts in plan:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                runs.append(deadline_run(concurrency, num_prompts, args.deadline))
                continue
            scope = "server-lifetime"
            if not args.no_reset_accept_stats:
                problem = reset_accept_stats(base_url, api_key, timeout)
                if problem:
                    warnings.append(
                        f"c{concurrency}: acceptance counters not reset ({problem}); "
                        "its accept_length is the server's lifetime average"
                    )
                else:
                    scope = "per-run"
            task = progress.add_task(f"concurrency {concurrency}", total=num_prompts)
            seen = [0]  # requests this run completed, as its progress said

            def on_progress(n: int, total: int, task=task, base=done_before, seen=seen) -> None:
                seen[0] = n
                progress.update(task, completed=n, total=total)
                progress.update(overall, completed=base + n)

            spec = runner.Spec(
                base_url=base_url, concurrency=concurrency, num_prompts=num_prompts,
                input_len=args.input_len, output_len=args.output_len,
                range_ratio=args.range_ratio, backend=args.backend,
                dataset_path=args.dataset_path, tokenizer=tokenizer,
                extra_args=tuple(args.extra),
            )  # fmt: skip
            run_timeout = args.run_timeout if left is None else min(args.run_timeout, left)
            ended = runner.run_one(
                spec,
                python,
                out,
                timeout_s=run_timeout,
                env=env,
                in_image=in_image,
                prefix=client.prefix,
                on_progress=on_progress,
                redactor=secrets,
            )
            line = None
            parse_problem = None
            if ended.lines:
                with jsonl.open("a", encoding="utf-8") as f:
                    f.write(ended.lines[-1] + "\n")
                try:
                    line = lines.parse_line(ended.lines[-1])
                except lines.LineError as exc:
                    parse_problem = f"sglang's result line is unreadable: {exc}"
            outcome = lines.judge(line, concurrency, num_prompts)
            if ended.error:
                # A process that failed after writing a line keeps its figures
                # but is never reported as ok.
                outcome.problems.insert(0, f"the benchmark process failed: {ended.error}")
                if outcome.status == "ok":
                    outcome.status = "failed"
            if parse_problem:
                outcome.problems.insert(0, parse_problem)
            run = build_run(
                outcome,
                accept_length_scope=scope,
                exit_code=ended.exit_code,
                wall_s=round(ended.wall_s, 1),
                log=f"logs/c{concurrency}.log",
            )
            runs.append(run)
            # The overall bar counts what completed, so it agrees with the run's
            # own line on a failure ("concurrency 4: failed 0/8" under "all runs 0/8").
            done_before += num_prompts if run.status == "ok" else seen[0]
            if run.status == "ok":
                progress.update(task, completed=num_prompts)
            progress.update(task, description=f"concurrency {concurrency}: {run.status}")
            progress.update(overall, completed=done_before)

    workload = Workload(
        backend=args.backend,
        dataset_name="random" if args.dataset_path else "random-ids",
        dataset_path=Path(args.dataset_path).name if args.dataset_path else None,
        input_len=args.input_len,
        output_len=args.output_len,
        range_ratio=args.range_ratio,
        concurrencies=list(args.concurrency),
        extra_args=list(args.extra),
    )
    for run in runs:
        run.problems = secrets(run.problems)
    return finish(
        recipe,
        runs,
        workload,
        facts.environment,
        facts.server,
        facts.client_sglang,
        secrets(warnings),
        started,
        out,
        console,
        err,
        args.no_chart,
    )


def run(args: argparse.Namespace) -> int:
    console = Console(highlight=False, markup=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    if args.validate:
        return run_validate(args.validate, console)
    if args.report:
        return run_report(args.report, console, args.no_chart)
    loaded = settings.from_args(args, "bench")
    if args.explain:
        base_url = args.url or loaded.settings.base_url()
        sys.stdout.write(
            settings.explain(loaded, "bench") + f"# base URL: {redact.url(base_url)}\n"
        )
        return 0
    args.recipe = loaded.settings.recipe
    if args.from_jsonl:
        return run_from_jsonl(args, loaded, console, err)
    if args.compare_configurations:
        return configurations.run_compare(
            args,
            loaded,
            console,
            err,
            lambda leg: run_live(leg, loaded, console, err),
            configurations.named_recipe(args.recipe),
        )
    if args.url_baseline or args.url_throughput or args.boot or args.boot_command:
        raise UserError(
            "--url-baseline, --url-throughput, --boot and --boot-command go with "
            "--compare-configurations"
        )
    return run_live(args, loaded, console, err)


COMMAND = Command(
    name="bench",
    help="run sglang's serving benchmark and compare with the recipe's published figures",
    description=__doc__.split("\n\n")[0].replace("\n", " "),
    add_arguments=add_arguments,
    run=run,
)
