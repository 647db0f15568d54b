"""Every value sglang gets is bounded, per flag, from sglang's own parser.

The one parse of a launch (sm12x.launch.judge.parse) converts each value by its
action's type and checks its choices, as sglang would: a value of the wrong
type or outside the choices is refused there, in one line naming the flag.
What the parser cannot bound is bounded here, per token of that parse:

- free text (a value the parser keeps as a string, with no choices, whatever
  its type function) to
  MAX_FREE_TEXT bytes: no flag of sglang takes a longer one (a path, a JSON
  config, a name), and a 100,000-character `--log-level` is a mistake or an
  attack, never a setting;
- integers to a signed 64 bits (what the C++ and CUDA code they reach holds).
"""

from __future__ import annotations

import argparse
from typing import Any

from sm12x.errors import UserError
from sm12x.recipe.extra import MAX_VALUE_CHARS

MAX_INT = 2**63 - 1


def _items(value: object) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def check_bounds(token: Any, where: str) -> None:
    """Refuse a value past its bound, in one line naming the flag and the fix."""
    action = token.action
    for item in _items(token.value):
        if isinstance(item, (list, tuple)):
            for inner in item:
                _check(action, inner, where)
        else:
            _check(action, item, where)


def _check(action: argparse.Action, item: object, where: str) -> None:
    if isinstance(item, bool):
        return
    if isinstance(item, int) and abs(item) > MAX_INT:
        raise UserError(
            f"{where}: {len(str(abs(item)))} digits is past a 64-bit integer; give a "
            "value sglang can hold"
        )
    if isinstance(item, str) and action.choices is None and len(item) > MAX_VALUE_CHARS:
        raise UserError(
            f"{where}: a value of {len(item):,} characters, more than the "
            f"{MAX_VALUE_CHARS:,} sm12x passes (sm12x.recipe.extra.MAX_VALUE_CHARS); "
            "give a file path for anything longer"
        )
