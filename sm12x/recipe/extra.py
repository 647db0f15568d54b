"""Flags after `--` (`sm12x launch -- FLAG ...`), checked as if the recipe had them.

sglang keeps the last of a repeated flag, so an appended flag silently
replaces the recipe's: `-- --speculative-dspark-block-size 5` would run the
depth that corrupts outputs, past the dspark-depth-5 lint. So flags after
`--` may only add what the recipe does not set, and the recipe with them
added must pass every lint the recipe itself passes:

- a flag the launcher renders from another section (DERIVED_FLAGS), or one
  the recipe sets, is refused with where to change it instead; so is any
  spelling sglang's parser reads as one of them: an alias (CANONICAL_FLAGS),
  `--flag=value`, or a prefix argparse expands (`--speculative-dspark-block`);
- nan and inf are refused as values (no sglang setting means them);
- the rest is added to a copy of the recipe, which is validated and linted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sm12x.errors import UserError
from sm12x.recipe.lints import CANONICAL_FLAGS, DERIVED_FLAGS, lint_recipe
from sm12x.recipe.load import RecipeError, validate_recipe
from sm12x.recipe.model import Recipe

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


def check_values(flag: ExtraFlag) -> None:
    for value in flag.values:
        if value.strip().lower() in _NOT_FINITE:
            raise UserError(
                f"after --, {flag.name} {value}: not a finite number; give a real value"
            )


def check_extra(recipe: Recipe, tokens: Sequence[str]) -> list[ExtraFlag]:
    """The flags after `--`, or one UserError saying which is refused and why."""
    flags = parse_extra(tokens)
    seen: set[str] = set()
    for flag in flags:
        check_values(flag)
        derived = owner(flag.name, DERIVED_FLAGS)
        if derived is not None:
            raise UserError(
                f"after --, {flag.name} is refused: {derived} is rendered from "
                f"{DERIVED_FLAGS[derived]}; change that instead (sglang keeps the last of a "
                "repeated flag, so a second copy would silently win)"
            )
        mine = owner(flag.name, recipe.flags)
        if mine is not None:
            raise UserError(
                f"after --, {flag.name} is refused: recipe {recipe.name} sets {mine} "
                f"({_shown(recipe.flag_value(mine))}) and a second copy would silently win; "
                "copy the recipe, change it there and run it with --recipe FILE"
            )
        if flag.name in seen:
            raise UserError(f"after --, {flag.name} is given twice: keep one")
        seen.add(flag.name)
    _lint_with(recipe, flags)
    return flags


def _shown(value: object) -> str:
    return "a switch" if value is None else repr(value)


def _lint_with(recipe: Recipe, flags: Sequence[ExtraFlag]) -> None:
    """The recipe with the extra flags added must pass the recipe's own checks."""
    if not flags:
        return
    data = recipe.model_dump(mode="json", exclude_none=True)
    for flag in flags:
        entry: dict = {"why": WHY}
        if flag.value is not None:
            entry["value"] = flag.value
        data["flags"][flag.name] = entry
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


def owned_router_flags(rendered: Mapping[str, str]) -> Mapping[str, str]:
    """For `sm12x router --`: the flags it renders, plus the key."""
    return {**rendered, "--api-key": "SM12X_API_KEY (or SM12X_API_KEY_FILE)"}
