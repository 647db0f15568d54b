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


def real_parser(version: str) -> argparse.ArgumentParser:
    tree = ast.parse(serving_source(version))
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
    helpers = [
        n
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.ClassDef))
        and n.name in ("_finite_positive_float", "LoRAPathAction")
    ]
    # Module-level constants the parser's defaults use (e.g. a timeout).
    constants = [n for n in tree.body if isinstance(n, ast.Assign) and _literal(n.value)]
    module = ast.Module(body=[*constants, *helpers, build], type_ignores=[])
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
