"""The qualification run: plan, doctor, boot, steps (resumable), verdicts, bundle."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sm12x import __version__, settings
from sm12x.bench import provenance
from sm12x.bench.main import served_id
from sm12x.errors import UserError
from sm12x.launch.choice import following, select_recipe
from sm12x.qualify import chart, facts, nodes, steps, throughput
from sm12x.qualify.boot import Booter
from sm12x.qualify.bundle import Folder, QualifyResult, RecipeRef, Step
from sm12x.qualify.plan import CORRECTNESS, make_plan
from sm12x.qualify.render_hash import recipe_hash
from sm12x.qualify.scrub import Scrubber
from sm12x.qualify.verdict import judge
from sm12x.recipe.tracks import home_track

TIMEOUT = 30.0


def _say(err: Console, text: str) -> None:
    err.print(f"sm12x qualify: {text}", highlight=False, markup=False, soft_wrap=True)


def settings_of(args: argparse.Namespace) -> dict:
    keep = (
        "tolerance", "hold", "full_load_output", "prompts_per_concurrency", "concurrency",
        "input_len", "output_len", "long_context_len", "long_context_output",
        "soak_concurrency", "soak_rounds", "no_doctor",
    )  # fmt: skip
    out = {k: getattr(args, k) for k in keep}
    out["mode"] = "url" if args.url else "boot-command" if args.boot_command else "compose"
    return out


def qualify(args: argparse.Namespace) -> str:
    started_at = time.monotonic()
    err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    if args.target:
        args.recipe = args.target
    if args.url and (args.boot_command or args.throughput_boot_command or args.tune_boot_command):
        raise UserError(
            "--url qualifies a server already running; --boot-command (or, with neither, "
            "the recipe's compose service) boots one: not both"
        )
    loaded = settings.from_args(args, "qualify")
    recipe, why = select_recipe(loaded.settings.recipe, origin=loaded.origin("recipe"))
    # With --url on a pair, --ssh starts nothing: it reads node 1's GPUs for the
    # provenance (tests/integration/test_qualify_nodes.py). A single node has no other.
    if args.ssh and not recipe.is_multinode:
        raise UserError(
            f"--ssh starts another node, and {recipe.name} runs on one node: drop --ssh"
        )
    _say(err, why)
    loaded = following(loaded, recipe)
    plan = make_plan(
        recipe,
        concurrencies=args.concurrency, input_len=args.input_len, output_len=args.output_len,
        prompts_per_concurrency=args.prompts_per_concurrency,
        long_context_len=args.long_context_len, long_context_output=args.long_context_output,
        hold_s=args.hold, full_load_output=args.full_load_output, tolerance=args.tolerance,
    )  # fmt: skip
    for note in plan.notes:
        _say(err, note)
    key = loaded.settings.key()
    base_url = (args.url or loaded.settings.base_url()).rstrip("/")
    out = args.out or Path(f"qualify-{recipe.name}")
    identity = {"recipe": recipe.name, "hash": recipe_hash(recipe), **settings_of(args)}
    try:
        folder = Folder(out, identity, args.fresh)
    except FileExistsError:
        raise UserError(f"{out} holds a finished bundle: --out elsewhere, or --fresh") from None
    except ValueError:
        raise UserError(
            f"{out} holds an unfinished run of other settings: the same command resumes "
            "it; --fresh discards it"
        ) from None
    deadline_at = started_at + args.deadline
    done: dict[str, Step] = {}
    booter = None
    if not args.url:
        booter = Booter(
            loaded=loaded, base_url=base_url, deadline_at=deadline_at,
            boot_timeout=args.boot_timeout, err=err, say=lambda t: _say(err, t),
            compose_file=args.compose_file, ssh_host=args.ssh,
            commands={"baseline": args.boot_command, "throughput": args.throughput_boot_command},
        )  # fmt: skip
    started = steps.now()

    def record(step: Step) -> None:
        step.finished = step.finished or steps.now()
        folder.save_step(step)
        done[step.name] = step
        _say(
            err,
            f"{step.name}: {step.verdict}" + (f" ({step.problems[0]})" if step.problems else ""),
        )

    def new(name: str) -> Step:
        return Step.model_validate(
            {"name": name, "phase": name.split("/")[0], "kind": name.split("/")[1],
             "verdict": "not-run", "started": steps.now()}
        )  # fmt: skip

    for name in plan.steps:
        kept = folder.step(name)
        if kept is not None:
            done[name] = kept
            _say(err, f"{name}: {kept.verdict} (kept from the run before)")
    try:
        if "baseline/doctor" not in done:
            step = new("baseline/doctor")
            if args.no_doctor:
                step.verdict, step.problems = "skipped", ["--no-doctor"]
            elif args.url and provenance.is_mock(provenance.server_info(base_url, key, TIMEOUT)[0]):
                step.verdict = "skipped"
                step.problems = ["the server is sm12x mock-server: there is no rig to check"]
            else:
                step = steps.doctor(loaded, Scrubber.for_run([key]), step)
            record(step)
        if done["baseline/doctor"].verdict == "fail":
            return finish(plan, folder, done, recipe, started, None, args, err)
        if booter is not None and any(n not in done for n in plan.steps):
            # Resuming after the relaunch: the throughput configuration; else the baseline
            # (tune, when it is next, takes it down itself).
            if "throughput/relaunch" in done and plan.throughput is not None:
                booter.start("throughput", plan.throughput)
            else:
                booter.start("baseline", recipe)
        info, problem = provenance.server_info(base_url, key, TIMEOUT)
        if info is None:
            raise UserError(f"no sglang server at {base_url}: {problem}")
        models, _ = provenance.get_json(f"{base_url}/v1/models", key, TIMEOUT)
        model = served_id(models) or recipe.model.served_model_name or recipe.model.hf_id
        scrub = Scrubber.for_run(
            [key, base_url, *_answer_secrets(info),
             *nodes.secrets(args.ssh, loaded.settings.head_addr)]
        )  # fmt: skip
        prov, server_args, notes = facts.collect(
            base_url, info, loaded.settings.track_name, loaded.settings.model_dir,
            provenance.Overrides(container="none" if provenance.is_mock(info) else "auto"),
        )  # fmt: skip
        prov.nodes = nodes.facts(recipe, prov, args.ssh)
        for note in notes:
            _say(err, scrub.text(note))
        ctx = steps.Context(
            plan=plan, base_url=base_url, api_key=key, model=model, folder=folder, scrub=scrub,
            err=err, environment=prov.environment, server=server_args,
            sm12x_version=__version__, loaded=loaded,
            verify_options=["--soak-concurrency", str(args.soak_concurrency),
                            "--soak-rounds", str(args.soak_rounds)],
            deadline_at=deadline_at, say=lambda t: _say(err, t),
        )  # fmt: skip
        run_steps(ctx, plan, done, record, new, args, err, booter)
    except TimeoutError as exc:
        raise UserError(
            f"--deadline {args.deadline:g} s reached at {exc}; what finished is kept in "
            f"{folder.work}: run the same command again to resume"
        ) from None
    finally:
        if booter is not None:
            booter.stop()
    return finish(plan, folder, done, recipe, started, (prov, scrub), args, err)


def _answer_secrets(info: dict) -> list[str]:
    """Values of the server's answer that name its machine (kept out of the bundle)."""
    found = []
    for key in ("host", "hostname", "node_name", "dist_init_addr"):
        value = info.get(key)
        if isinstance(value, str):
            found.append(value.split(":")[0])
    return found


def run_steps(ctx, plan, done, record, new, args, err, booter) -> None:
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=False,
    )  # fmt: skip
    with progress:
        task = progress.add_task("qualify", total=len(plan.steps), completed=len(done))
        failed = any(s.verdict == "fail" and s.kind in CORRECTNESS for s in done.values())
        for name in plan.steps:
            if name in done:
                continue
            progress.update(task, description=f"qualify: {name}")
            step = new(name)
            if time.monotonic() >= ctx.deadline_at:
                raise TimeoutError(name)
            if failed:
                step.problems = ["an earlier correctness step failed"]
            elif name.startswith("throughput/") and booter is None:
                step.verdict, step.problems = "skipped", [throughput_skip(args)]
            elif name == "throughput/tune":
                step = throughput.tune(args, step, plan.throughput, booter, ctx.scrub, ctx.say)
            elif name == "throughput/relaunch":
                step = throughput.relaunch(step, plan.throughput, booter)
            elif step.kind == "verify":
                step = steps.verify(ctx, step, ctx.folder.work)
            elif step.kind == "full-load":
                step = steps.full_load(ctx, step)
            elif step.kind == "bench":
                step = steps.bench(ctx, step, lambda c: None)
            elif step.kind == "long-context":
                step = steps.long_context(ctx, step)
            record(step)
            failed = failed or (step.verdict == "fail" and step.kind in CORRECTNESS)
            progress.update(task, completed=len(done))


def throughput_skip(args) -> str:
    return "--url: qualify cannot relaunch a server it did not start"


def finish(plan, folder, done, recipe, started, extra, args, err) -> str:
    ordered = []
    for name in plan.steps:
        step = done.get(name)
        if step is None:
            step = Step.model_validate(
                {"name": name, "phase": name.split("/")[0], "kind": name.split("/")[1],
                 "verdict": "not-run", "problems": ["doctor failed: fix what it says first"]}
            )  # fmt: skip
        ordered.append(step)
    by_name = {plan.recipe.name: plan.recipe}
    if plan.throughput is not None:
        by_name[plan.throughput.name] = plan.throughput

    def recipe_of(step: Step):
        return by_name.get(step.bench.recipe.name if step.bench else "", plan.recipe_for(step.name))

    verdicts = judge(ordered, recipe_of, plan.tolerance)
    if extra is None:
        prov = None
        scrub = Scrubber.for_run([])
    else:
        prov, scrub = extra
    if prov is None:
        from sm12x.qualify.facts import collect

        prov = collect(
            "http://127.0.0.1:1",
            None,
            home_track(recipe),
            None,
            provenance.Overrides(container="none"),
        )[0]
    result = QualifyResult(
        sm12x_version=__version__, started=started, finished=steps.now(),
        recipe=RecipeRef(name=recipe.name, hash=recipe_hash(recipe), track=prov.track),
        provenance=prov, settings=settings_of(args), plan=plan.steps, steps=ordered,
        verdict=verdicts,
    )  # fmt: skip
    charts = chart.write(result, recipe_of, folder.root)
    result.charts = charts
    data = scrub.data(result.model_dump(mode="json", by_alias=True))
    clean = QualifyResult.model_validate(data)
    path = folder.finish(clean)
    leaks = scrub.leaks(path.read_bytes())
    if leaks:
        path.unlink()
        raise UserError(f"the bundle still held {', '.join(leaks)}: nothing was written")
    print(f"{verdicts.summary}: {recipe.name}")
    for line in verdicts.lines:
        print(f"  {line}")
    print(f"bundle: {path.parent}")
    sys.stdout.flush()
    return verdicts.summary
