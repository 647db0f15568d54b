"""Each track's routes whose path a variable sets, judged by sglang's own auth middleware.

sglang's API-key middleware (srt/utils/auth.py, `decide_request_auth`) lets
every path that begins with a health, readiness or metrics prefix through
without the key. A variable that sets a route's path (SGLANG_OLLAMA_CHAT_ROUTE,
AIP_PREDICT_ROUTE, ...: found by tests/support/sglang_tree.py) can so move a
generate or chat route where no key is asked. For each track this finds:

- the keyless prefixes: the string constants `decide_request_auth` tests the
  path with (`path.startswith("/health")`), read from auth.py's AST, then
  confirmed by running the release's own `decide_request_auth` with a key
  configured and no key sent: each prefix (and a path under it) is let
  through, and each route's default path is not;
- every variable-path route: the variable, its default and where.

Written to sm12x/launch/sglang_routes.json (`python -m tools.regen --only
sglang-routes`); sm12x.sglang_routes refuses, at launch, a route variable
whose value falls under a keyless prefix. A route's default path that sglang
itself lets through without the key, or a variable-path route whose variable
is not found, fails the generation (and so the suite) with the reason.
"""

from __future__ import annotations

import ast
import json
import sys
import types
import zipfile
from pathlib import Path

from tests.support import sglang_tree

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "sm12x" / "launch" / "sglang_routes.json"
AUTH = "sglang/srt/utils/auth.py"
DECIDE = "decide_request_auth"
KEY = "sm12x-probe-key"


def keyless_prefixes(source: str) -> list[str]:
    """The constants `decide_request_auth` passes to `path.startswith`."""
    tree = ast.parse(source)
    function = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == DECIDE
    )
    found = []
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "startswith"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "path"
        ):
            found += [a.value for a in node.args if isinstance(a, ast.Constant)]
    return sorted(set(found))


def load_auth(source: str) -> types.ModuleType:
    """sglang's auth module, run from its source (it imports only the standard
    library at the top: its own docstring says it is kept so for unit tests)."""
    name = "sm12x_probe_sglang_auth"
    module = types.ModuleType(name)
    sys.modules[name] = module  # its dataclasses look their module up
    try:
        exec(compile(source, AUTH, "exec"), module.__dict__)  # noqa: S102 - sglang's own code
    finally:
        del sys.modules[name]
    return module


def lets_through(auth: types.ModuleType, path: str) -> bool:
    """sglang's decision for a keyless request to `path` while a key is configured."""
    decision = getattr(auth, DECIDE)(
        method="POST",
        path=path,
        authorization_header=None,
        api_key=KEY,
        admin_api_key=None,
        auth_level=auth.AuthLevel.NORMAL,
    )
    return bool(decision.allowed)


def judge(version: str, auth_source: str, inventory: sglang_tree.Inventory) -> dict:
    auth = load_auth(auth_source)
    prefixes = keyless_prefixes(auth_source)
    for prefix in prefixes:
        if not (lets_through(auth, prefix) and lets_through(auth, prefix + "/generate")):
            raise RuntimeError(f"sglang {version}: {AUTH} asks the key for {prefix!r}")
    if not prefixes or lets_through(auth, "/generate"):
        raise RuntimeError(f"sglang {version}: {AUTH} finds no keyless prefix, or no key check")
    routes: dict[str, dict[str, str | None]] = {}
    for where, (variable, default) in sorted(inventory.routes.items()):
        path, _, line = where.rpartition(":")
        if variable is None:
            raise RuntimeError(
                f"sglang {version}: the route at {where} takes its path from something "
                "other than an environment variable: judge it in tests/support/sglang_routes.py"
            )
        if default is not None and lets_through(auth, default):
            raise RuntimeError(
                f"sglang {version}: {variable}'s default path {default} is served without the key"
            )
        routes.setdefault(
            variable, {"default": default, "where": f"{path.partition('::')[0]}:{line}"}
        )
    return {"keyless_prefixes": prefixes, "routes": routes}


def of_version(version: str) -> dict:
    from sm12x.mock import wheels

    with zipfile.ZipFile(wheels.wheel("sglang", version)) as archive:
        auth_source = archive.read(AUTH).decode()
    return judge(version, auth_source, sglang_tree.of_version(version))


def render() -> dict[Path, str]:
    data = {v: of_version(v) for v in sglang_tree.versions()}
    return {OUT: json.dumps(data, indent=1, sort_keys=True) + "\n"}
