"""sglang's serving benchmark, as its wheel defines it, without importing sglang.

- real_parser(version): the exact argparse parser of
  `python -m sglang.benchmark.serving`: the statements of `cli_main()` up to
  `parser.parse_args()`, compiled from the wheel's serving.py with the few
  module-level names they use (the backend registry's keys, two helpers);
- result_keys(version): the keys of the `result = {...}` dict that
  `benchmark()` appends to --output-file, in order.

Importing serving.py itself would drag in transformers, aiohttp and most of
sglang; reading it with `ast` keeps the tests honest to the real file
(a renamed flag or field breaks them) at no cost.
"""

from __future__ import annotations

import argparse
import ast
import zipfile

from sm12x.mock import wheels

SERVING = "sglang/benchmark/serving.py"


def serving_source(version: str) -> str:
    with zipfile.ZipFile(wheels.wheel("sglang", version)) as archive:
        return archive.read(SERVING).decode()


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise LookupError(name)


def _backends(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(isinstance(t, ast.Name) and t.id == "ASYNC_REQUEST_FUNCS" for t in node.targets)
        ):
            return [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    raise LookupError("ASYNC_REQUEST_FUNCS")


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _imported_constants(tree: ast.Module, archive: zipfile.ZipFile) -> list[ast.stmt]:
    """The literal module-level constants serving.py imports from sglang's own
    modules (0.5.23's GOODPUT_SLO_METRICS, from sglang.benchmark.goodput), read
    from the same wheel."""
    found: list[ast.stmt] = []
    names = set(archive.namelist())
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang.")):
            continue
        wanted = {a.name for a in node.names if a.asname is None}
        base = (node.module or "").replace(".", "/")
        path = next((p for p in (f"{base}.py", f"{base}/__init__.py") if p in names), None)
        if path is None:
            continue
        source = ast.parse(archive.read(path).decode())
        found += [
            n
            for n in source.body
            if isinstance(n, ast.Assign)
            and _literal(n.value)
            and any(isinstance(t, ast.Name) and t.id in wanted for t in n.targets)
        ]
    return found


def real_parser(version: str) -> argparse.ArgumentParser:
    with zipfile.ZipFile(wheels.wheel("sglang", version)) as archive:  # opened once
        tree = ast.parse(archive.read(SERVING).decode())
        imported = _imported_constants(tree, archive)
    cli = _function(tree, "cli_main")
    body = []
    for stmt in cli.body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr == "parse_args"
        ):
            break
        body.append(stmt)
    build = ast.FunctionDef(
        name="build",
        args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[*body, ast.Return(ast.Name("parser", ast.Load()))],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    # The argument types and actions the parser names (_finite_positive_float,
    # 0.5.23's _goodput_slo, ...): every plain module-level function, whose body
    # runs only when called, and the one action class.
    helpers = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and not n.decorator_list and n.name != "cli_main")
        or (isinstance(n, ast.ClassDef) and n.name == "LoRAPathAction")
    ]
    # Module-level constants the parser's defaults use (e.g. a timeout).
    constants = [n for n in tree.body if isinstance(n, ast.Assign) and _literal(n.value)]
    module = ast.Module(body=[*imported, *constants, *helpers, build], type_ignores=[])
    ast.fix_missing_locations(module)
    namespace: dict = {
        "argparse": argparse,
        "ArgumentParser": argparse.ArgumentParser,
        "math": __import__("math"),
        "ASYNC_REQUEST_FUNCS": dict.fromkeys(_backends(tree)),
    }
    exec(compile(module, SERVING, "exec"), namespace)  # noqa: S102 - sglang's own parser code
    parser = namespace["build"]()
    parser.prog = "python -m sglang.benchmark.serving"
    return parser


def result_keys(version: str) -> list[str]:
    tree = ast.parse(serving_source(version))
    bench = _function(tree, "benchmark")
    for node in ast.walk(bench):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(isinstance(t, ast.Name) and t.id == "result" for t in node.targets)
        ):
            return [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    raise LookupError("result = {...} in benchmark()")


def flags(version: str) -> set[str]:
    return {s for action in real_parser(version)._actions for s in action.option_strings}
