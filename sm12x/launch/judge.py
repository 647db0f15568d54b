"""What sglang will run, judged by what its own parser makes of the arguments.

The launcher renders the recipe, appends the flags after `--`, and parses
the result with the track's sglang parser (sm12x.sglang_parser), so
every spelling sglang accepts (an alias, a prefix argparse expands,
`--flag=value`) is judged by the dest it sets:

- a dest the recipe or the launcher already sets is refused after `--`
  (sglang keeps the last of a repeated flag: a second copy silently wins);
- a key-bearing dest (KEY_DESTS) is refused from any source: a key on a
  command line is readable by every user of the host;
- `--config FILE` is refused: it merges a file of flags that nothing here
  would see;
- a second listener (LISTENER_DESTS, SGLANG_GRPC_PORT) is refused unless
  sglang binds loopback: sglang's gRPC servers check no API key;
- non-finite numbers are refused, and the recipe with the parsed flags added
  (under the names the lints read) must pass the recipe's lints.

The address sglang binds is read from the parsed arguments too, for the
exposure rule (sm12x.launch.main.check_exposure).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sm12x.apikey import ENV as KEY_ENV
from sm12x.apikey import FILE_ENV, is_loopback
from sm12x.errors import UserError
from sm12x.launch.render import HEAD_ADDR_ENV, NODE_RANK_ENV, LaunchPlan
from sm12x.recipe.extra import WHY, check_values, parse_extra
from sm12x.recipe.lints import CANONICAL_FLAGS, DERIVED_FLAGS, lint_recipe
from sm12x.recipe.load import RecipeError, validate_recipe
from sm12x.sglang_parser import JudgeParser, ParserError

# sglang dests that hold a secret (0.5.17 and 0.5.23 server_args: every
# field named for a key, token or password that is one).
KEY_DESTS = {
    "api_key": "the API key",
    "admin_api_key": "the admin API key",
    "ssl_keyfile_password": "the TLS key's password",
    "watermark_key": "a watermark key",
    "watermark_key_b": "a watermark key",
}
# sglang dests that open a listener beside the HTTP API (0.5.17 and 0.5.23
# server_args). The gRPC servers and their sidecar take no API key; the
# bootstrap and weight-transfer servers have no notion of one.
LISTENER_DESTS = {
    "grpc_port": "sglang's native gRPC server (no API key)",
    "smg_grpc_mode": "sglang's SMG gRPC server (no API key)",
    "grpc_mode": "sglang's SMG gRPC server (no API key)",
    "sidecar": "a sidecar against the gRPC server",
    "smg_http_sidecar_port": "the SMG gRPC server's HTTP sidecar (metrics, profiling)",
    "disaggregation_bootstrap_port": "the disaggregation bootstrap server",
    "encoder_bootstrap_port": "the encoder bootstrap server",
    "engine_info_bootstrap_port": "the engine-info bootstrap server",
    "decoupled_spec_bind_endpoint": "the decoupled speculative-decoding endpoint",
    "gated_launch_port": "the gated-launch server",
    "remote_instance_weight_loader_seed_instance_service_port": "the weight-sharing service",
    "load_publish_endpoint": "the load-publishing endpoint",
}
LISTENER_ENV = {"SGLANG_GRPC_PORT": "sglang's native gRPC server (no API key)"}
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


def _suppressing(parser: JudgeParser) -> JudgeParser:
    """The parser made to report only what the arguments set (no defaults,
    nothing required): what a token sets is then what the namespace holds."""
    for action in parser._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    return parser


def _parse(parser: JudgeParser, tokens: Sequence[str], where: str, source: str) -> dict:
    try:
        return vars(parser.parse_args(list(tokens)))
    except ParserError as exc:
        raise UserError(
            f"{where}: {source} refuses it ({exc}); write the flags as that "
            "release spells them (`python -m sglang.launch_server --help`)"
        ) from None


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


def _written(parser: JudgeParser, plan: LaunchPlan) -> dict[str, str]:
    """dest -> the flag as the recipe or the renderer wrote it (`--api` for api_key)."""
    written = {}
    for arg in plan.args:
        value = arg.value if isinstance(arg.value, str) else PLACEHOLDERS[NODE_RANK_ENV]
        tokens = [arg.flag] if arg.value is None else [arg.flag, value]
        try:
            written.update(dict.fromkeys(vars(parser.parse_args(tokens)), arg.flag))
        except ParserError:
            continue  # the whole command's parse says what is wrong
    return written


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
    return UserError(
        f"{where}, {name} is refused: it sets sglang's {dest} ({KEY_DESTS[dest]}), and a key "
        "on a command line is readable by every user of the host (/proc/PID/cmdline). The "
        f"API key goes in {KEY_ENV} (or {FILE_ENV}), which sm12x hands to sglang in memory"
    )


def _config_refusal(where: str, name: str) -> UserError:
    return UserError(
        f"{where}, {name} is refused: sglang's --config merges a file of flags that no lint "
        "or ownership check sees; copy the recipe, put the flags there and run it with "
        "--recipe FILE"
    )


def judge_recipe(parser: JudgeParser, plan: LaunchPlan, argv: Sequence[str], source: str) -> dict:
    """What the rendered command sets, dest -> value; refuses keys and --config."""
    where = f"recipe {plan.recipe.name}"
    rendered = _parse(parser, argv, f"the command rendered from {where}", source)
    flags = _written(parser, plan)
    for dest, value in rendered.items():
        name = flags.get(dest, "--" + dest.replace("_", "-"))
        if dest in KEY_DESTS:
            raise _key_refusal(f"in {where}", f"flags.{name}", dest)
        if dest == CONFIG_DEST:
            raise _config_refusal(f"in {where}", f"flags.{name}")
        if not _finite(value):
            raise UserError(
                f"in {where}, flags.{name} {value}: not a finite number; give a real value"
            )
    return rendered


def judge_extra(
    parser: JudgeParser, plan: LaunchPlan, rendered: dict, tokens: Sequence[str], source: str
) -> dict:
    """What the flags after `--` set, dest -> value, each checked."""
    where = "after --"
    recipe = plan.recipe
    owned = _written(parser, plan)
    derived = _dests(parser, DERIVED_FLAGS)
    set_here: dict[str, str] = {}
    values: dict = {}
    for flag in parse_extra(tokens):
        check_values(flag)
        token = (
            [f"{flag.name}={flag.values[0]}"]
            if len(flag.values) == 1
            else [flag.name, *flag.values]
        )
        for dest, value in _parse(parser, token, f"{where}, {flag.name}", source).items():
            if dest in KEY_DESTS:
                raise _key_refusal(where, flag.name, dest)
            if dest == CONFIG_DEST:
                raise _config_refusal(where, flag.name)
            if dest in derived:
                name = derived[dest]
                raise UserError(
                    f"{where}, {flag.name} is refused: {name} is rendered from "
                    f"{DERIVED_FLAGS[name]}; change that instead ({REPEATED})"
                )
            if dest in rendered:
                name = owned.get(dest, _flag_of(parser, dest))
                shown = recipe.flag_value(name) if name in recipe.flags else rendered[dest]
                raise UserError(
                    f"{where}, {flag.name} is refused: recipe {recipe.name} sets {name} "
                    f"({'a switch' if shown is None else repr(shown)}) and a second copy "
                    "would silently win; copy the recipe, change it there and run it with "
                    "--recipe FILE"
                )
            if dest in set_here:
                twice = (
                    "is given twice"
                    if set_here[dest] == flag.name
                    else (f"sets what {set_here[dest]} sets (sglang's {dest})")
                )
                raise UserError(f"{where}, {flag.name} {twice}: keep one")
            if not _finite(value):
                raise UserError(
                    f"{where}, {flag.name} {value}: not a finite number; give a real value"
                )
            set_here[dest] = flag.name
            values[dest] = value
    # The whole list at once too: what one group leaves dangling, the next may not take.
    _parse(parser, tokens, where, source)
    _lint_with(parser, plan, values)
    return values


def _lint_with(parser: JudgeParser, plan: LaunchPlan, values: Mapping[str, object]) -> None:
    """The recipe with the parsed flags added, under the names the lints read."""
    if not values:
        return
    recipe = plan.recipe
    data = recipe.model_dump(mode="json", exclude_none=True)
    for dest, value in values.items():
        entry: dict = {"why": WHY}
        shown = _recipe_value(value)
        if shown is not None:
            entry["value"] = shown
        data["flags"][_flag_of(parser, dest)] = entry
    try:
        merged = validate_recipe(data, "the flags after --")
    except RecipeError as exc:
        raise UserError(exc.message) from None
    errors = [f for f in lint_recipe(merged) if f.level == "error"]
    if errors:
        raise UserError(
            f"with the flags after --, recipe {recipe.name} fails its lints: "
            + "; ".join(str(f) for f in errors)
        )


def listeners(values: Mapping[str, object], env: Mapping[str, str]) -> list[str]:
    found = [
        f"{'--' + d.replace('_', '-')} ({why})"
        for d, why in LISTENER_DESTS.items()
        if values.get(d) not in (None, False)
    ]
    found += [f"{name} ({why})" for name, why in LISTENER_ENV.items() if env.get(name, "").strip()]
    return found


def judge(
    parser: JudgeParser,
    source: str,
    plan: LaunchPlan,
    tokens: Sequence[str],
    environ: Mapping[str, str],
    exec_env: Mapping[str, str],
) -> Judged:
    """Every check above, on the command the launcher would exec."""
    filled = {**PLACEHOLDERS, **environ}
    parser = _suppressing(parser)
    rendered = judge_recipe(parser, plan, plan.argv(filled), source)
    extra = judge_extra(parser, plan, rendered, tokens, source)
    final = {**rendered, **extra}
    host = str(final.get("host", "127.0.0.1"))
    opened = listeners(final, exec_env)
    if opened and not is_loopback(host):
        raise UserError(
            f"{'; '.join(opened)} would listen beside the API while sglang binds {host}: a "
            "second listener is refused unless sglang binds loopback (SM12X_HOST=127.0.0.1), "
            "since it checks no API key; remove it, or reach it through an SSH tunnel"
        )
    return Judged(host=host, listeners=tuple(opened))
