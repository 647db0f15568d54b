"""sglang's own command-line parser, the judge of what a launch sets.

A flag after `--` or in a recipe is judged by what sglang's parser makes of
it, not by its spelling: argparse expands prefixes (`--tensor-parallel 2` is
`--tensor-parallel-size`), sglang declares aliases (`--nccl-init-addr` is
`--dist-init-addr`), and a spelling sm12x does not know still sets a dest
sglang reads. So the launcher parses the final argument list with:

- the real parser (`ServerArgs.add_cli_args` on an argparse parser built as
  `sglang.srt.server_args.prepare_server_args` builds it) when the track's
  sglang is installed: the image;
- else a description of that parser (sglang_parsers/<version>.json: every
  option string, its dest, nargs, type, choices, and the parser's
  allow_abbrev), generated from the release's wheel by scripts/regen and held
  fresh by tests/unit/test_sglang_parser.py: a host `sm12x render` or dry run.

The description rebuilds a parser with the same option strings, dests and
value shapes, so prefix and alias resolution and value counting are the
real parser's (argparse's own code does them); values of a type the
description cannot name are kept as strings.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sm12x.argparsing import names_only
from sm12x.errors import UserError

DESCRIPTIONS = Path(__file__).with_name("sglang_parsers")
# prepare_server_args: argparse.ArgumentParser(prog="sglang serve"), abbreviations on.
PROG = "sglang serve"
TYPES: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str}
KINDS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_HelpAction": "help",
}


class ParserError(Exception):
    """sglang's parser refused the arguments (argparse's message)."""


class JudgeParser(argparse.ArgumentParser):
    """Raises instead of printing usage and exiting: the launcher words the error.
    Arguments it does not know are named without their values (a mistyped
    flag may be followed by a secret)."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            raise ParserError(f"unrecognized arguments: {names_only(unknown)}")
        return parsed

    def error(self, message: str):  # type: ignore[override]
        # argparse quotes `--flag=value` whole (an ambiguous prefix): not the value.
        raise ParserError(re.sub(r"(--[\w-]+)=\S+", r"\1=...", message))

    def exit(self, status: int = 0, message: str | None = None):  # type: ignore[override]
        raise ParserError(message or f"exited with status {status}")


def describe(parser: argparse.ArgumentParser, version: str) -> dict:
    """A parser as data: what from_description() needs to rebuild it."""
    actions = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        kind = KINDS.get(type(action).__name__, "other")
        type_name = getattr(action.type, "__name__", None) if action.type else "str"
        entry = {
            "options": list(action.option_strings),
            "dest": action.dest,
            "kind": kind,
            "nargs": action.nargs,
            "type": type_name if type_name in TYPES else None,
            "choices": _choices(action.choices),
        }
        if kind == "store_const":
            entry["const"] = action.const if _jsonable(action.const) else None
        actions.append(entry)
    return {
        "sglang": version,
        "prog": parser.prog,
        "allow_abbrev": parser.allow_abbrev,
        "actions": actions,
    }


def _choices(choices) -> list[str] | None:
    if choices is None:
        return None
    # A set's order changes from run to run: sorted, the description is stable.
    names = [str(c) for c in choices]
    return sorted(names) if isinstance(choices, (set, frozenset)) else names


def _jsonable(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def from_description(desc: dict) -> JudgeParser:
    parser = JudgeParser(prog=desc["prog"], allow_abbrev=desc["allow_abbrev"], add_help=False)
    for entry in desc["actions"]:
        kind, nargs = entry["kind"], entry["nargs"]
        kwargs: dict[str, Any] = {"dest": entry["dest"]}
        if kind in ("store_true", "store_false"):
            kwargs["action"] = kind
        elif kind == "store_const" or (kind == "other" and nargs == 0):
            # A custom action that takes no value (sglang's deprecated
            # switches): what it stores is not data; True marks it set.
            kwargs.update(action="store_const", const=entry.get("const", True))
        else:
            kwargs["action"] = "append" if kind == "append" else "store"
            if nargs is not None:
                kwargs["nargs"] = nargs
            kwargs["type"] = TYPES.get(entry["type"] or "", str)
            if entry["choices"] is not None and entry["type"] in (None, "str"):
                kwargs["choices"] = entry["choices"]
        parser.add_argument(*entry["options"], **kwargs)
    return parser


def description_path(version: str) -> Path:
    return DESCRIPTIONS / f"{version}.json"


def load_description(version: str) -> dict:
    path = description_path(version)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(
            f"no description of sglang {version}'s parser ({path}): run scripts/regen, or "
            "launch in the track's image, where sglang's own parser is used"
        ) from None


def real_parser() -> JudgeParser:
    """The installed sglang's parser, built as prepare_server_args builds it."""
    from sglang.srt.server_args import ServerArgs  # the image's sglang

    parser = JudgeParser(prog=PROG, add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


def parser_for(version: str, installed: str | None) -> tuple[JudgeParser, str]:
    """sglang `version`'s parser and where it came from (for messages)."""
    if installed == version:
        try:
            return real_parser(), f"sglang {version}'s parser"
        except ImportError:  # metadata without an importable package: the description
            pass
    return from_description(load_description(version)), f"sglang {version}'s parser (described)"
