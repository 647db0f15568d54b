"""Every listener and secret of the pinned sglang and sglang-router, found in their source.

The candidates are read from each track's sglang wheel and from the pinned
sglang-router the suite installs, never from memory:

- sglang: every dest of the release's real parser (sm12x/sglang_parsers/,
  itself generated from the wheel) and every variable sglang.srt.environ
  declares, whose name says it may open a socket or hold a secret (NAMES,
  ENV_NAMES), and the fields ServerArgs leaves out of its own repr (the
  secrets sglang itself hides);
- sglang-router: every field of RouterArgs whose name says the same.

Each is found with its source line, and each must be judged by
sm12x.launch.judge.SURFACE (sglang) or sm12x.deploy.router.ROUTER_SURFACE
(the router): `unjudged()` names those that are not, which
tests/unit/test_surface_inventory.py fails on, so a listener a new release adds is a
test failure until it is judged. docs/listeners.md is the table
(`python -m tools.regen --only listeners`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sm12x.mock import wheels
from tests.support import sglang_tree

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "listeners.md"

# A dest's name that may mean a socket or a secret.
NAMES = re.compile(
    r"(^|_)(host|port|ports|endpoint|endpoints|bootstrap|grpc|sidecar|socket|bind|server|"
    r"url|urls|uri|addr|publish|lb|key|keys|password|secret|credential|credentials)(_|$)"
    r"|kv_events|^sidecar"
)
ENV_NAMES = re.compile(
    r"_(PORT|PORT_BASE|SERVER|ENDPOINT|URL|ADDR|APP_PATH|SOURCE_IP|PEERS|KEY|PASSWORD|SECRET"
    r"|SOCKET_TEMPLATE|ROUTE|TOKEN)$|_GRPC_PORT|_USE_ZMQ$|^DUMPER_.*(PORT|ADDRESS)$"
)
# Names of this kind that count tokens or name files, not sockets or secrets:
# a dest ending in a count or a path is none of either.
NOT_SURFACE = re.compile(r"_(path|paths|dir|file|timeout_secs|interval|num|size|max)$")
SGLANG_FILES = ("sglang/srt/server_args.py", "sglang/srt/arg_groups/fields/")


@dataclass(frozen=True)
class Found:
    name: str
    kind: str  # "flag" (a dest) or "env"
    where: str  # path:line in the release's source


def _lines(text: str, pattern: str) -> int | None:
    match = re.search(pattern, text, re.M)
    return None if match is None else text.count("\n", 0, match.start()) + 1


def _hidden(source: str) -> set[str]:
    """The fields ServerArgs.__repr__ leaves out (0.5.23: the watermark keys)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__repr__":
            for item in ast.walk(node):
                if isinstance(item, ast.Set):
                    return {e.value for e in item.elts if isinstance(e, ast.Constant)}
    return set()


@functools.cache
def sglang(version: str) -> dict[str, Found]:
    """The candidates of one sglang release, by dest or variable name."""
    desc = json.loads((ROOT / "sm12x" / "sglang_parsers" / f"{version}.json").read_text())
    dests = {a["dest"] for a in desc["actions"]}
    with zipfile.ZipFile(wheels.wheel("sglang", version)) as archive:
        sources = {
            name: archive.read(name).decode()
            for name in archive.namelist()
            if name.endswith(".py") and name.startswith(SGLANG_FILES)
        }
    from sm12x.launch.judge import SURFACE

    hidden = _hidden(sources["sglang/srt/server_args.py"])
    # By name, hidden by sglang, or judged already (a listener its name does not
    # say: --disaggregation-mode starts the bootstrap server).
    wanted = {d for d in dests if NAMES.search(d) and not NOT_SURFACE.search(d)} | hidden
    wanted |= {d for d in SURFACE if d in dests}
    found: dict[str, Found] = {}
    for dest in sorted(wanted):
        for path, text in sources.items():
            line = _lines(text, rf"^\s+{re.escape(dest)}\s*:")
            if line is not None:
                found[dest] = Found(dest, "flag", f"{path}:{line}")
                break
        else:
            found[dest] = Found(dest, "flag", "sglang/srt/server_args.py (add_cli_args)")
    # Every variable the whole tree reads (tests/support/sglang_tree.py), not
    # only environ.py's: the dumper's port and the route paths live elsewhere.
    for name, where in sglang_tree.of_version(version).reads.items():
        if ENV_NAMES.search(name) or name in SURFACE:
            found[name] = Found(name, "env", where.partition(" ")[0])
    return found


def router_source() -> tuple[str, str]:
    """The installed sglang-router's router_args.py and its version (the pin)."""
    spec = importlib.util.find_spec("sglang_router")
    if spec is None or spec.origin is None:
        raise RuntimeError("sglang-router is not installed: scripts/test installs the pinned one")
    folder = Path(spec.origin).parent
    version = re.search(r"['\"]([\d.]+)['\"]", (folder / "version.py").read_text())
    return (folder / "router_args.py").read_text(), version.group(1) if version else "?"


@functools.cache
def router() -> dict[str, Found]:
    from sm12x.deploy.router import ROUTER_SURFACE

    source, _ = router_source()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RouterArgs")
    found = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
            named = NAMES.search(name) and not NOT_SURFACE.search(name)
            if named or name in ROUTER_SURFACE:
                found[name] = Found(name, "flag", f"sglang_router/router_args.py:{node.lineno}")
    return found


def versions() -> list[str]:
    from tools import sglang_cli

    return sglang_cli.track_versions()


def unjudged() -> list[str]:
    """Candidates no table judges, and table rows no pinned release has."""
    from sm12x.deploy.router import ROUTER_SURFACE
    from sm12x.launch.judge import SURFACE

    problems = []
    seen: set[str] = set()
    for version in versions():
        for name, found in sglang(version).items():
            seen.add(name)
            if name not in SURFACE:
                problems.append(f"sglang {version}: {name} ({found.where}) is not judged")
    problems += [f"SURFACE: {n} is in no pinned sglang" for n in SURFACE if n not in seen]
    from sm12x.launch.routes import route_variables

    routed_env = {n for n, s in SURFACE.items() if s.rule == "route"}
    problems += [
        f"{n} sets a route's path (sm12x/launch/sglang_routes.json) but SURFACE does not "
        "rule it `route`"
        for n in sorted(set(route_variables()) ^ routed_env)
    ]
    routed = router()
    problems += [
        f"sglang-router: {n} ({f.where}) is not judged"
        for n, f in routed.items()
        if n not in ROUTER_SURFACE
    ]
    problems += [
        f"ROUTER_SURFACE: {n} is not in sglang-router" for n in ROUTER_SURFACE if n not in routed
    ]
    return problems


def _row(name: str, kind: str, rule: str, where: list[str], why: str) -> str:
    shown = f"`--{name.replace('_', '-')}`" if kind == "flag" else f"`{name}`"
    return f"| {shown} | {rule} | {'<br>'.join(where)} | {why} |"


def render_doc() -> str:
    from sm12x.deploy.router import ROUTER_SURFACE
    from sm12x.launch.judge import SURFACE

    lines = [
        "# Listeners and secrets",
        "",
        "<!-- generated by `python -m tools.regen --only listeners` "
        "(tests/support/sglang_surface.py); do not edit -->",
        "",
        "Every flag and environment variable of the pinned sglang releases and",
        "sglang-router whose name says it may open a socket or hold a secret, found in",
        "their source, with how sm12x judges it (sm12x.launch.judge.SURFACE,",
        "sm12x.deploy.router.ROUTER_SURFACE). A candidate a new release adds fails",
        "tests/unit/test_surface_inventory.py until it is judged. The rules:",
        "",
        "- **loopback**: refused unless sglang binds loopback (it binds sglang's host and",
        "  checks no API key);",
        "- **endpoint**: refused unless every endpoint it binds is `tcp://127.0.0.1:PORT`",
        "  or `ipc://PATH`;",
        "- **refused**: refused in any form;",
        "- **secret**: refused on a command line; the row says the route that is not;",
        "- **owned**: set by sm12x from a setting, refused after `--`;",
        "- **route**: sets a route's path; refused under a prefix sglang's own auth",
        "  middleware serves without the key (sm12x.launch.routes);",
        "- **none**: matched by name, but opens no listener and holds no secret.",
        "",
        "## sglang",
        "",
        "| name | rule | source | what |",
        "|---|---|---|---|",
    ]
    table: dict[str, tuple[str, list[str]]] = {}
    for version in versions():
        for name, found in sglang(version).items():
            kind, where = table.setdefault(name, (found.kind, []))
            where.append(f"{version}: {found.where}")
    for name in sorted(table, key=lambda n: (n.isupper(), n)):
        kind, where = table[name]
        surface = SURFACE.get(name)
        rule, why = (surface.rule, surface.why) if surface else ("**unjudged**", "")
        lines.append(_row(name, kind, rule, where, why))
    lines += _tree_sections()
    _, router_version = router_source()
    lines += [
        "",
        f"## sglang-router {router_version}",
        "",
        "| name | rule | source | what |",
        "|---|---|---|---|",
    ]
    for name, found in sorted(router().items()):
        surface = ROUTER_SURFACE.get(name)
        rule, why = (surface.rule, surface.why) if surface else ("**unjudged**", "")
        lines.append(_row(name, "flag", rule, [found.where], why))
    return "\n".join(lines) + "\n"


def _tree_sections() -> list[str]:
    """The servers, variable-path routes and computed reads of both trees."""
    from sm12x.launch.routes import keyless_prefixes
    from tests.support import sglang_routes, sglang_servers

    lines = [
        "",
        "## Servers sglang can start",
        "",
        "Every server start in each track's whole tree (tests/support/sglang_tree.py),",
        "by the function it is in, and what opens it (tests/support/sglang_servers.py:",
        "a SURFACE name above, API, INTERNAL, ENTRY or TEST).",
        "",
        "| function | calls | gate | what |",
        "|---|---|---|---|",
    ]
    rows: dict[str, tuple[list[str], tuple | None]] = {}
    for version in versions():
        for key, calls, row in sglang_servers.server_rows(version):
            where, _ = rows.setdefault(key, ([], row))
            where.append(f"{version}: {', '.join(calls)}")
    for key, (where, row) in sorted(rows.items()):
        gate, what = (row[1], row[2]) if row else ("**unjudged**", "")
        lines.append(f"| `{key}` | {'<br>'.join(where)} | {gate} | {what} |")
    lines += [
        "",
        "## Routes whose path a variable sets",
        "",
        "Judged by each track's own `decide_request_auth` (srt/utils/auth.py) with a key",
        "configured: each default path asks for the key; a value under a keyless prefix",
        f"({', '.join(keyless_prefixes())}) is refused at launch (sm12x.launch.routes).",
        "",
        "| variable | default | source |",
        "|---|---|---|",
    ]
    routes: dict[str, tuple[str | None, list[str]]] = {}
    for version in versions():
        for name, route in sglang_routes.of_version(version)["routes"].items():
            routes.setdefault(name, (route["default"], []))[1].append(
                f"{version}: {route['where']}"
            )
    for name, (default, where) in sorted(routes.items()):
        lines.append(f"| `{name}` | `{default or '/'}` | {'<br>'.join(where)} |")
    return lines
