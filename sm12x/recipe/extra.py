"""Flags after `--` (`sm12x launch -- FLAG ...`, `sm12x router -- ...`), as tokens.

sglang keeps the last of a repeated flag, so an appended flag silently
replaces the recipe's. What each flag sets is judged by sglang's own parser
(sm12x.launch.judge); this module only splits the tokens into
`--name [value ...]` groups, refuses what is no long flag (a short option, a
value with no flag before it) and nan/inf as values, and, for the router
without sglang-router installed, finds the owned flag a prefix means.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sm12x.errors import UserError
from sm12x.recipe.lints import CANONICAL_FLAGS

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_NOT_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}
WHY = "given after -- on the command line"


@dataclass(frozen=True)
class ExtraFlag:
    name: str
    values: tuple[str, ...]

    @property
    def value(self) -> str | int | float | None:
        """The value as a recipe would hold it (a switch has none)."""
        if not self.values:
            return None
        if len(self.values) > 1:
            return " ".join(self.values)
        text = self.values[0]
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        if _NUMBER.match(text):
            return float(text)
        return text


def _is_value(token: str) -> bool:
    """A value, not a flag: '-1' and '-0.5' are numbers, '--x' and '-x' are options."""
    return not token.startswith("-") or bool(_NUMBER.match(token))


def parse_extra(tokens: Sequence[str]) -> list[ExtraFlag]:
    """`--name [value ...]` and `--name=value` groups; anything else is refused."""
    flags: list[ExtraFlag] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--") or token == "--":
            what = "a value with no flag before it" if _is_value(token) else "a short option"
            raise UserError(
                f"after --, {token!r} is {what}: write sglang's long flags, "
                "e.g. -- --log-level debug"
            )
        name, eq, inline = token.partition("=")
        values: list[str] = [inline] if eq else []
        i += 1
        while not eq and i < len(tokens) and _is_value(tokens[i]):
            values.append(tokens[i])
            i += 1
        flags.append(ExtraFlag(name, tuple(values)))
    return flags


def owner(name: str, owned: Iterable[str]) -> str | None:
    """The owned flag that `name` means to an argparse parser: itself, its
    canonical spelling, or the one flag it is an unambiguous prefix of."""
    owned = set(owned)
    canonical = CANONICAL_FLAGS.get(name, name)
    if canonical in owned:
        return canonical
    prefixed = sorted(f for f in owned if f.startswith(name))
    return prefixed[0] if prefixed else None


# A URL with userinfo (scheme://user[:password]@host): a credential on a
# command line, which every user of the host reads in /proc/PID/cmdline. The
# scheme is bounded (32 characters; registered schemes are far shorter) so that a
# long value without "://" is scanned in linear time: unbounded, the search
# backtracked from every letter, and a 100,000-character value took a minute.
USERINFO = re.compile(r"([a-z][a-z0-9+.-]{0,31}://)([^/?#@\s]*)@", re.I)
# The longest free-string value sm12x passes to sglang or the router (a path,
# a model name, a JSON config): anything longer is a mistake, not a setting.
MAX_VALUE_CHARS = 4096


def redacted(value: str) -> str:
    return USERINFO.sub(lambda m: m.group(1) + "***@", value)


def check_userinfo(tokens: Sequence[str], program: str, where: str) -> None:
    """Refuse a URL with userinfo anywhere in `tokens` (argv), naming its flag."""
    flag = ""
    for token in tokens:
        name, eq, inline = token.partition("=")
        if token.startswith("--"):
            flag = name
            if not eq:
                continue
        value = inline if token.startswith("--") else token
        if USERINFO.search(value):
            raise UserError(
                f"{where}, {flag or 'a value'} {redacted(value)!r} carries a credential in its "
                f"URL (user:password@): {program}'s command line is readable by every user of "
                "the host; remove the userinfo and give the credential through the server's "
                "own secret (a token file, a header it reads from a file) or a local proxy"
            )


def check_values(flag: ExtraFlag) -> None:
    for value in flag.values:
        if len(value) > MAX_VALUE_CHARS:
            raise UserError(
                f"after --, {flag.name}: a value of {len(value):,} characters, more than the "
                f"{MAX_VALUE_CHARS:,} sm12x passes (sm12x.recipe.extra.MAX_VALUE_CHARS); "
                "give a file path for anything longer"
            )
        if value.strip().lower() in _NOT_FINITE:
            raise UserError(
                f"after --, {flag.name} {value}: not a finite number; give a real value"
            )


def owned_router_flags(rendered: Mapping[str, str]) -> Mapping[str, str]:
    """For `sm12x router --`: the flags it renders, plus the key."""
    return {**rendered, "--api-key": "SM12X_API_KEY (or SM12X_API_KEY_FILE)"}
