"""What sglang will run, judged by what its own parser makes of the arguments.

The launch plan renders the recipe, appends the flags after `--`, and parses
the result ONCE with the track's sglang parser (sm12x.sglang_parser),
recording which dest each token set (parse(): Parsed, Token), so every
spelling sglang accepts (an alias, a prefix argparse expands,
`--flag=value`) is judged by the dest it sets, with no second parse:

- a dest the recipe or the launcher already sets is refused after `--`
  (sglang keeps the last of a repeated flag: a second copy silently wins);
- a key-bearing dest (KEY_DESTS) is refused from any source: a key on a
  command line is readable by every user of the host;
- `--config FILE` is refused: it merges a file of flags that nothing here
  would see;
- every listener and secret is judged by one table (SURFACE, checked against
  both tracks' sglang source by tests/support/sglang_surface.py): a second
  listener is refused unless sglang binds loopback, a publisher unless its
  endpoints are loopback, some variables outright, a secret on any command
  line;
- a recipe's own flags by their dests too: one dest set twice is refused and
  the lints read the names sglang resolves;
- a value of the wrong type or outside its choices is refused by the parse,
  free text and integers are bounded per token (sm12x.launch.bounds),
  non-finite numbers are refused, and the recipe as sglang reads it (its
  flags and those after `--` under the names the lints read) must pass the
  recipe's lints, linted once.

The address sglang binds is read from the parsed arguments too, for the
exposure rule (sm12x.launch.plan.check_exposure).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sm12x.apikey import ENV as KEY_ENV
from sm12x.apikey import FILE_ENV, is_loopback
from sm12x.errors import UserError
from sm12x.launch.bounds import check_bounds
from sm12x.launch.render import HEAD_ADDR_ENV, NODE_RANK_ENV, RenderedArg
from sm12x.launch.routes import check_routes
from sm12x.recipe.extra import WHY, check_userinfo, check_values, parse_extra
from sm12x.recipe.lints import CANONICAL_FLAGS, DERIVED_FLAGS, lint_recipe
from sm12x.recipe.load import RecipeError, validate_recipe
from sm12x.recipe.model import Recipe
from sm12x.sglang_parser import JudgeParser, ParserError


# Every flag and environment variable of the pinned sglang releases (0.5.17,
# 0.5.23) whose name says it may open a socket or hold a secret, each judged
# once, here. tests/support/sglang_surface.py finds the candidates in each
# track's wheel (its parser's dests, environ.py, the fields ServerArgs hides
# from its repr), writes them with their source lines to docs/listeners.md,
# and fails while a candidate of either release is missing from this table:
# a new sglang listener or secret is a test failure until it is judged here.
#
# rule: "loopback" refused unless sglang binds loopback (the listener binds
#       sglang's host and checks no API key);
#       "endpoint" refused unless every endpoint the value names is loopback
#       (the listener binds its own address, by default all interfaces);
#       "refused" refused in any form, with why;
#       "route" sets a route's path: refused under a prefix sglang's auth
#       middleware serves without the key (sm12x.launch.routes);
#       "secret" refused on a command line, why naming the route that is not;
#       "owned" set by sm12x (host, port, the key) and refused after --;
#       "none" the name matches, but no socket is opened and nothing secret
#       held (why says what it is).
@dataclass(frozen=True)
class Surface:
    rule: str
    why: str


SURFACE: dict[str, Surface] = {
    # sglang's HTTP API itself: sm12x renders these and judges the exposure.
    "host": Surface("owned", "the address the API binds (SM12X_HOST), judged by the exposure rule"),
    "port": Surface("owned", "the API's port (SM12X_PORT)"),
    "api_key": Surface(
        "secret", "the API key: SM12X_API_KEY or SM12X_API_KEY_FILE, handed over in memory"
    ),
    "admin_api_key": Surface(
        "secret", "the admin API key: not used by sm12x; a key on a command line is readable"
    ),
    "ssl_keyfile_password": Surface(
        "secret", "the TLS key's password: keep the key file unencrypted and mode 0600"
    ),
    "watermark_config": Surface(
        "secret",
        "a watermark key (sglang 0.5.23 hides it from its own repr): give --watermark-config "
        "a JSON file path, not inline JSON with key or key_b",
    ),
    "watermark_key": Surface("secret", "resolved from --watermark-config (no flag)"),
    "watermark_key_b": Surface("secret", "resolved from --watermark-config (no flag)"),
    # Listeners beside the API.
    "grpc_port": Surface("loopback", "sglang's native gRPC server (no API key)"),
    "smg_grpc_mode": Surface("loopback", "sglang's SMG gRPC server (no API key)"),
    "grpc_mode": Surface("loopback", "sglang's SMG gRPC server (no API key)"),
    "sidecar": Surface("loopback", "a sidecar against the gRPC server"),
    "sidecar_args": Surface("loopback", "the gRPC sidecar's arguments"),
    "smg_http_sidecar_port": Surface(
        "loopback", "the SMG gRPC server's HTTP sidecar (metrics, profiling)"
    ),
    "disaggregation_mode": Surface(
        "loopback",
        "prefill/decode disaggregation: the prefill side starts the bootstrap server on "
        "sglang's host, port 8998 unless --disaggregation-bootstrap-port says otherwise "
        "(no API key)",
    ),
    "disaggregation_bootstrap_port": Surface("loopback", "the disaggregation bootstrap server"),
    "encoder_bootstrap_port": Surface("loopback", "the encoder bootstrap server"),
    "engine_info_bootstrap_port": Surface("loopback", "the engine-info bootstrap server"),
    "gated_launch_port": Surface("loopback", "the gated-launch server"),
    "remote_instance_weight_loader_seed_instance_service_port": Surface(
        "loopback", "the weight-sharing service"
    ),
    "remote_instance_weight_loader_send_weights_group_ports": Surface(
        "loopback", "the weight-sharing process groups"
    ),
    "kv_events_config": Surface(
        "endpoint",
        "the KV-event ZMQ publisher (token ids of every request, no authentication), bound "
        "to tcp://*:5557 unless its endpoint and replay_endpoint say otherwise",
    ),
    "load_publish_endpoint": Surface(
        "endpoint", "the runtime-load ZMQ publisher (no authentication)"
    ),
    "decoupled_spec_bind_endpoint": Surface(
        "endpoint", "the decoupled speculative-decoding endpoint (no authentication)"
    ),
    "SGLANG_GRPC_PORT": Surface("loopback", "sglang's native gRPC server (no API key)"),
    "SGLANG_RUST_SERVER": Surface(
        "refused",
        "sglang's embedded Rust HTTP server replaces the Python one, and 0.5.17's answered "
        "/v1/models, /v1/completions and /generate without the API key",
    ),
    "SGLANG_HTTP_SERVER_APP_PATH": Surface(
        "refused", "it swaps the HTTP app that checks the API key for any importable one"
    ),
    # Found in the whole tree (tests/support/sglang_tree.py), not environ.py.
    "DUMPER_SERVER_PORT": Surface(
        "refused",
        "sglang's tensor dumper (srt/debug_utils/dumper.py) starts an HTTP server on "
        "0.0.0.0 whatever --host says, and a ZMQ RPC socket on tcp://*, neither with a key; "
        "its configure route turns on tensor dumps of every request into a folder the "
        "caller names",
    ),
    "DUMPER_GRAFTER_ENABLE": Surface(
        "refused",
        "the dumper's grafter joins a process group with another run (a rendezvous on its "
        "master port, no key) and rewrites tensors from it",
    ),
    "DUMPER_GRAFTER_MASTER_ADDRESS": Surface(
        "none", "read only by the grafter, which DUMPER_GRAFTER_ENABLE (refused) turns on"
    ),
    "DUMPER_GRAFTER_MASTER_PORT": Surface(
        "none", "read only by the grafter, which DUMPER_GRAFTER_ENABLE (refused) turns on"
    ),
    "UMBP_PEER_SERVICE_PORT": Surface(
        "loopback", "the UMBP KV-cache store's peer service (--hicache-storage-backend umbp)"
    ),
    "UMBP_IO_ENGINE_PORT": Surface(
        "loopback", "the UMBP KV-cache store's I/O engine (--hicache-storage-backend umbp)"
    ),
    "MOONCAKE_MASTER_METRICS_PORT": Surface(
        "loopback", "the Mooncake store's metrics port (--hicache-storage-backend mooncake)"
    ),
    "SGLANG_OLLAMA_CHAT_ROUTE": Surface("route", "the Ollama chat route (generation)"),
    "SGLANG_OLLAMA_GENERATE_ROUTE": Surface("route", "the Ollama generate route (generation)"),
    "SGLANG_OLLAMA_ROOT_ROUTE": Surface("route", "the Ollama root route"),
    "SGLANG_OLLAMA_TAGS_ROUTE": Surface("route", "the Ollama model list"),
    "SGLANG_OLLAMA_SHOW_ROUTE": Surface("route", "the Ollama model details"),
    "AIP_PREDICT_ROUTE": Surface("route", "Vertex AI's predict route (generation)"),
    "EXA_API_KEY": Surface(
        "none", "a key for Exa's web search that sglang reads from its environment, never argv"
    ),
    "SGLANG_S3_SECRET_ACCESS_KEY": Surface(
        "none", "the diffusion server's S3 key, read from its environment, never argv"
    ),
    "CRUSOE_API_KEY": Surface("none", "sglang's frontend language client, not the server"),
    "OPENAI_API_KEY": Surface("none", "sglang's benchmark client, not the server"),
    "API_KEY": Surface("none", "sglang's benchmark client, not the server"),
    "HF_TOKEN": Surface("none", "a Hugging Face token read from the environment, never argv"),
    "SGLANG_DIFFUSION_SLACK_TOKEN": Surface("none", "sglang's diffusion test reports"),
    "TEST_ENHANCER_KEY": Surface("none", "a diffusion unit test"),
    "SGLANG_TEST_SERVER_PORT": Surface("none", "a diffusion test script"),
    "MASTER_ADDR": Surface("none", "torch's rendezvous in the diffusion runtime's tests"),
    "MASTER_PORT": Surface("none", "torch's rendezvous in the diffusion runtime's tests"),
    "MOONCAKE_TE_META_DATA_SERVER": Surface("none", "a Mooncake server sglang connects to"),
    "MOONCAKE_CHECK_SERVER": Surface("none", "a switch: check the Mooncake server is up"),
    "ASCEND_MF_STORE_URL": Surface("none", "an Ascend store sglang connects to"),
    "SGLANG_S3_ENDPOINT_URL": Surface("none", "an S3 endpoint sglang uploads to"),
    "RUNAI_STREAMER_S3_ENDPOINT": Surface("none", "an S3 endpoint weights stream from"),
    "AWS_ENDPOINT_URL": Surface("none", "an S3 endpoint weights stream from"),
    "SGLANG_USE_AITER_FP8_PER_TOKEN": Surface("none", "an AMD kernel switch (ends in TOKEN)"),
    # Matched by name, but no listener of their own and nothing secret.
    "nccl_port": Surface(
        "none", "NCCL's rendezvous between the ranks of one launch (docs/security.md, scope)"
    ),
    "dist_init_addr": Surface(
        "none", "the head's address for a multi-node rendezvous (rendered from SM12X_HEAD_ADDR)"
    ),
    "SGLANG_TCP_STORE_PORT": Surface(
        "none", "the torch store of a multi-node rendezvous (docs/security.md, scope)"
    ),
    "SGLANG_PORT": Surface("none", "the base of sglang's internal port search (ZMQ over IPC)"),
    "SGLANG_BACKUP_PORT_BASE": Surface("none", "the base of sglang's internal port search"),
    "SGLANG_ZBAL_BOOTSTRAP_URL": Surface("none", "a URL sglang connects to, no listener"),
    "SGLANG_TEST_SCRIPTED_RUNTIME_IPC_ADDR": Surface("none", "a test hook's IPC address"),
    "SGLANG_ZMQ_SOURCE_IP": Surface("none", "the source address of outgoing ZMQ connections"),
    "SGLANG_ZMQ_ALLOWED_PEERS": Surface("none", "narrows who may connect to sglang's ZMQ"),
    "ssl_keyfile": Surface("none", "a path to the TLS key file, not the key"),
    "encoder_urls": Surface("none", "encoder servers sglang connects to"),
    "encoder_register_urls": Surface("none", "registries sglang connects to"),
    "decoupled_spec_connect_endpoints": Surface("none", "endpoints sglang connects to"),
    "otlp_traces_endpoint": Surface("none", "the trace collector sglang sends to"),
    "tool_server": Surface("none", "tool servers sglang connects to"),
    "weight_cache_socket": Surface("none", "a Unix socket path sglang connects to"),
    "SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE": Surface("none", "a Unix socket path template"),
    "load_snapshot_publish_interval": Surface("none", "a period, no socket"),
    "SGLANG_LOAD_SNAPSHOT_USE_ZMQ": Surface("none", "ZMQ over IPC between sglang's processes"),
    "enable_http_worker_reuseport": Surface("none", "SO_REUSEPORT on the API's own socket"),
    "grpc_response_timeout_secs": Surface("none", "a timeout"),
    "skip_server_warmup": Surface("none", "skips a request to itself"),
    "SGLANG_LOG_DECODE_GRAPH_KEY": Surface("none", "logs a CUDA graph's cache key"),
    "hicache_host_memory_mode": Surface("none", "host (CPU) memory for the KV cache"),
    "hicache_host_memory_fraction": Surface("none", "host (CPU) memory for the KV cache"),
    "disaggregation_decode_host_receive_threshold": Surface("none", "a host-memory threshold"),
    "media_url_max_file_size_mb": Surface("none", "a size cap on media sglang fetches"),
}
RULES = ("loopback", "endpoint", "refused", "route", "secret", "owned", "none")
KEY_DESTS = {d: s.why for d, s in SURFACE.items() if s.rule == "secret" and d.islower()}
LISTENER_DESTS = {
    d: s.why for d, s in SURFACE.items() if s.rule in ("loopback", "endpoint") and d.islower()
}
LISTENER_ENV = {n: s.why for n, s in SURFACE.items() if s.rule == "loopback" and n.isupper()}
REFUSED_ENV = {n: s.why for n, s in SURFACE.items() if s.rule == "refused" and n.isupper()}
CONFIG_DEST = "config"
# What the judge substitutes for a placeholder the environment does not fill
# (a dry run): a value of the right shape, never printed.
# SM12X_CACHE_DIR: a throughput recipe's table path lives under it; render
# without it shows "${SM12X_CACHE_DIR}/..." (issue 29: it then failed here).
PLACEHOLDERS = {NODE_RANK_ENV: "0", HEAD_ADDR_ENV: "127.0.0.1", "SM12X_CACHE_DIR": "/cache"}
REPEATED = "sglang keeps the last of a repeated flag, so a second copy would silently win"


@dataclass(frozen=True)
class Judged:
    host: str
    listeners: tuple[str, ...]


class Rendered(Protocol):
    """What the judge reads of the launch plan (sm12x.launch.plan.LaunchPlan)."""

    @property
    def recipe(self) -> Recipe: ...

    @property
    def args(self) -> tuple[RenderedArg, ...]: ...

    def argv(self, environ: Mapping[str, str] | None = None) -> list[str]: ...


RECIPE, EXTRA = "recipe", "after --"


@dataclass(frozen=True)
class Token:
    """One flag of the command as sglang's parser took it: where it was written
    (the rendered recipe or after `--`), its name as written, the dest it set,
    the value it stored and the parser's action (its type and choices)."""

    source: str
    name: str
    dest: str
    value: object
    action: argparse.Action


@dataclass(frozen=True)
class Parsed:
    """The one parse of a launch: what the whole command sets, and each token's dest."""

    values: dict[str, object]
    tokens: tuple[Token, ...]

    def of(self, source: str) -> tuple[Token, ...]:
        return tuple(t for t in self.tokens if t.source == source)


def _recorded_call(self, parser, namespace, values, option_string=None):
    type(self).__mro__[1].__call__(self, parser, namespace, values, option_string)
    stored = getattr(namespace, self.dest, None)
    if isinstance(self, argparse._AppendAction):
        stored = [values]
    parser.sm12x_records.append((self, stored))


def recording(parser: JudgeParser) -> JudgeParser:
    """The parser made to report only what the arguments set (no defaults, nothing
    required), recording which action each option token called, in order: what a
    token sets is then known from the one parse, with no second one per flag."""
    parser.sm12x_records = []  # type: ignore[attr-defined]
    for action in parser._actions:
        action.default = argparse.SUPPRESS
        action.required = False
        cls = type(action)
        if not getattr(cls, "sm12x_recording", False):
            action.__class__ = type(
                cls.__name__, (cls,), {"__call__": _recorded_call, "sm12x_recording": True}
            )
    return parser


def _refusal(exc: ParserError, where: str, source: str) -> UserError:
    text = _shorten(str(exc))
    if "invalid choice" in text:
        fix = "give one of the values it lists"
    elif " value: " in text and "invalid" in text:
        fix = "give a value of the type it names"
    else:
        fix = (
            "write the flags as that release spells them (`python -m sglang.launch_server --help`)"
        )
    return UserError(f"{where}: {source} refuses it ({text}); {fix}")


def _shorten(text: str) -> str:
    """argparse quotes a refused value whole: a long one is cut, so that the line
    stays one line."""
    return re.sub(r"'([^']{60})[^']{20,}'", r"'\1...'", text)


def parse(
    parser: JudgeParser,
    plan: Rendered,
    argv: Sequence[str],
    tokens: Sequence[str],
    source: str,
) -> Parsed:
    """THE parse of a launch: the rendered command and the flags after `--`
    together, once, by the track's sglang parser; each option token's dest kept
    for every later check (sglang_parser.JudgeParser.parse_args is called once)."""
    flags = parse_extra(tokens)
    for flag in flags:
        check_values(flag)
    written = [(RECIPE, arg.flag) for arg in plan.args]
    written += [(EXTRA, flag.name) for flag in flags]
    # Each flag after -- as one group: `--name=value` where it has one value, so that
    # a value is never taken for a flag and argparse names the flag as written.
    grouped = [
        part
        for flag in flags
        for part in (
            [f"{flag.name}={flag.values[0]}"]
            if len(flag.values) == 1
            else [flag.name, *flag.values]
        )
    ]
    parser = recording(parser)
    try:
        values = vars(parser.parse_args([*argv, *grouped]))
    except ParserError as exc:
        done = len(parser.sm12x_records)  # type: ignore[attr-defined]
        raise _refusal(exc, _blamed(exc, done, plan, flags), source) from None
    records = parser.sm12x_records  # type: ignore[attr-defined]
    if len(records) != len(written):
        raise UserError(
            f"after --, {' '.join(f.name for f in flags)}: sglang's parser takes these flags "
            "other than they are written (a value that looks like a flag?); write each value "
            "as --flag=value"
        )
    kept = tuple(
        Token(where, name, action.dest, value, action)
        for (where, name), (action, value) in zip(written, records, strict=True)
    )
    return Parsed(values, kept)


def _blamed(exc: ParserError, done: int, plan: Rendered, flags: Sequence) -> str:
    """Where the one parse failed: the flag after `--` it stopped at, or one it
    names; else the rendered command."""
    rendered = len(plan.args)
    if rendered <= done < rendered + len(flags):
        return f"{EXTRA}, {flags[done - rendered].name}"
    for flag in flags:
        if re.search(rf"{re.escape(flag.name)}(?![\w-])", str(exc)):
            return f"{EXTRA}, {flag.name}"
    return f"the command rendered from recipe {plan.recipe.name}"


def _flag_of(parser: JudgeParser, dest: str) -> str:
    """The name the recipe and the lints use for a dest."""
    options = next(a.option_strings for a in parser._actions if a.dest == dest)
    canonical = set(CANONICAL_FLAGS.values())
    for name in options:
        if name in canonical:
            return name
    natural = "--" + dest.replace("_", "-")
    return natural if natural in options else options[0]


def _dests(parser: JudgeParser, flags: Mapping[str, object]) -> dict[str, str]:
    """dest -> flag for flag names as written (a recipe's, DERIVED_FLAGS)."""
    table = parser._option_string_actions
    return {table[name].dest: name for name in flags if name in table}


def _recipe_value(value: object) -> str | int | float | None:
    if isinstance(value, bool) or value is None:
        return None if value in (True, None) else "false"
    if isinstance(value, (int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value)


def _finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True


def _key_refusal(where: str, name: str, dest: str) -> UserError:
    if dest in ("api_key", "admin_api_key"):
        route = (
            f"The API key goes in {KEY_ENV} (or {FILE_ENV}), which sm12x hands to sglang in memory"
        )
    else:
        route = f"Instead: {KEY_DESTS[dest]}"
    return UserError(
        f"{where}, {name} is refused: it sets sglang's {dest} ({_secret_what(dest)}), and a "
        "secret on a command line is readable by every user of the host (/proc/PID/cmdline). "
        + route
    )


def _secret_what(dest: str) -> str:
    return KEY_DESTS[dest].split(":")[0].split(" (")[0]


def _secret_set(dest: str, value: object) -> bool:
    """Whether a secret dest's value is the secret itself (a watermark config
    may instead be a file's path, the route that keeps it off argv)."""
    if dest == "watermark_config":
        return isinstance(value, str) and value.lstrip().startswith(("{", "["))
    return True


def _config_refusal(where: str, name: str) -> UserError:
    return UserError(
        f"{where}, {name} is refused: sglang's --config merges a file of flags that no lint "
        "or ownership check sees; copy the recipe, put the flags there and run it with "
        "--recipe FILE"
    )


def judge_recipe(parser: JudgeParser, plan: Rendered, parsed: Parsed) -> dict:
    """What the rendered command sets, dest -> value; refuses keys and --config, a
    dest set twice (sglang keeps the last), and names the flags sglang resolves
    under another name (the lints read those)."""
    where = f"recipe {plan.recipe.name}"
    recipe = plan.recipe
    rendered: dict[str, object] = {}
    seen: dict[str, str] = {}
    renamed: dict[str, str] = {}
    for token in parsed.of(RECIPE):
        dest, value = token.dest, token.value
        if dest in KEY_DESTS and _secret_set(dest, value):
            raise _key_refusal(f"in {where}", f"flags.{token.name}", dest)
        if dest == CONFIG_DEST:
            raise _config_refusal(f"in {where}", f"flags.{token.name}")
        if not _finite(value):
            raise UserError(
                f"in {where}, flags.{token.name} {value}: not a finite number; give a real value"
            )
        check_bounds(token, f"in {where}, flags.{token.name}")
        if dest in seen and seen[dest] != token.name:
            first, second = (
                (f"flags.{n}" if n in recipe.flags else f"the rendered {n}")
                for n in (seen[dest], token.name)
            )
            raise UserError(
                f"in {where}, {second} sets what {first} sets (sglang's {dest}), and "
                f"{REPEATED}; keep one"
            )
        seen[dest] = token.name
        rendered[dest] = value
        if token.name in recipe.flags:
            lint_name = _flag_of(parser, dest)
            if lint_name != token.name:
                renamed[token.name] = lint_name
    return {"values": rendered, "written": seen, "renamed": renamed}


def judge_extra(parser: JudgeParser, plan: Rendered, recipe_side: dict, parsed: Parsed) -> dict:
    """What the flags after `--` set, dest -> value, each checked."""
    where = EXTRA
    recipe = plan.recipe
    rendered, owned = recipe_side["values"], recipe_side["written"]
    derived = _dests(parser, DERIVED_FLAGS)
    set_here: dict[str, str] = {}
    values: dict = {}
    for token in parsed.of(EXTRA):
        dest, value, name = token.dest, token.value, token.name
        if dest in KEY_DESTS and _secret_set(dest, value):
            raise _key_refusal(where, name, dest)
        if dest == CONFIG_DEST:
            raise _config_refusal(where, name)
        if dest in derived:
            flag = derived[dest]
            raise UserError(
                f"{where}, {name} is refused: {flag} is rendered from "
                f"{DERIVED_FLAGS[flag]}; change that instead ({REPEATED})"
            )
        if dest in rendered:
            flag = owned.get(dest, _flag_of(parser, dest))
            shown = recipe.flag_value(flag) if flag in recipe.flags else rendered[dest]
            raise UserError(
                f"{where}, {name} is refused: recipe {recipe.name} sets {flag} "
                f"({'a switch' if shown is None else repr(shown)}) and a second copy "
                "would silently win; copy the recipe, change it there and run it with "
                "--recipe FILE"
            )
        if dest in set_here:
            twice = (
                "is given twice"
                if set_here[dest] == name
                else (f"sets what {set_here[dest]} sets (sglang's {dest})")
            )
            raise UserError(f"{where}, {name} {twice}: keep one")
        if not _finite(value):
            raise UserError(f"{where}, {name} {value}: not a finite number; give a real value")
        check_bounds(token, f"{where}, {name}")
        set_here[dest] = name
        values[dest] = value
    return values


def _recipe_data(recipe) -> dict:
    """The recipe as data validate_recipe takes back (a null revision is a
    required key, kept where exclude_none would drop it)."""
    data = recipe.model_dump(mode="json", exclude_none=True)
    data["model"].setdefault("revision", None)
    return data


def lint_as_parsed(
    parser: JudgeParser, plan: Rendered, renamed: Mapping[str, str], values: Mapping[str, object]
) -> None:
    """The recipe as sglang reads it, linted once: its flags under the names sglang
    resolves them to, and the flags after `--` added under the names the lints read."""
    if not renamed and not values:
        return
    recipe = plan.recipe
    data = _recipe_data(recipe)
    data["flags"] = {renamed.get(k, k): v for k, v in data["flags"].items()}
    for dest, value in values.items():
        entry: dict = {"why": WHY}
        shown = _recipe_value(value)
        if shown is not None:
            entry["value"] = shown
        data["flags"][_flag_of(parser, dest)] = entry
    said = ", ".join(f"{k} is {v}" for k, v in renamed.items())
    where = "the flags after --" if values else f"recipe {recipe.name} as sglang reads it"
    try:
        merged = validate_recipe(data, where)
    except RecipeError as exc:
        raise UserError(exc.message) from None
    errors = [f for f in lint_recipe(merged) if f.level == "error"]
    if not errors:
        return
    found = "; ".join(str(f) for f in errors)
    if values:
        also = f" (as sglang reads it: {said})" if said else ""
        raise UserError(
            f"with the flags after --, recipe {recipe.name}{also} fails its lints: {found}"
        )
    raise UserError(
        f"in recipe {recipe.name} as sglang reads it ({said}), it fails its lints: {found}"
    )


# What a listener dest holds when it opens nothing (sglang's defaults).
INACTIVE = {"disaggregation_mode": ("null",), "load_publish_endpoint": ("off", "")}
_OFF = ("", "0", "false", "no", "off")


def _active(dest: str, value: object) -> bool:
    if value in (None, False):
        return False
    return str(value).strip().lower() not in INACTIVE.get(dest, ())


def listeners(values: Mapping[str, object], env: Mapping[str, str]) -> list[str]:
    found = [
        f"{'--' + d.replace('_', '-')} ({why})"
        for d, why in LISTENER_DESTS.items()
        if _active(d, values.get(d))
    ]
    found += [f"{name} ({why})" for name, why in LISTENER_ENV.items() if env.get(name, "").strip()]
    return found


def loopback_endpoint(endpoint: str) -> bool:
    """A ZMQ endpoint only this host can reach: ipc://, or tcp:// on a loopback
    address (not `*`, not empty, not a name other than localhost)."""
    text = endpoint.strip()
    if text.startswith("ipc://"):
        return True
    if not text.startswith("tcp://"):
        return False
    host = text[len("tcp://") :].rpartition(":")[0]
    return bool(host.strip("[]")) and host != "*" and is_loopback(host)


def _endpoints(dest: str, value: object) -> tuple[list[str], str | None]:
    """The endpoints a publisher dest binds, or why its value cannot be judged."""
    text = str(value).strip()
    if dest != "kv_events_config":
        if text.lower() == "auto":
            return [], "'auto' places it beside the KV-event ports, on their host"
        return [text], None
    try:
        config = json.loads(text)
    except ValueError:
        return [], "its value is not JSON"
    if not isinstance(config, dict):
        return [], "its value is not a JSON object"
    if str(config.get("publisher", "null")).lower() == "null":
        return [], None
    endpoints = [str(config.get("endpoint", "tcp://*:5557"))]
    if config.get("replay_endpoint") not in (None, ""):
        endpoints.append(str(config["replay_endpoint"]))
    return endpoints, None


def check_endpoints(values: Mapping[str, object]) -> None:
    for dest, surface in SURFACE.items():
        if surface.rule != "endpoint" or not _active(dest, values.get(dest)):
            continue
        endpoints, problem = _endpoints(dest, values[dest])
        wide = [e for e in endpoints if not loopback_endpoint(e)]
        if problem or wide:
            what = problem or f"it binds {', '.join(wide)}"
            raise UserError(
                f"--{dest.replace('_', '-')} is refused: {surface.why}; {what}. Only a loopback "
                "endpoint (tcp://127.0.0.1:PORT or ipc://PATH) is allowed, since it checks no "
                "API key; reach it through an SSH tunnel"
            )


def check_refused_env(env: Mapping[str, str]) -> None:
    for name, why in REFUSED_ENV.items():
        if env.get(name, "").strip().lower() not in _OFF:
            raise UserError(
                f"{name} is refused: {why}; unset it (in the environment, .env or the recipe's env)"
            )


def judge(
    parser: JudgeParser,
    source: str,
    plan: Rendered,
    tokens: Sequence[str],
    environ: Mapping[str, str],
    exec_env: Mapping[str, str],
) -> tuple[Judged, Parsed]:
    """Every check above, on the command the launcher would exec, from one parse."""
    filled = {**PLACEHOLDERS, **environ}
    argv = plan.argv(filled)
    check_userinfo(argv, "sglang", f"recipe {plan.recipe.name}")
    check_userinfo(tokens, "sglang", "after --")
    parsed = parse(parser, plan, argv, tokens, source)
    recipe_side = judge_recipe(parser, plan, parsed)
    extra = judge_extra(parser, plan, recipe_side, parsed)
    lint_as_parsed(parser, plan, recipe_side["renamed"], extra)
    final = parsed.values
    host = str(final.get("host", "127.0.0.1"))
    check_refused_env(exec_env)
    check_routes(exec_env)
    check_endpoints(final)
    opened = listeners(final, exec_env)
    if opened and not is_loopback(host):
        raise UserError(
            f"{'; '.join(opened)} would listen beside the API while sglang binds {host}: a "
            "second listener is refused unless sglang binds loopback (SM12X_HOST=127.0.0.1), "
            "since it checks no API key; remove it, or reach it through an SSH tunnel"
        )
    return Judged(host=host, listeners=tuple(opened)), parsed
