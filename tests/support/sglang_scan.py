"""One pass of Python's AST over a module of sglang: what it reads, opens and routes.

tests/support/sglang_tree.py runs it on every module of a track's whole tree
(the wheel, or a folder: a copy the injection test edits). It finds:

- reads of the environment, by name: `os.environ.get("X")` (and .pop,
  .setdefault), `os.getenv("X")`, `os.environ["X"]`, `"X" in os.environ`, any
  helper whose name says env called with the name first (`get_bool_env_var`,
  `get_int_env_var`, ...), the declarations of sglang.srt.environ
  (`X = EnvBool(...)`), its reads (`envs.X`), and the variables an env-config
  dataclass reads (a class whose `_env_prefix()` returns a constant reads
  PREFIX + each field's name upper-cased: the dumper's DUMPER_SERVER_PORT);
- reads whose name is computed (`os.getenv(name)`): `dynamic`, each judged in
  sglang_tree.DYNAMIC, since nothing here can say which variable they read;
- servers: uvicorn (`run`, `Server`, `Config`), aiohttp (`web.TCPSite`,
  `web.UnixSite`, `web.SockSite`, `web.run_app`), http.server and socketserver
  classes, gRPC ports, `asyncio.start_server`/`create_server`, and `.bind()` /
  `.listen()` in a module that imports socket or zmq, by the function they are in;
- routes whose path is not a constant (a decorator `@x.get(path)`,
  `add_api_route(path)`, `APIRouter(prefix=...)`), with the variable that sets
  the path and its default where the path is an environment read.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
from dataclasses import dataclass, field

NAME = re.compile(r"^[A-Z_][A-Z0-9_]{1,}$")
ENV_CALL = re.compile(r"env", re.I)
GETTER = re.compile(r"^_?get\w*env", re.I)
ROUTE_METHODS = {
    "get", "post", "put", "delete", "patch", "head", "options", "api_route", "route",
    "websocket", "add_api_route", "add_route", "add_websocket_route",
}  # fmt: skip
# Calls that add a route or set a prefix wherever they are, not only as a decorator.
ADDERS = {"add_api_route", "add_route", "add_websocket_route", "APIRouter"}
SERVER_CALLS = {
    ("uvicorn", "run"), ("uvicorn", "Server"), ("uvicorn", "Config"),
    ("web", "TCPSite"), ("web", "UnixSite"), ("web", "SockSite"), ("web", "run_app"),
    ("asyncio", "start_server"), ("asyncio", "start_unix_server"),
}  # fmt: skip
SERVER_NAMES = {
    "HTTPServer", "ThreadingHTTPServer", "TCPServer", "ThreadingTCPServer", "UnixStreamServer",
    "make_server", "add_insecure_port", "add_secure_port", "create_server",
    "create_unix_server",
}  # fmt: skip
SOCKET_MODULES = ("socket", "zmq", "socketserver")


@dataclass
class Scan:
    reads: list[tuple[str, int, str]] = field(default_factory=list)  # name, line, form
    dynamic: list[tuple[str, int]] = field(default_factory=list)  # function, line
    servers: list[tuple[str, int, str]] = field(default_factory=list)  # function, line, call
    # function, line, variable (None: not an env read), default path
    routes: list[tuple[str, int, str | None, str | None]] = field(default_factory=list)


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _literal(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.match(node.value):
        return node.value
    return None


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def env_read(node: ast.AST) -> tuple[str | None, str | None, str] | None:
    """(name or None when computed, default, form) when `node` reads the environment."""
    if isinstance(node, ast.Call) and node.args:
        callee = _callee(node)
        on_environ = isinstance(node.func, ast.Attribute) and _is_environ(node.func.value)
        default = _text(node.args[1]) if len(node.args) > 1 else None
        if on_environ and callee in ("get", "pop", "setdefault"):
            return _literal(node.args[0]), default, f"environ.{callee}"
        if not on_environ and (callee == "getenv" or ENV_CALL.search(callee)):
            if callee.startswith("Env") or callee in ("_env_name", "env_name"):
                return None  # a declaration (environ.py) or a name builder
            if callee != "getenv" and _literal(node.args[0]) is None:
                # computed: a getter's read (get_bool_env_var(name)) is dynamic,
                # any other helper (set_env(obj), ...) is not a read
                return (None, None, "getter") if GETTER.match(callee) else None
            return _literal(node.args[0]), default, callee
    elif isinstance(node, ast.Subscript) and _is_environ(node.value):
        if isinstance(node.ctx, ast.Load):
            return _literal(node.slice), None, "environ[]"
    elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
        return _literal(node.left), None, "in environ"
    elif (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "envs"
        and NAME.match(node.attr)
    ):
        return node.attr, None, "envs.X"
    return None


def _prefix_classes(nodes: list[ast.AST]) -> list[tuple[str, list[tuple[str, int]]]]:
    """Env-config dataclasses: (prefix, [(field, line)]) per class whose
    `_env_prefix()` returns a string constant."""
    out = []
    for cls in (n for n in nodes if isinstance(n, ast.ClassDef)):
        prefix = None
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and item.name == "_env_prefix":
                returns = [r for r in ast.walk(item) if isinstance(r, ast.Return)]
                prefix = _text(returns[0].value) if len(returns) == 1 else None
        if prefix is None:
            continue
        fields = [
            (item.target.id, item.lineno)
            for item in cls.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
        ]
        out.append((prefix, fields))
    return out


def _module_env(nodes: list[ast.AST]) -> dict[str, tuple[str, str | None]]:
    """Module-level names bound to an environment read: name -> (variable, default)."""
    bound = {}
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            read = env_read(node.value)
            if isinstance(target, ast.Name) and read is not None and read[0] is not None:
                bound[target.id] = (read[0], read[1])
    return bound


def _route_path(call: ast.Call) -> ast.AST | None:
    """The path a route call sets, when it is not a constant string."""
    method = _callee(call)
    path: ast.AST | None = None
    if method in ROUTE_METHODS and isinstance(call.func, ast.Attribute):
        path = call.args[0] if call.args else None
        path = next((k.value for k in call.keywords if k.arg == "path"), path)
    elif method == "APIRouter":
        path = next((k.value for k in call.keywords if k.arg == "prefix"), None)
    if path is None or isinstance(path, ast.Constant):
        return None
    return path


class _Walker(ast.NodeVisitor):
    def __init__(self, scan: Scan, bound: dict, sockets: bool, constants: dict) -> None:
        self.scan, self.bound, self.sockets = scan, bound, sockets
        self.constants = constants
        self.where: list[str] = []

    def _function(self) -> str:
        return ".".join(self.where) or "<module>"

    def _scoped(self, node: ast.AST, name: str) -> None:
        self.where.append(name)
        self.generic_visit(node)
        self.where.pop()

    def _route(self, node: ast.Call) -> None:
        path = _route_path(node)
        if path is not None:
            read = env_read(path)
            if read is None and isinstance(path, ast.Name) and path.id in self.bound:
                read = (*self.bound[path.id], "")
            variable, default = (read[0], read[1]) if read else (None, None)
            self.scan.routes.append((self._function(), node.lineno, variable, default))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call) and _callee(decorator) in ROUTE_METHODS:
                self._route(decorator)
        self._scoped(node, node.name)

    def visit_Dict(self, node: ast.Dict) -> None:
        # {"SGLANG_X": _DeprecatedEnv(...)}: a registry of names read by key.
        for key, value in zip(node.keys, node.values, strict=True):
            if (
                key is not None
                and _literal(key)
                and isinstance(value, ast.Call)
                and ENV_CALL.search(_callee(value))
            ):
                self.scan.reads.append((_literal(key) or "", key.lineno, "Env registry"))
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, node.name)

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Call) and _callee(node.value).startswith("Env"):
            for target in node.targets:
                if isinstance(target, ast.Name) and NAME.match(target.id):
                    self.scan.reads.append((target.id, node.lineno, "environ.py Env"))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        self._server(node)
        if _callee(node) in ADDERS:
            self._route(node)
        self._read(node)
        self.generic_visit(node)

    def _server(self, node: ast.Call) -> None:
        func, callee = node.func, _callee(node)
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(
            func.value, ast.Name
        ) else None  # fmt: skip
        if (owner, callee) in SERVER_CALLS or callee in SERVER_NAMES:
            self.scan.servers.append((self._function(), node.lineno, f"{owner or ''}.{callee}"))
        elif (
            self.sockets
            and isinstance(func, ast.Attribute)
            and callee in ("bind", "listen")
            and len(node.args) <= 1
            and not node.keywords
        ):
            self.scan.servers.append((self._function(), node.lineno, f".{callee}"))

    def _named(self, node: ast.AST) -> str | None:
        """A computed read's name when its argument is a module's string constant
        (`os.getenv(PREFILL_ENV)` with `PREFILL_ENV = "SGLANG_..."`)."""
        arg = node.args[0] if isinstance(node, ast.Call) and node.args else None
        arg = node.slice if isinstance(node, ast.Subscript) else arg
        return self.constants.get(arg.id) if isinstance(arg, ast.Name) else None

    def _read(self, node: ast.AST) -> None:
        read = env_read(node)
        if read is None:
            return
        name, _, form = read
        name = name or self._named(node)
        if name is not None:
            self.scan.reads.append((name, node.lineno, form))
        elif form in ("getenv", "getter", "environ.get", "environ.pop", "environ.setdefault"):
            self.scan.dynamic.append((self._function(), node.lineno))

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Subscript, ast.Compare, ast.Attribute)):
            read = env_read(node)
            if read is not None and read[0] is not None:
                self.scan.reads.append((read[0], node.lineno, read[2]))
            elif read is not None and read[2] == "environ[]":
                named = self._named(node)
                if named is not None:
                    self.scan.reads.append((named, node.lineno, read[2]))
                else:
                    self.scan.dynamic.append((self._function(), node.lineno))
        super().generic_visit(node)


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to a string that looks like a variable's name."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], _literal(node.value)
            if isinstance(target, ast.Name) and value is not None:
                found[target.id] = value
    return found


def _imports_sockets(nodes: list[ast.AST]) -> bool:
    for node in nodes:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(n.split(".")[0] in SOCKET_MODULES for n in names):
            return True
    return False


@functools.lru_cache(maxsize=8192)
def _scan_cached(digest: str, source: str) -> Scan:
    del digest  # the key's other half: a copy of an unchanged file hits the cache
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return Scan()
    scan = Scan()
    # Every node once, for the passes that look at all of them in any order (one
    # walk of the tree instead of four: 0.5.17's wheel scans in 13.3 CPU s, not
    # 14.9, to the same inventory; the visitor below walks for the scopes).
    nodes = list(ast.walk(tree))
    _Walker(scan, _module_env(nodes), _imports_sockets(nodes), _constants(tree)).visit(tree)
    if scan.dynamic:
        # A computed read: any name-like string of the module may be its name
        # (environ.py's cache redirect reads the keys of a dict another
        # function returns), so each counts as read.
        scan.reads += [
            (n.value, n.lineno, "computed")  # type: ignore[attr-defined]
            for n in nodes
            if _literal(n) is not None
        ]
    for prefix, fields in _prefix_classes(nodes):
        scan.reads += [(prefix + name.upper(), line, "_env_prefix") for name, line in fields]
    scan.reads.sort(key=lambda r: (r[1], r[0]))
    return scan


def scan(source: str) -> Scan:
    """Everything one module reads, opens and routes (cached by content)."""
    return _scan_cached(hashlib.sha256(source.encode()).hexdigest(), source)
