"""`sm12x router`: sglang's router (sglang-router) in front of several rigs.

One OpenAI endpoint over many rigs, spread by cache affinity and load, that
keeps serving when a rig goes away. The engine is sglang-router (pinned as
SGLANG_ROUTER_VERSION in versions.env); this module only decides its
arguments, each with the reason, in one place for compose (the `router`
profile) and Kubernetes (the router Deployment), then execs it.

Why a wrapper and not `python -m sglang_router.launch_router` as the
entrypoint with the flags written in compose.yaml: the API key. The router
given `--api-key ""` (what compose renders from an empty SM12X_API_KEY)
answers every request 401, so the flag must be left out when no key is set,
and compose cannot leave out an argument; and a key on the command line is
readable by every user of the host, so it goes through sm12x.keyed instead
(in memory, never in argv). The health-check settings below also need to be
the same in compose and Kubernetes, which one function gives.

Inputs, from the settings (sm12x.settings: flags, the environment, .env;
compose passes them from .env, Kubernetes from the manifest):
    SM12X_ROUTER_WORKERS         rig URLs, separated by spaces or commas (compose)
    SM12X_ROUTER_SELECTOR        key=value labels of rig pods (Kubernetes discovery)
    SM12X_ROUTER_NAMESPACE       the namespace to watch (Kubernetes)
    SM12X_ROUTER_DISCOVERY_PORT  the rigs' port on a discovered pod (default 30000)
    SM12X_ROUTER_BIND, SM12X_ROUTER_PORT  where the router listens (127.0.0.1:8000)
    SM12X_ROUTER_POLICY          cache_aware (default), power_of_two, round_robin, random
    SM12X_ROUTER_METRICS_BIND, SM12X_ROUTER_METRICS_PORT  Prometheus (127.0.0.1:29000)
    SM12X_API_KEY                clients must send it; the rigs run with the same key
    SM12X_API_KEY_FILE           or: a file holding it (the Kubernetes Secret)
    SM12X_INSECURE_NO_API_KEY=1  serve beyond loopback without a key anyway
Each has a flag of the same name (--router-workers, ...). Arguments after `--`
are appended (the router keeps the last of a repeated flag); one that sets
what a setting above sets is refused.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from sm12x import launch_env as environment
from sm12x import settings as settings_cli
from sm12x.apikey import ENV as KEY_ENV
from sm12x.apikey import exposure_problem
from sm12x.cli import Command
from sm12x.errors import UserError
from sm12x.keyed import with_key
from sm12x.recipe.extra import (
    check_userinfo,
    check_values,
    owned_router_flags,
    owner,
    parse_extra,
)
from sm12x.settings import Loaded
from sm12x.settings.model import DEFAULT_ROUTER_METRICS_PORT as DEFAULT_METRICS_PORT
from sm12x.settings.model import DEFAULT_ROUTER_PORT as DEFAULT_PORT
from sm12x.sglang_parser import JudgeParser, ParserError

ROUTER_MODULE = "sglang_router.launch_router"
KEYED_MODULE = "sm12x.keyed"
POLICIES = ("cache_aware", "power_of_two", "round_robin", "random")

DEFAULT_DISCOVERY_PORT = 30000

# Worker health checks (the router's own, on each rig's /health). Measured
# against the test servers (tests/integration/test_router.py): a dead worker
# is out after failure_threshold x interval (plus up to the timeout each
# probe waits); requests started after that are all served by the others.
HEALTH_INTERVAL_S = 10
HEALTH_TIMEOUT_S = 20
HEALTH_FAILURE_THRESHOLD = 3
HEALTH_SUCCESS_THRESHOLD = 2
# A rig listed at start that is not up within this is dropped for good (it
# never joins later: tests/integration/test_router.py shows both sides).
WORKER_STARTUP_TIMEOUT_S = 7200

_URL = re.compile(r"^https?://[^\s/:]+(:\d{1,5})?/?$|^https?://\[[0-9a-fA-F:.]+\](:\d{1,5})?/?$")
_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?=[A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class RouterArg:
    flag: str
    values: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class RouterSettings:
    """What varies per site; the health-check defaults are the tested ones."""

    workers: tuple[str, ...] = ()
    selector: tuple[str, ...] = ()
    namespace: str | None = None
    discovery_port: int = DEFAULT_DISCOVERY_PORT
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    policy: str = "cache_aware"
    metrics_host: str = "127.0.0.1"
    metrics_port: int = DEFAULT_METRICS_PORT
    api_key: bool = False
    extra: tuple[str, ...] = field(default=())

    @classmethod
    def from_settings(cls, loaded: Loaded) -> RouterSettings:
        s = loaded.settings
        return cls(
            workers=s.router_workers,
            selector=s.router_selector,
            namespace=s.router_namespace,
            discovery_port=s.router_discovery_port,
            host=s.router_bind,
            port=s.router_port,
            policy=s.router_policy,
            metrics_host=s.router_metrics_bind,
            metrics_port=s.router_metrics_port,
            api_key=s.key() is not None,
        )


def _check(settings: RouterSettings) -> None:
    if settings.workers and settings.selector:
        raise UserError(
            "set SM12X_ROUTER_WORKERS (a fixed list of rigs) or SM12X_ROUTER_SELECTOR "
            "(Kubernetes discovery), not both"
        )
    if not settings.workers and not settings.selector:
        raise UserError(
            "no rigs to route to: set SM12X_ROUTER_WORKERS in .env to the rigs' URLs, e.g. "
            "SM12X_ROUTER_WORKERS=http://192.168.1.10:30000 http://192.168.1.11:30000"
        )
    check_userinfo(settings.workers, "the router", "SM12X_ROUTER_WORKERS")
    bad = [w for w in settings.workers if not _URL.match(w)]
    if bad:
        raise UserError(
            f"SM12X_ROUTER_WORKERS: {', '.join(bad)} is not a rig URL like "
            "http://192.168.1.10:30000 (scheme, host and port; no path)"
        )
    bad = [s for s in settings.selector if not _LABEL.match(s)]
    if bad:
        raise UserError(f"SM12X_ROUTER_SELECTOR: {', '.join(bad)} is not a key=value label")
    if settings.policy not in POLICIES:
        raise UserError(
            f"SM12X_ROUTER_POLICY={settings.policy!r}: choose one of {', '.join(POLICIES)}"
        )


def build_router(settings: RouterSettings) -> list[RouterArg]:
    """sglang-router's arguments, each with why, for these settings."""
    _check(settings)
    args = [
        RouterArg("--host", (settings.host,), "SM12X_ROUTER_BIND: where clients reach the router"),
        RouterArg("--port", (str(settings.port),), "SM12X_ROUTER_PORT"),
    ]
    if settings.workers:
        args.append(
            RouterArg(
                "--worker-urls",
                tuple(w.rstrip("/") for w in settings.workers),
                "SM12X_ROUTER_WORKERS: the rigs, each an sglang server started by `sm12x launch`",
            )
        )
    else:
        args += [
            RouterArg(
                "--service-discovery",
                (),
                "find the rigs as Kubernetes pods: Running and Ready ones join, deleted ones leave",
            ),
            RouterArg(
                "--selector",
                settings.selector,
                "SM12X_ROUTER_SELECTOR: the labels of pods that serve HTTP (a Spark "
                "group's leader, not its worker)",
            ),
            RouterArg(
                "--service-discovery-port",
                (str(settings.discovery_port),),
                "the port sglang listens on in a discovered pod (the recipes' serve.port)",
            ),
        ]
        if settings.namespace:
            args.append(
                RouterArg(
                    "--service-discovery-namespace",
                    (settings.namespace,),
                    "watch one namespace: a namespaced Role is enough, no cluster-wide rights",
                )
            )
    args += [
        RouterArg(
            "--policy",
            (settings.policy,),
            "cache_aware: requests sharing a prefix (a system prompt, a conversation) go to the "
            "rig that holds it in its radix cache; when loads diverge it balances by load",
        ),
        RouterArg(
            "--health-check-endpoint",
            ("/health",),
            "sglang's /health generates one token (503 while booting), needs no API key",
        ),
        RouterArg(
            "--health-check-interval-secs",
            (str(HEALTH_INTERVAL_S),),
            "probe each rig every 10 s (the router's default is 60 s: minutes to notice a dead rig)",
        ),
        RouterArg(
            "--health-check-timeout-secs",
            (str(HEALTH_TIMEOUT_S),),
            "sglang's /health itself gives up after 20 s (SGLANG_HEALTH_CHECK_TIMEOUT) and "
            "answers 503; wait that long so a busy rig is not taken for a dead one",
        ),
        RouterArg(
            "--health-failure-threshold",
            (str(HEALTH_FAILURE_THRESHOLD),),
            "3 misses in a row: one slow probe does not drop a rig; a dead one is out in ~30 s",
        ),
        RouterArg(
            "--health-success-threshold",
            (str(HEALTH_SUCCESS_THRESHOLD),),
            "a rig that comes back answers twice before it takes traffic again",
        ),
        RouterArg(
            "--worker-startup-timeout-secs",
            (str(WORKER_STARTUP_TIMEOUT_S),),
            "a listed rig not up within this is dropped for good; 2 h covers a cold DGX Spark "
            "boot (the rigs' start_period)",
        ),
        RouterArg(
            "--prometheus-host",
            (settings.metrics_host,),
            "SM12X_ROUTER_METRICS_BIND: the router's Prometheus metrics (requests, per-rig "
            "health, retries)",
        ),
        RouterArg("--prometheus-port", (str(settings.metrics_port),), "SM12X_ROUTER_METRICS_PORT"),
    ]
    return args


# Why --api-key is not among the arguments: see program().
API_KEY_WHY = (
    "SM12X_API_KEY: clients must send it, and the router sends it to the rigs (same key); "
    "sm12x.keyed hands it over in memory, never on the command line"
)


def argv(args: Sequence[RouterArg], environ: Mapping[str, str] | None = None) -> list[str]:
    """Flat arguments (never the key: sm12x.keyed adds it in memory)."""
    return [token for arg in args for token in (arg.flag, *arg.values)]


def program(settings: RouterSettings) -> list[str]:
    """What follows the interpreter: the router, through sm12x.keyed with a key."""
    if settings.api_key:
        return ["-m", KEYED_MODULE, ROUTER_MODULE]
    return ["-m", ROUTER_MODULE]


def command(
    settings: RouterSettings, python: str = "python3", environ: Mapping[str, str] | None = None
) -> list[str]:
    return [python, *program(settings), *argv(build_router(settings)), *settings.extra]


def router_argv(settings: RouterSettings, environ: Mapping[str, str]) -> list[str]:
    """The arguments sglang-router's parser sees (the key added as sm12x.keyed does)."""
    args = [*argv(build_router(settings)), *settings.extra]
    return with_key(args, environ) if settings.api_key else args


# Flags after `--` that would bypass a setting (and its checks: the key never
# in argv, no open API beyond loopback): each has its variable. The tuned
# health-check flags may be overridden after `--` (the router keeps the last).
ENV_FLAGS = {
    "--host": "SM12X_ROUTER_BIND",
    "--port": "SM12X_ROUTER_PORT",
    "--worker-urls": "SM12X_ROUTER_WORKERS",
    "--service-discovery": "SM12X_ROUTER_SELECTOR",
    "--selector": "SM12X_ROUTER_SELECTOR",
    "--service-discovery-namespace": "SM12X_ROUTER_NAMESPACE",
    "--service-discovery-port": "SM12X_ROUTER_DISCOVERY_PORT",
    "--policy": "SM12X_ROUTER_POLICY",
    "--prometheus-host": "SM12X_ROUTER_METRICS_BIND",
    "--prometheus-port": "SM12X_ROUTER_METRICS_PORT",
}


@dataclass(frozen=True)
class RouterSurface:
    rule: str  # as sm12x.launch.judge.SURFACE: owned, secret, refused, none
    why: str


# Every RouterArgs field of sglang-router 0.3.2 whose name says it may open a
# socket or hold a secret, judged once (tests/support/sglang_surface.py finds
# them in the installed router's source, docs/listeners.md is the table, and
# a field no row judges fails tests/unit/test_surface.py).
ROUTER_SURFACE = {
    "host": RouterSurface("owned", "where the router listens (SM12X_ROUTER_BIND)"),
    "port": RouterSurface("owned", "the router's port (SM12X_ROUTER_PORT)"),
    "prometheus_host": RouterSurface("owned", "the metrics listener (SM12X_ROUTER_METRICS_BIND)"),
    "prometheus_port": RouterSurface("owned", "the metrics port (SM12X_ROUTER_METRICS_PORT)"),
    "worker_urls": RouterSurface("owned", "the rigs (SM12X_ROUTER_WORKERS)"),
    "service_discovery_port": RouterSurface(
        "owned", "the rigs' port on a discovered pod (SM12X_ROUTER_DISCOVERY_PORT)"
    ),
    "api_key": RouterSurface("secret", "SM12X_API_KEY or SM12X_API_KEY_FILE, handed in memory"),
    "control_plane_api_keys": RouterSurface(
        "secret", "control-plane API keys: not used by sm12x; put them in no command line"
    ),
    "oracle_password": RouterSurface(
        "secret", "the Oracle store's password: set ATP_PASSWORD, which sglang-router reads"
    ),
    "oracle_connect_descriptor": RouterSurface(
        "secret", "an Oracle DSN may hold a password: set ATP_DSN, which sglang-router reads"
    ),
    "postgres_db_url": RouterSurface(
        "secret",
        "a PostgreSQL URL may hold a password: set POSTGRES_DB_URL, which sglang-router reads",
    ),
    "redis_url": RouterSurface(
        "secret", "a Redis URL may hold a password: set REDIS_URL, which sglang-router reads"
    ),
    "mini_lb": RouterSurface(
        "refused",
        "sglang-router's mini load balancer (Python) serves with no API key check at all",
    ),
    "pd_disaggregation": RouterSurface(
        "none", "prefill/decode routing in the Rust router: the same listener and key check"
    ),
    "prefill_urls": RouterSurface("none", "prefill servers the router connects to"),
    "decode_urls": RouterSurface("none", "decode servers the router connects to"),
    "bootstrap_port_annotation": RouterSurface("none", "a pod annotation's name"),
    "health_check_endpoint": RouterSurface("none", "the path the router probes on each rig"),
    "otlp_traces_endpoint": RouterSurface("none", "the trace collector the router sends to"),
    "jwt_jwks_uri": RouterSurface("none", "where the router fetches JWT signing keys"),
    "client_key_path": RouterSurface("none", "a path to a TLS key file, not the key"),
    "server_key_path": RouterSurface("none", "a path to a TLS key file, not the key"),
}
SECRET_DESTS = {d: s.why for d, s in ROUTER_SURFACE.items() if s.rule == "secret"}
REFUSED_DESTS = {d: s.why for d, s in ROUTER_SURFACE.items() if s.rule == "refused"}
KEY_FLAGS = tuple("--" + d.replace("_", "-") for d in SECRET_DESTS)
REFUSED_FLAGS = tuple("--" + d.replace("_", "-") for d in REFUSED_DESTS)


def router_parser() -> JudgeParser | None:
    """sglang-router's own parser (RouterArgs, as launch_router builds it),
    reporting only what the arguments set; None where it is not installed."""
    try:
        from sglang_router.router_args import RouterArgs
    except ImportError:
        return None
    parser = JudgeParser(prog="launch_router", add_help=False)
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    for action in parser._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    return parser


def _key_refusal(name: str, what: str, dest: str = "api_key") -> UserError:
    route = (
        "the router's key is SM12X_API_KEY (or SM12X_API_KEY_FILE), handed to it in memory"
        if dest == "api_key"
        else "instead: " + SECRET_DESTS[dest].split(": ", 1)[-1]
    )
    return UserError(
        f"after --, {name} is refused: it sets {what}, and a secret on a command line is "
        f"readable by every user of the host (/proc/PID/cmdline); {route}"
    )


def _refused(name: str, dest: str) -> UserError:
    return UserError(
        f"after --, {name} is refused: {REFUSED_DESTS[dest]}; sm12x router runs the Rust "
        "router, which checks the key"
    )


def _dests_set(parser: JudgeParser, flag) -> list[str]:
    tokens = (
        [f"{flag.name}={flag.values[0]}"] if len(flag.values) == 1 else [flag.name, *flag.values]
    )
    try:
        return list(vars(parser.parse_args(tokens)))
    except ParserError as exc:
        raise UserError(
            f"after --, {flag.name}: sglang-router's parser refuses it: {exc}"
        ) from None


def check_extra(settings: RouterSettings) -> None:
    """Flags after `--` may not set what a variable sets, nor carry a key,
    judged by sglang-router's own parser where it is installed (every prefix
    and alias it accepts), else by name."""
    owned = owned_router_flags(ENV_FLAGS)
    parser = router_parser()
    owned_dests = {}
    if parser is not None:
        table = parser._option_string_actions
        owned_dests = {table[f].dest: f for f in owned if f in table}
    for flag in parse_extra(settings.extra):
        check_values(flag)
        if parser is not None:
            for dest in _dests_set(parser, flag):
                if dest in SECRET_DESTS:
                    what = SECRET_DESTS[dest].split(":")[0]
                    raise _key_refusal(flag.name, f"sglang-router's {dest} ({what})", dest)
                if dest in REFUSED_DESTS:
                    raise _refused(flag.name, dest)
                if dest in owned_dests:
                    mine = owned_dests[dest]
                    raise UserError(
                        f"after --, {flag.name} is refused: sm12x router sets {mine} from "
                        f"{owned[mine]}; set that instead"
                    )
            continue
        secret = owner(flag.name, KEY_FLAGS)
        if secret:
            dest = secret[2:].replace("-", "_")
            raise _key_refusal(flag.name, f"sglang-router's {secret}", dest)
        refused = owner(flag.name, REFUSED_FLAGS)
        if refused:
            raise _refused(flag.name, refused[2:].replace("-", "_"))
        owning = owner(flag.name, owned)
        if owning is not None:
            raise UserError(
                f"after --, {flag.name} is refused: sm12x router sets {owning} from "
                f"{owned[owning]}; set that instead (it is checked there, and a key on the "
                "command line is readable by every user of the host)"
            )


def exposure_problems(settings: RouterSettings, has_key: bool, open_allowed: bool) -> list[str]:
    """The router's API and its metrics listener: neither beyond loopback without a key."""
    found = [
        exposure_problem(settings.host, has_key, open_allowed, "the router"),
        exposure_problem(
            settings.metrics_host,
            has_key,
            open_allowed,
            "the router's metrics (SM12X_ROUTER_METRICS_BIND, no authentication)",
        ),
    ]
    return [p for p in found if p]


def shell(settings: RouterSettings, python: str = "python3") -> str:
    args = build_router(settings)
    lines = [" ".join([python, *program(settings)])]
    for arg in args:
        values = " ".join(shlex.quote(v) for v in arg.values)
        lines.append(f"  {arg.flag} {values}".rstrip())
    if settings.extra:
        lines.append("  " + " ".join(shlex.quote(e) for e in settings.extra))
    return " \\\n".join(lines) + "\n"


def explain(settings: RouterSettings) -> str:
    rows = "".join(f"# {a.flag}: {a.why}\n" for a in build_router(settings))
    return rows + (f"# --api-key: {API_KEY_WHY}\n" if settings.api_key else "")


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    loaded = settings_cli.from_args(args, "router", environ=environ)
    if args.explain:
        sys.stdout.write(settings_cli.explain(loaded, "router"))
        sys.stdout.flush()
    extra = list(args.extra)
    if extra and extra[0] == "--":
        extra = extra[1:]
    settings = replace(RouterSettings.from_settings(loaded), extra=tuple(extra))
    check_extra(settings)
    check_userinfo(argv(build_router(settings)), "the router", "sm12x router")
    check_userinfo(settings.extra, "the router", "after --")
    key = loaded.settings.key()
    problems = exposure_problems(settings, key is not None, loaded.settings.insecure_no_api_key)
    if problems and not (args.explain or args.dry_run):
        raise UserError("; ".join(problems))
    if args.explain or args.dry_run:
        if args.explain:
            sys.stdout.write(explain(settings))
        sys.stdout.write(shell(settings))
        return 0
    cmd = command(settings, python=sys.executable)
    if extra:
        print(
            f"sm12x router: appending {' '.join(extra)} (the router keeps the last of a "
            "repeated flag)",
            file=sys.stderr,
        )
    sys.stderr.flush()
    # Built, not inherited (sm12x.launch_env): the allowlist's part of
    # the caller's, and the key where it came from .env or a file (sm12x.keyed
    # reads it from SM12X_API_KEY).
    env = environment.passed(environ, {KEY_ENV: key} if key else {})
    # exec: the router is the container's main process and gets its signals.
    os.execve(cmd[0], cmd, env)
    return 1  # not reached


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dry-run", action="store_true", help="print the command, ready to paste, and exit"
    )
    settings_cli.add_arguments(
        parser,
        "router",
        explain_help="list each setting with where it came from and each flag with why, "
        "then the command; start nothing",
    )
    parser.add_argument(
        "extra", nargs=argparse.REMAINDER, help="after --: more sglang-router flags"
    )


COMMAND = Command(
    name="router",
    help="run sglang-router in front of several rigs (the compose `router` profile)",
    description=__doc__.split("\n\n")[0],
    add_arguments=add_arguments,
    run=run,
)
