"""The settings on a command line: the same flags, --env-file and --explain
for every command, and what --explain prints.

add_arguments(parser, command) adds a flag for each setting the command
takes as one (its help names the variable and the default); from_args()
reads flags, environment and .env into one Loaded (sm12x.settings.sources),
printing a warning for each old name it met.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from sm12x.settings.model import Settings, default_text, env_name, flag_name, for_command, meta
from sm12x.settings.sources import Loaded, load

GROUP_TITLE = "settings"
GROUP_HELP = (
    "Each is also read from the environment and from .env as the variable named in its "
    "help; a flag wins over the environment, the environment over .env, .env over the "
    "default. --explain shows each value and where it came from."
)
EXPLAIN_HELP = "print each setting this command reads, its value and where it came from; exit"


def flag_settings(command: str) -> list[str]:
    return [n for n in for_command(command) if meta(n).flagged(command)]


def add_arguments(
    parser: argparse.ArgumentParser,
    command: str,
    *,
    explain_help: str = EXPLAIN_HELP,
    skip: Iterable[str] = (),
) -> None:
    """--env-file, --explain and one flag per setting `command` takes (less `skip`:
    the command defines those itself, e.g. as a positional argument)."""
    group = parser.add_argument_group(GROUP_TITLE, GROUP_HELP)
    group.add_argument(
        "--env-file",
        metavar="FILE",
        help="the .env to read (default: .env in the current folder, else in the sm12x "
        "checkout; also SM12X_ENV_FILE)",
    )
    group.add_argument("--explain", action="store_true", help=explain_help)
    for name in flag_settings(command):
        if name in skip:
            continue
        info = meta(name)
        text = f"{info.help} [{env_name(name)}; default: {default_text(name)}]"
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": text.replace("%", "%%")}
        if Settings.model_fields[name].annotation is bool:
            kwargs.update(action="store_const", const=True)
        else:
            kwargs["metavar"] = info.metavar
        group.add_argument(flag_name(name), **kwargs)
        for old in info.old_flags:
            group.add_argument(old, dest=f"_old_{name}", default=None, help=argparse.SUPPRESS)


def from_args(
    args: argparse.Namespace,
    command: str,
    *,
    extra: Mapping[str, Any] | None = None,
    flag_names: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Loaded:
    """The settings for this run. `extra`: values the command took another way
    (a positional RECIPE), spelled as `flag_names` says."""
    flags: dict[str, Any] = {n: getattr(args, n, None) for n in flag_settings(command)}
    spelled = dict(flag_names or {})
    notes = []
    for name in flag_settings(command):
        old = getattr(args, f"_old_{name}", None)
        if old is None:
            continue
        (old_flag,) = meta(name).old_flags
        if flags.get(name) is None:
            flags[name] = old
            spelled[name] = old_flag
            notes.append(f"{old_flag} is the old name of {flag_name(name)}: use that")
        else:
            notes.append(f"{old_flag} is ignored: {flag_name(name)} is given too")
    for name, value in (extra or {}).items():
        if value is not None:
            flags[name] = value
    loaded = load(flags, getattr(args, "env_file", None), environ, flag_names=spelled)
    for warning in [*notes, *loaded.warnings]:
        print(f"sm12x {command}: warning: {warning}", file=sys.stderr)
    return loaded


def shown(loaded: Loaded, name: str) -> str:
    value = getattr(loaded.settings, name)
    if meta(name).secret:
        return "(set)" if value else ""
    if isinstance(value, tuple):
        return " ".join(value)
    if isinstance(value, bool):
        return "1" if value else ""
    return "" if value is None else str(value)


def explain(loaded: Loaded, command: str, variables: Iterable[str] = ()) -> str:
    """Each setting `command` reads: value and origin, as shell comments.

    variables: other names the command reads (a recipe's site variables)."""
    env = loaded.env_file
    where = f"{env.path} ({env.how})" if env.path else env.how
    rows: list[tuple[str, str]] = []
    for name in for_command(command):
        origin = loaded.origin(name)
        value = shown(loaded, name)
        said = str(origin)
        if origin.kind == "default":
            said = f"default: {default_text(name)}"
        elif origin.raw is not None and origin.raw != value and not meta(name).secret:
            said += f", given as {origin.raw}"
        rows.append((f"{env_name(name)}={value}", said))
    rows += _variable_rows(loaded, variables)
    lines = [f"# sm12x {command} settings (flag > environment > .env > default); .env: {where}"]
    return "\n".join(lines + _aligned(rows)) + "\n"


def explain_variables(loaded: Loaded, names: Iterable[str], what: str) -> str:
    """Variables that are not settings (a recipe's site variables), as explain() shows them."""
    rows = _variable_rows(loaded, names)
    return "\n".join([f"# {what} (environment > .env)", *_aligned(rows)]) + "\n" if rows else ""


def _variable_rows(loaded: Loaded, names: Iterable[str]) -> list[tuple[str, str]]:
    rows = []
    for name in names:
        value, origin = loaded.variable(name)
        rows.append((f"{name}={value or ''}", "not set" if value is None else str(origin)))
    return rows


def _aligned(rows: list[tuple[str, str]]) -> list[str]:
    width = max((len(left) for left, _ in rows), default=0)
    return [f"# {left.ljust(width)}  <- {right}" for left, right in rows]
