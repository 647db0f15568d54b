"""`python -m verify` / `sm12x verify`: the smoke gate to run after every deploy.

The server, its key and recipe come from the settings every sm12x command
reads (sm12x.settings: flags, the environment, .env): with SM12X_API_KEY in
.env, verify sends it; with SM12X_BIND/SM12X_PORT there, it asks that port.

Exit status: 0 every required check passed; 1 a check failed or could not
run; 2 bad input or no server at --base-url; 3 boot mode could not start it.
"""

from __future__ import annotations

import argparse
import importlib.util
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx
from rich.console import Console
from rich.text import Text

from sm12x import fields, settings
from sm12x.argparsing import StrictParser
from sm12x.errors import UserError
from sm12x.http import redact
from sm12x.http.redact import Redactor
from sm12x.settings import Loaded
from verify import accuracy, compare, fullload, report
from verify.client import Endpoint
from verify.context import Context, Options
from verify.result import CheckResult, Verdict
from verify.runner import NAMES, Interrupted, not_run, plan, run_checks


class UsageError(Exception):
    pass


# Each soak stream is an open connection and a task: past this a run is a
# load test (sm12x bench), not a check, and the machine runs out first.
MAX_SOAK_CONCURRENCY = 1024
# Requests a check sends one after another, at most, for the default deadline.
SEQUENTIAL_REQUESTS = {"soak": 0, "compare": 6, "accuracy": 0, "full-load": 0}
DEFAULT_REQUESTS = 4


def default_deadline(args, chosen: set[str]) -> float:
    """Seconds for the checks chosen: each may send a few requests in a row,
    each up to --timeout; the soak its rounds, the accuracy gate its batches."""
    total = 0.0
    for name in chosen:
        if name == "soak":
            total += args.timeout * (args.soak_rounds + 1)
        elif name == "accuracy":
            batches = -(-(args.accuracy_limit or 2000) // max(args.accuracy_concurrency, 1))
            total += args.timeout * (batches + 1)
        elif name == "full-load":
            # No request starts after --full-load-time; the last ones end within --timeout.
            total += min(args.full_load_time, args.timeout * args.full_load_rounds) + args.timeout
        else:
            total += args.timeout * SEQUENTIAL_REQUESTS.get(name, DEFAULT_REQUESTS)
    return max(total, args.timeout)


# How the command is named in its messages: `sm12x verify` (every sm12x command's
# errors begin "sm12x <cmd>: error:"), or `python -m verify` run on its own.
PROG = "sm12x verify"


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = StrictParser(
        prog=prog,
        description="Smoke-test a deployed sm12x "
        "(sglang, DeepSeek-V4-Flash + DSPARK) OpenAI-compatible endpoint.",
    )
    p.add_argument(
        "--base-url",
        help="server root (default: http://SM12X_BIND:SM12X_PORT, "
        "loopback for 0.0.0.0, i.e. http://127.0.0.1:30000 by default)",
    )
    p.add_argument("--model", help="default: the first model /v1/models lists")
    p.add_argument(
        "--timeout",
        type=fields.seconds,
        default=300.0,
        help="seconds one whole request may take, wall clock, slow trickles "
        "included (default %(default)s)",
    )
    p.add_argument(
        "--stall-timeout",
        type=fields.seconds,
        default=60.0,
        help="seconds without a byte before a request counts as stalled (default %(default)s)",
    )
    p.add_argument("--connect-timeout", type=fields.seconds, default=10.0)
    p.add_argument(
        "--min-accept-length",
        type=fields.non_negative,
        help="speculative acceptance floor (default: the recipe's, else 2.0)",
    )
    p.add_argument(
        "--vision",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the image check (default: where the recipe serves a vision tower)",
    )
    p.add_argument(
        "--metrics-url",
        help="a backend's base or /metrics URL, for spec figures when --base-url is a router",
    )
    p.add_argument(
        "--soak-concurrency",
        type=fields.count,
        default=64,
        help=f"streams at once in the soak (at most {MAX_SOAK_CONCURRENCY})",
    )
    p.add_argument(
        "--deadline",
        type=fields.seconds,
        metavar="SECONDS",
        help="seconds the whole run of checks may take (after --boot's boot); "
        "checks not started by then are not run, requests in flight are cut off, "
        "the reports are written (default: derived from the checks chosen and "
        "--timeout)",
    )
    p.add_argument("--soak-rounds", type=fields.count, default=3, help="k of pass^k")
    p.add_argument("--soak-max-tokens", type=fields.count, default=2048)
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="CHECK",
        help=f"comma-separated, repeatable: {', '.join(NAMES)}",
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="CHECK",
        help="run only these (and the checks they need)",
    )
    p.add_argument("--json", type=Path, default=Path("verify-report/report.json"))
    p.add_argument("--junit", type=Path, default=Path("verify-report/junit.xml"))
    p.add_argument("--no-files", action="store_true", help="write no JSON/JUnit report")
    cmp = p.add_argument_group(
        "speculative on/off comparison",
        "the same temperature-0 prompts to a second server: the same recipe booted without "
        "speculative decoding (`sm12x launch --no-spec`)",
    )
    cmp.add_argument("--compare-url", metavar="URL", help="the reference server's root")
    cmp.add_argument("--compare-api-key", help="its API key (default: the same as --api-key)")
    cmp.add_argument(
        "--compare-min-agreement",
        type=fields.fraction,
        default=compare.MIN_AGREEMENT,
        help="fail below this token agreement (default %(default)s; docs/verify.md)",
    )
    acc = p.add_argument_group(
        "accuracy gate", "a public benchmark through lm-eval (pip install 'sm12x[accuracy]')"
    )
    acc.add_argument("--accuracy", action="store_true", help="run the accuracy gate")
    acc.add_argument(
        "--accuracy-task",
        default=accuracy.DEFAULT_TASK,
        help="an lm-eval task name or task YAML file (default %(default)s: GSM8K)",
    )
    acc.add_argument(
        "--accuracy-limit",
        type=fields.count,
        metavar="N",
        help="ask only the first N questions (default: all)",
    )
    acc.add_argument(
        "--accuracy-floor",
        type=fields.fraction,
        help="fail below this accuracy, 0-1 (default: the recipe's)",
    )
    acc.add_argument("--accuracy-concurrency", type=fields.count, default=16)
    full = p.add_argument_group(
        "full load (every DP rank full)",
        "the exact tasks at the recipe's own max running requests, in a closed loop "
        "(docs/verify.md, 'Full load')",
    )
    full.add_argument(
        "--full-load",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the full-load check (default: on for a recipe with ragged verify, "
        "SGLANG_RAGGED_VERIFY_MODE compact or cap-accept; off otherwise)",
    )
    full.add_argument(
        "--full-load-concurrency",
        type=fields.count,
        metavar="N",
        help="streams at once (default: the recipe's --max-running-requests, else the "
        "server's max_running_requests)",
    )
    full.add_argument(
        "--full-load-rounds",
        type=fields.count,
        default=2,
        help="exact tasks each stream runs one after another (default 2)",
    )
    full.add_argument(
        "--full-load-time",
        type=fields.seconds,
        default=900.0,
        metavar="SECONDS",
        help="no new request starts after this (default 900; each in flight is bounded "
        "by --timeout)",
    )
    boot = p.add_argument_group("boot mode")
    boot.add_argument("--boot", action="store_true", help="start the server, then verify it")
    boot.add_argument(
        "--boot-command",
        help="any command that starts the server (its output is "
        "the log); default: docker compose --profile PROFILE up -d",
    )
    boot.add_argument(
        "--profile",
        help="compose profile (default: the recipe's, its head node's "
        "for a pair; auto without a recipe)",
    )
    boot.add_argument("--compose-file")
    boot.add_argument("--boot-timeout", type=fields.seconds, default=5400.0)
    boot.add_argument("--down", action="store_true", help="tear the server down afterwards")
    boot.add_argument("--boot-log", type=Path, help="save the server log seen while booting")
    # --recipe (the acceptance floor and the boot profile), --api-key, --bind,
    # --port, --docker, --env-file, --explain: the settings every command shares.
    settings.add_arguments(p, "verify")
    return p


def _names(values: list[str]) -> set[str]:
    names = {n.strip() for v in values for n in v.split(",") if n.strip()}
    unknown = names - set(NAMES)
    if unknown:
        raise UsageError(
            f"unknown check(s) {', '.join(sorted(unknown))}; known: {', '.join(NAMES)}"
        )
    return names


def _recipe(name: str):
    """The recipe named, or None where sm12x.recipe is not installed."""
    try:
        from sm12x.recipe import load_recipe  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        return load_recipe(name)
    except Exception as exc:  # noqa: BLE001 - any recipe error is a usage error here
        raise UsageError(f"recipe {name!r}: {exc}") from None


def _recipe_floor(name: str) -> float | None:
    """The recipe's acceptance floor, if sm12x.recipe is there and says one."""
    recipe = _recipe(name)
    if recipe is None:
        return None
    for holder in (getattr(recipe, "verify", None), getattr(recipe, "expect", None), recipe):
        for attr in ("min_accept_length", "accept_length_floor"):
            value = getattr(holder, attr, None) if holder is not None else None
            if isinstance(value, (int, float)):
                return float(value)
    return None


def _recipe_model(name: str) -> tuple[str | None, str | None, bool]:
    """What the recipe's model line makes verify expect: the served model id, the
    line's name and whether it serves a vision tower (sm12x.recipe.lines)."""
    recipe = _recipe(name)
    model = getattr(recipe, "model", None)
    if model is None:
        return None, None, False
    return (
        getattr(model, "served_model_name", None),
        getattr(model, "line", None),
        bool(getattr(model, "vision", False)),
    )


def _full_load(args) -> fullload.FullLoad | None:
    """--full-load's settings, or None where it is off: on by default for a recipe
    whose verify is ragged (the configuration whose full ranks it loads)."""
    recipe = _recipe(args.recipe) if args.recipe else None
    ragged = getattr(getattr(recipe, "dspark", None), "ragged_verify", "static") != "static"
    if not (args.full_load if args.full_load is not None else ragged):
        return None
    streams, dp, source = None, None, ""
    if args.full_load_concurrency:
        streams, source = args.full_load_concurrency, "--full-load-concurrency"
    if recipe is not None:
        from sm12x.recipe.derived import attention_dp, dp_size

        dp = max(dp_size(recipe), attention_dp(recipe))
        flag = recipe.flag_value("--max-running-requests")
        if streams is None and flag is not None:
            streams, source = int(flag), f"recipe {args.recipe}'s --max-running-requests"
    if streams is not None and streams > MAX_SOAK_CONCURRENCY:
        raise UsageError(
            f"full load at {streams} streams ({source}): at most {MAX_SOAK_CONCURRENCY}; "
            "`sm12x bench --concurrency` loads a server that far"
        )
    return fullload.FullLoad(
        streams, dp, source, rounds=args.full_load_rounds, budget_s=args.full_load_time
    )


def _base(value: str, flag: str) -> str:
    try:
        url = httpx.URL(value)
    except Exception:  # noqa: BLE001
        raise UsageError(f"{flag} {redact.url(value)!r} is not a URL") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise UsageError(f"{flag} {redact.url(value)!r}: expected http(s)://HOST:PORT")
    return str(url).rstrip("/").removesuffix("/v1")


def _compare_endpoint(args, ep: Endpoint) -> Endpoint | None:
    if not args.compare_url:
        return None
    if not 0 <= args.compare_min_agreement <= 1:
        raise UsageError("--compare-min-agreement must be between 0 and 1")
    base = _base(args.compare_url, "--compare-url")
    if base == ep.base_url:
        raise UsageError(
            "--compare-url is --base-url: point it at the server started with "
            "`sm12x launch --no-spec`"
        )
    return Endpoint(
        base, args.compare_api_key or ep.api_key, ep.timeout, ep.stall_timeout, ep.connect_timeout
    )


def _accuracy_options(args) -> accuracy.AccuracyOptions | None:
    if not args.accuracy:
        return None
    if importlib.util.find_spec("lm_eval") is None:
        raise UsageError(
            "--accuracy runs lm-eval, which is not installed: "
            "pip install 'sm12x[accuracy]' (or `pip install lm-eval[api]`)"
        )
    if args.accuracy_limit is not None and args.accuracy_limit < 1:
        raise UsageError("--accuracy-limit must be at least 1")
    if args.accuracy_concurrency < 1:
        raise UsageError("--accuracy-concurrency must be at least 1")
    try:
        name, _ = accuracy.task_name(args.accuracy_task)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    references = list(accuracy.MODEL_REFERENCES.get(name, ()))
    floor, source = args.accuracy_floor, "--accuracy-floor"
    recipe = _recipe(args.recipe) if args.recipe else None
    gate = getattr(getattr(recipe, "verify", None), "accuracy", None)
    if gate is not None and gate.task == name:
        references += [
            accuracy.Reference(r.correct / r.total, r.config, r.source, r.correct, r.total, r.url)
            for r in gate.references
        ]
        if floor is None:
            floor, source = gate.floor, f"recipe {args.recipe}"
    if floor is None:
        raise UsageError(
            f"--accuracy needs a floor for {name}: --recipe NAME (its "
            "verify.accuracy.floor) or --accuracy-floor 0-1"
        )
    if not 0 <= floor <= 1:
        raise UsageError("--accuracy-floor is a fraction: between 0 and 1 (e.g. 0.92)")
    return accuracy.AccuracyOptions(
        args.accuracy_task,
        args.accuracy_limit,
        floor,
        source,
        args.accuracy_concurrency,
        tuple(references),
    )


def _recipe_name(loaded: Loaded) -> str | None:
    """The recipe verify holds the server to: none for auto (verify does not
    see the server's GPUs)."""
    name = loaded.settings.recipe
    return None if name == "auto" else name


def _endpoint(args, loaded: Loaded) -> Endpoint:
    base = _base(args.base_url or loaded.settings.base_url(), "--base-url")
    return Endpoint(
        base, loaded.settings.key(), args.timeout, args.stall_timeout, args.connect_timeout
    )


def _check_paths(args) -> None:
    paths = [] if args.no_files else [("--json", args.json), ("--junit", args.junit)]
    if args.boot_log:
        paths.append(("--boot-log", args.boot_log))
    seen: dict[Path, str] = {}
    for flag, path in paths:
        where = path.resolve()
        if where in seen:
            raise UsageError(f"{flag} and {seen[where]} name the same file {path}")
        seen[where] = flag
        problem = fields.writable_file(path)
        if problem:
            raise UsageError(f"{flag}: {problem}")


def _reachable(ep: Endpoint) -> str | None:
    """Why nothing listens at the endpoint, or None. Only the TCP connection:
    what the server answers (or fails to) is the health check's to judge."""
    url = httpx.URL(ep.base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.host, port), timeout=ep.connect_timeout):
            return None
    except OSError as exc:
        return f"cannot reach {ep.display_url}: {exc.strerror or exc}"


class Reports:
    """Writes the JSON and JUnit reports, redacted, whatever way the run ends."""

    def __init__(self, args, meta: dict, redactor: Redactor, console: Console) -> None:
        self.args, self.meta, self.redact, self.console = args, meta, redactor, console

    def write(self, results: list[CheckResult]) -> None:
        results = [self._clean(r) for r in results]
        meta = self.redact(self.meta)
        report.table(results, self.console)
        if self.args.no_files:
            return
        try:
            report.write_json(self.args.json, results, meta)
            report.write_junit(self.args.junit, results, meta)
        except OSError as exc:
            print(
                f"{PROG}: error: cannot write the reports: {exc.strerror or exc} "
                f"({exc.filename or self.args.json})",
                file=sys.stderr,
            )
            return
        self.console.print(
            f"reports: {self.args.json} {self.args.junit}", highlight=False, markup=False
        )

    def _clean(self, result: CheckResult) -> CheckResult:
        for name in ("problem", "cause", "fix"):
            setattr(result, name, capped(self.redact(getattr(result, name))))
        result.evidence = capped(self.redact(result.evidence))[:MAX_EVIDENCE_LINES]
        result.metrics = capped(self.redact(result.metrics))
        return result


# A hostile reply quoted in a report is cut here: the report stays readable
# (it grew to megabytes), and what it shows is enough to see what came.
MAX_FIELD = 2000
MAX_EVIDENCE_LINES = 200


def capped(value, limit: int = MAX_FIELD):
    """value with every string in it cut to `limit` characters, saying so."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}... ({len(value) - limit} more characters not shown)"
    if isinstance(value, list):
        return [capped(v, limit) for v in value]
    if isinstance(value, dict):
        return {capped(k, limit): capped(v, limit) for k, v in value.items()}
    return value


def _server(args, loaded: Loaded, say):
    """What boot mode starts: --boot-command, else the compose service of
    --profile or the recipe (sm12x.deploy.compose: verify.boot's Launcher)."""
    from verify.boot import Server

    if args.boot_command:
        return Server.command(args.boot_command)
    from sm12x.deploy import compose

    service = compose.service(args.profile, args.recipe, loaded, args.compose_file)
    for note in service.notes:
        say(f"boot: {note}")
    return Server.launched_by(service)


def run(args, console: Console) -> int:
    try:
        loaded = settings.from_args(args, "verify")
    except UserError as exc:
        raise UsageError(exc.message) from None
    args.recipe = _recipe_name(loaded)
    ep = _endpoint(args, loaded)
    if args.explain:
        console.print(
            settings.explain(loaded, "verify") + f"# base URL: {ep.display_url}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return 0
    skip, only = _names(args.skip), _names(args.only)
    try:
        chosen, _ = plan(only, skip)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.soak_concurrency > MAX_SOAK_CONCURRENCY:
        raise UsageError(
            f"--soak-concurrency {args.soak_concurrency}: at most "
            f"{MAX_SOAK_CONCURRENCY} streams (each is a connection and a task); "
            "load beyond that is `sm12x bench --concurrency`'s"
        )
    full_load = _full_load(args)
    if full_load is None:
        chosen = chosen - {"full-load"}  # off: it costs the run nothing
    deadline_s = args.deadline if args.deadline is not None else default_deadline(args, chosen)
    _check_paths(args)
    redactor = Redactor(
        [
            ep.api_key,
            args.compare_api_key,
            *redact.url_secrets(ep.base_url),
            *redact.url_secrets(args.compare_url or ""),
        ]
    )
    floor, source = 2.0, "default"
    if args.recipe:
        recipe_floor = _recipe_floor(args.recipe)
        if recipe_floor is not None:
            floor, source = recipe_floor, f"recipe {args.recipe}"
    if args.min_accept_length is not None:
        floor, source = args.min_accept_length, "--min-accept-length"
    expected_model, line, vision = (
        _recipe_model(args.recipe) if args.recipe else (None, None, False)
    )
    if args.vision is not None:
        vision = args.vision
    options = Options(
        min_accept_length=floor,
        accept_floor_source=source,
        metrics_url=args.metrics_url,
        soak_concurrency=args.soak_concurrency,
        soak_rounds=args.soak_rounds,
        soak_max_tokens=args.soak_max_tokens,
        skip=skip,
        only=only,
        compare_endpoint=_compare_endpoint(args, ep),
        compare_min_agreement=args.compare_min_agreement,
        accuracy=_accuracy_options(args),
        full_load=full_load,
        expected_model=expected_model,
        line=line,
        vision=vision,
    )
    server = None
    meta = {
        "base_url": ep.display_url,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "accept_floor": floor,
        "accept_floor_source": source,
        "model_line": line,
        "vision": vision,
        "timeout_s": ep.timeout,
        "stall_timeout_s": ep.stall_timeout,
    }
    reports = Reports(args, meta, redactor, console)

    def say(text: str) -> None:
        console.print(redactor.text(text), markup=False, highlight=False)

    try:
        if args.boot:
            from verify.boot import BootFailure, boot

            try:
                server = _server(args, loaded, say)
            except UserError as exc:
                raise UsageError(exc.message) from None
            try:
                for line in boot(server, ep.base_url, args.boot_timeout, console, ep.headers):
                    say(f"boot: {line}")
            except BootFailure as exc:
                console.print(Text("boot failed: ", style="bold red"), end="")
                say(exc.problem)
                say(f"cause: {exc.cause}\nfix: {exc.fix}")
                if exc.log_tail:
                    say("log tail:\n" + "\n".join(exc.log_tail[-10:]))
                meta["boot_failure"] = {
                    "problem": exc.problem,
                    "cause": exc.cause,
                    "fix": exc.fix,
                    "log_tail": exc.log_tail[-20:],
                }
                reports.write(not_run(f"not run: the server did not boot: {exc.problem}"))
                return 3
            finally:
                if args.boot_log and server is not None:
                    args.boot_log.parent.mkdir(parents=True, exist_ok=True)
                    args.boot_log.write_text(redactor.text("\n".join(server.log)) + "\n")
        else:
            problem = _reachable(ep) or (
                _reachable(options.compare_endpoint) if options.compare_endpoint else None
            )
            if problem:
                say(f"{PROG}: error: {problem}. Is the server running? (start it, or use --boot)")
                results = not_run(f"not run: {problem}")
                results[0].verdict, results[0].problem = Verdict.FAIL, problem
                results[0].cause = (
                    "nothing listens there: the server is not running, or it "
                    "is on another host/port"
                )
                results[
                    0
                ].fix = "start the server (or use --boot); check --base-url (and --compare-url)"
                reports.write(results)
                return 2
        # The run's deadline starts with the checks (a boot has its own bound).
        end = time.monotonic() + deadline_s
        meta["deadline_s"] = deadline_s
        ep = replace(ep, run_deadline=end)
        options = replace(
            options,
            deadline=end,
            compare_endpoint=(
                replace(options.compare_endpoint, run_deadline=end)
                if options.compare_endpoint
                else None
            ),
        )
        ctx = Context(
            ep,
            options,
            model=args.model,
            waiting=lambda line: console.print(
                f"  {line}", highlight=False, markup=False, soft_wrap=True
            ),
        )
        try:

            def progress(result) -> None:
                console.print(f"  {result.name}: {result.verdict.value}", highlight=False)

            with console.status("verifying"):
                results = run_checks(ctx, progress)
        except Interrupted as exc:
            meta["model"] = ctx.model
            meta["interrupted"] = True
            reports.write(exc.results)
            print(f"{PROG}: interrupted", file=sys.stderr)
            return 130
        finally:
            ctx.close()
        meta["model"] = ctx.model
        reports.write(results)
        return 0 if report.passed(results) else 1
    finally:
        if server is not None:
            if args.down:
                server.teardown()
            else:
                server.stop() if server.logs is not None else None


def main(argv: list[str] | None = None, prog: str = "sm12x verify") -> int:
    """Entry point for `python -m verify` and `sm12x verify` (argv without the
    program name; prog, how its messages name it); returns the exit status."""
    global PROG
    PROG = prog
    console = Console(stderr=False)
    try:
        args = parser(prog).parse_args(argv)
    except SystemExit as exc:  # argparse already printed one line of usage error
        return int(exc.code or 0) if exc.code in (0, None) else 2
    try:
        return run(args, console)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
