"""The steps of a qualification, each returning its Step (verdict and evidence).

Each step is one of sm12x's own commands called through its Python entry point
(doctor's Doctor, verify's main, tune's run) or the measuring client
(load.py): nothing here re-implements a check.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from sm12x.bench import compare, provenance
from sm12x.bench.main import recipe_info, reset_accept_stats
from sm12x.bench.result import BenchResult, Client, Environment, Metrics, Run, Workload
from sm12x.qualify import load
from sm12x.qualify.bundle import Folder, FullLoadReading, RunRecords, Sample, Step
from sm12x.qualify.plan import Plan
from sm12x.qualify.scrub import Scrubber
from sm12x.recipe import Recipe
from sm12x.settings import Loaded

# verify's baseline: chat, streaming, tools, reasoning, acceptance, soak.
VERIFY_CHECKS = (
    "chat,chat-stream,raw-stream,reasoning-on,reasoning-off,tools,tools-stream,"
    "tools-parallel,tool-choice,tools-multi-turn,tools-not-needed,spec,soak"
)
SAMPLE_EVERY_S = 0.25
RAMP_S = 60.0


@dataclass
class Context:
    plan: Plan
    base_url: str
    api_key: str | None
    model: str
    folder: Folder
    scrub: Scrubber
    err: Console
    environment: Environment
    server: dict
    sm12x_version: str
    loaded: Loaded
    verify_options: list[str]
    deadline_at: float
    say: Callable[[str], None]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def doctor(loaded: Loaded, scrub: Scrubber, step: Step) -> Step:
    from sm12x.doctor import main as doctor_main
    from sm12x.doctor.checks import Doctor, Options

    host = doctor_main.make_host()
    options = Options(
        loaded=loaded, peer=None, peer_report=None, min_free_gib=10.0,
        verify_hashes=False, ssh=False,
    )  # fmt: skip
    checks = Doctor(host, options).run()
    step.checks = {c.id: c.verdict for c in checks}
    failed = [c for c in checks if c.failed]
    step.problems = [scrub.text(f"{c.id}: {c.detail}; fix: {c.fix}") for c in failed]
    step.verdict = "fail" if failed else "pass"
    return step


def verify(ctx: Context, step: Step, work: Path) -> Step:
    from verify import cli as verify_cli

    recipe = ctx.plan.recipe_for(step.name)
    junit, report = work / "junit.xml", work / "report.json"
    argv = [
        "--base-url", ctx.base_url, "--recipe", recipe.name, "--only", VERIFY_CHECKS,
        "--junit", str(junit), "--json", str(report), *ctx.verify_options,
    ]  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = verify_cli.main(argv)
    if report.exists():
        data = json.loads(report.read_text())
        results = data.get("results") or data.get("checks") or []
        for r in results:
            if isinstance(r, dict) and "name" in r:
                step.checks[r["name"]] = str(r.get("status") or r.get("verdict"))
                if str(r.get("status") or r.get("verdict")) in ("fail", "error"):
                    step.problems.append(ctx.scrub.text(f"{r['name']}: {r.get('problem') or ''}"))
    if junit.exists():
        step.junit = ctx.scrub.text(junit.read_text(encoding="utf-8", errors="replace"))
    step.verdict = "pass" if code == 0 else "fail"
    if code != 0 and not step.problems:
        step.problems.append(f"sm12x verify exited {code}")
    return step


def _running(text: str, dp: int) -> list[int] | None:
    from prometheus_client.parser import text_string_to_metric_families

    ranks = [0] * dp
    seen = False
    for family in text_string_to_metric_families(text):
        if family.name != "sglang:num_running_reqs":
            continue
        for sample in family.samples:
            rank = int(sample.labels.get("dp_rank", "0"))
            if rank < dp:
                ranks[rank] = int(sample.value)
                seen = True
    return ranks if seen else None


def held(samples: list[Sample], limit: int, dp: int) -> float:
    """The longest stretch (seconds) every rank's sample read at least `limit`."""
    best, since = 0.0, None
    for s in samples:
        full = len(s.running) == dp and all(v >= limit for v in s.running)
        if full and since is None:
            since = s.t_s
        elif not full:
            since = None
        if since is not None:
            best = max(best, s.t_s - since)
    return round(best, 3)


def full_load(ctx: Context, step: Step) -> Step:
    p = ctx.plan
    dp, limit = p.target_for(step.name)
    # A quarter more streams than the ranks hold: the extra wait in sglang's queue,
    # so a rank stays full while a finished request's stream sends its next one.
    streams = limit * dp + max(dp, limit * dp // 4)
    stop = threading.Event()
    # The ramp (every stream admitted) gets a minute beyond the hold, within --deadline.
    left = ctx.deadline_at - time.monotonic()
    if left < p.hold_s:
        raise TimeoutError(f"{step.name} (it needs {p.hold_s:g} s, {max(0.0, left):.0f} s left)")
    spec = load.Load(
        ctx.base_url, ctx.model, ctx.api_key, streams, 0, 64, p.full_load_output,
        duration_s=min(p.hold_s + RAMP_S, left), stop=stop,
    )  # fmt: skip
    records: list[load.RequestRecord] = []
    thread = threading.Thread(target=lambda: records.extend(load.run(spec)), daemon=True)
    samples: list[Sample] = []
    headers = provenance.api_headers(ctx.api_key)
    import httpx

    t0 = time.monotonic()
    thread.start()
    with httpx.Client(timeout=5.0, headers=headers) as client:
        while thread.is_alive():
            try:
                text = client.get(f"{ctx.base_url}/metrics").text
                ranks = _running(text, dp)
            except (httpx.HTTPError, ValueError):
                ranks = None
            if ranks is not None:
                samples.append(Sample(t_s=round(time.monotonic() - t0, 3), running=ranks))
            if held(samples, limit, dp) >= p.hold_s:
                stop.set()  # the streams finish the requests they hold
            time.sleep(SAMPLE_EVERY_S)
    thread.join(timeout=p.hold_s + RAMP_S + 60.0)
    got = held(samples, limit, dp)
    step.full_load = FullLoadReading(
        per_rank_limit=limit, dp_ranks=dp, hold_s=p.hold_s, samples=samples,
        held_s=got,
    )  # fmt: skip
    lost = [r for r in records if not r.ok]
    if not samples:
        step.problems.append(
            "/metrics gave no sglang:num_running_reqs: start with --enable-metrics"
        )
    elif got < p.hold_s:
        top = [max(s.running[i] for s in samples) for i in range(dp)]
        step.problems.append(
            f"num_running_reqs did not hold {limit} on every DP rank for "
            f"{p.hold_s:g} s (longest {got:g} s; highest per rank {top}): the server does "
            "not admit the recipe's --max-running-requests"
        )
    if lost:
        step.problems.append(f"{len(lost)} of {len(records)} requests failed at full load")
    step.verdict = "fail" if step.problems else "pass"
    return step


def accept_length(ctx: Context) -> float | None:
    info, _ = provenance.server_info(ctx.base_url, ctx.api_key, 10.0)
    summary = info or {}
    states = summary.get("internal_states") if isinstance(summary, dict) else None
    if isinstance(states, list) and states and isinstance(states[0], dict):
        value = states[0].get("avg_spec_accept_length")
        return float(value) if isinstance(value, int | float) else None
    return None


def measure(ctx: Context, name: str, c: int, n: int, inp: int, out: int) -> RunRecords:
    """One load run, or the one a killed run finished before (resumption)."""
    key = f"c{c}-i{inp}"
    kept = ctx.folder.part(name, key)
    if kept is not None:
        return RunRecords.model_validate(kept)
    reset = reset_accept_stats(ctx.base_url, ctx.api_key, 10.0)
    records = load.run(load.Load(ctx.base_url, ctx.model, ctx.api_key, c, n, inp, out))
    run = RunRecords(
        concurrency=c, input_len=inp, output_len=out, num_prompts=n, records=records,
        figures=load.figures(records), accept_length=None if reset else accept_length(ctx),
    )  # fmt: skip
    ctx.folder.save_part(name, key, run.model_dump(mode="json"))
    return run


def to_bench_run(r: RunRecords) -> Run:
    f = r.figures
    lost = r.num_prompts - int(f["completed"] or 0) if r.num_prompts else 0
    return Run(
        concurrency=r.concurrency,
        num_prompts=r.num_prompts,
        completed=int(f["completed"] or 0),
        status="ok" if not lost else ("failed" if not f["completed"] else "partial"),
        problems=[f"{lost} request(s) failed"] if lost else [],
        accept_length_scope="per-run" if r.accept_length is not None else None,
        metrics=Metrics(
            output_tokens_per_s=f["output_tokens_per_s"], mean_itl_ms=f["mean_itl_ms"],
            p99_itl_ms=None, mean_ttft_ms=f["mean_ttft_ms"], p99_ttft_ms=f["p99_ttft_ms"],
            accept_length=r.accept_length, mean_e2e_latency_ms=f["mean_e2e_latency_ms"],
            request_throughput=f["request_throughput"], duration_s=f["duration_s"],
            total_output_tokens=f["total_output_tokens"],
        ),
    )  # fmt: skip


def bench_result(ctx: Context, recipe: Recipe, runs: list[RunRecords], started: str) -> BenchResult:
    p = ctx.plan
    workload = Workload(
        backend="sm12x-qualify", dataset_name="random", dataset_path=None,
        input_len=runs[0].input_len if runs else p.input_len,
        output_len=runs[0].output_len if runs else p.output_len,
        range_ratio=1.0, concurrencies=[r.concurrency for r in runs],
    )  # fmt: skip
    bench_runs = [to_bench_run(r) for r in runs]
    return BenchResult(
        sm12x_version=ctx.sm12x_version, started=started, finished=now(),
        recipe=recipe_info(recipe), environment=ctx.environment,
        client=Client(sm12x_version=ctx.sm12x_version, python=provenance.python_version(),
                      sglang_version=None),
        server=ctx.server, workload=workload, runs=bench_runs,
        comparisons=compare.compare(recipe, bench_runs, workload),
        passed=all(r.status == "ok" for r in bench_runs),
    )  # fmt: skip


def bench(ctx: Context, step: Step, on_run: Callable[[int], None]) -> Step:
    p = ctx.plan
    recipe = p.recipe_for(step.name)
    runs = []
    for c in p.concurrencies:
        if time.monotonic() >= ctx.deadline_at:
            raise TimeoutError(f"{step.name} at concurrency {c}")
        if ctx.folder.part(step.name, f"c{c}-i{p.input_len}") is not None:
            ctx.say(f"{step.name}: concurrency {c} kept from the run before")
        else:
            ctx.say(f"{step.name}: concurrency {c}, {c * p.prompts_per_concurrency} requests")
        run = measure(ctx, step.name, c, c * p.prompts_per_concurrency, p.input_len, p.output_len)
        runs.append(run)
        on_run(c)
    step.runs = runs
    step.bench = bench_result(ctx, recipe, runs, step.started or now())
    lost = [r for r in step.bench.runs if r.status != "ok"]
    step.problems = [f"concurrency {r.concurrency}: {r.problems[0]}" for r in lost if r.problems]
    step.verdict = "fail" if lost else "pass"
    return step


def long_context(ctx: Context, step: Step) -> Step:
    p = ctx.plan
    run = measure(ctx, step.name, 1, 1, p.long_context_len, p.long_context_output)
    step.runs = [run]
    if not run.figures["completed"]:
        errors = {r.error for r in run.records}
        step.problems.append(
            f"the {p.long_context_len}-token request failed ({', '.join(map(str, errors))})"
        )
    step.verdict = "fail" if step.problems else "pass"
    return step
