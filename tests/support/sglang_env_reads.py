"""Every environment variable each track's sglang reads, found in its whole tree.

The launcher (sm12x.launch_env) refuses a caller's variable that
sglang reads unless the recipe, the settings or the allowlist give it; which
variables sglang reads comes from here, read from each track's wheel (never
from memory) and written to sm12x/launch/sglang_env.json
(`python -m tools.regen --only sglang-env-reads`).

The forms found, in every module of the package but its test folder (code the
server never imports):
  os.environ.get("X") / .pop / .setdefault, os.getenv("X"), os.environ["X"],
  "X" in os.environ, any helper whose name says env with the name as its first
  argument (get_bool_env_var("X"), get_int_env_var, sglang's own Env helpers),
  and the declarations of sglang.srt.environ (`X = EnvBool(...)`, read as envs.X).
"""

from __future__ import annotations

import ast
import json
import re
import zipfile
from pathlib import Path

from sm12x.mock import wheels
from sm12x.versions import load_versions

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "sm12x" / "launch" / "sglang_env.json"
NAME = re.compile(r"^[A-Z_][A-Z0-9_]{1,}$")
ENV_CALL = re.compile(r"env", re.I)
SKIP = ("sglang/test/",)


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _literal(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.match(node.value):
        return node.value
    return None


def reads_in(source: str) -> list[tuple[str, int]]:
    """(name, line) of every read of the environment in one module."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call) and node.args:
            callee = _callee(node)
            on_environ = isinstance(node.func, ast.Attribute) and _is_environ(node.func.value)
            if (on_environ and callee in ("get", "pop", "setdefault")) or (
                not on_environ and ENV_CALL.search(callee)
            ):
                name = _literal(node.args[0])
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            name = _literal(node.slice)
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            name = _literal(node.left)
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and _callee(node.value).startswith("Env")
        ):
            found += [
                (t.id, node.lineno)
                for t in node.targets
                if isinstance(t, ast.Name) and NAME.match(t.id)
            ]
        if name is not None:
            found.append((name, node.lineno))
    return found


def reads(version: str) -> dict[str, str]:
    """Every variable one sglang release reads, with its first place (path:line)."""
    out: dict[str, str] = {}
    with zipfile.ZipFile(wheels.wheel("sglang", version)) as archive:
        for path in sorted(archive.namelist()):
            if not path.endswith(".py") or path.startswith(SKIP):
                continue
            for name, line in reads_in(archive.read(path).decode("utf-8", "replace")):
                out.setdefault(name, f"{path}:{line}")
    return dict(sorted(out.items()))


def versions() -> list[str]:
    return sorted({load_versions(t)["SGLANG_VERSION"] for t in ("pinned", "current")})


def render() -> dict[Path, str]:
    data = {v: reads(v) for v in versions()}
    return {OUT: json.dumps(data, indent=1, sort_keys=True) + "\n"}
