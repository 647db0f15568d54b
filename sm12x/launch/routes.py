"""Routes whose path a variable sets, refused under a prefix sglang serves without the key.

sglang's API-key middleware lets every path that begins with a health,
readiness or metrics prefix through without the key, and some of its routes
(the Ollama chat and generate routes, Vertex's predict route) take their path
from a variable. sglang_routes.json, generated from each track's whole tree
and checked against sglang's own `decide_request_auth`
(tests/support/sglang_routes.py), names those variables and the keyless
prefixes; a variable that would put its route under one is refused, whichever
track: the same value would do it on either.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path

from sm12x.errors import UserError

ROUTES_FILE = Path(__file__).parent / "sglang_routes.json"


@functools.cache
def _data() -> dict:
    return json.loads(ROUTES_FILE.read_text(encoding="utf-8"))


def keyless_prefixes() -> list[str]:
    """Every prefix some pinned track's middleware lets through without the key."""
    return sorted({p for track in _data().values() for p in track["keyless_prefixes"]})


def route_variables() -> dict[str, str]:
    """Each variable that sets a route's path, with where (track and path:line)."""
    found: dict[str, str] = {}
    for version, track in sorted(_data().items()):
        for name, route in track["routes"].items():
            found.setdefault(name, f"sglang {version} {route['where']}")
    return found


def keyless(path: str) -> str | None:
    """The keyless prefix `path` falls under, as sglang tests it (str.startswith)."""
    return next((p for p in keyless_prefixes() if path.startswith(p)), None)


def check_routes(env: Mapping[str, str]) -> None:
    """Refuse a route variable in `env` whose path sglang would serve without the key."""
    for name, where in route_variables().items():
        value = env.get(name)
        if value is None:
            continue
        prefix = keyless(value)
        if prefix is not None:
            raise UserError(
                f"{name}={value} is refused: it sets the path of a route ({where}) and "
                f"sglang's API-key middleware lets every path under {prefix} through without "
                f"the key (srt/utils/auth.py decide_request_auth), so that route would answer "
                f"anyone; unset it, or give a path outside {', '.join(keyless_prefixes())}"
            )
