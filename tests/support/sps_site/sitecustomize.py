"""Lets this machine's Python run sglang's real SPS profiler from a wheel's tree.

Put this folder on PYTHONPATH and SM12X_SPS_SGLANG_SITE at a site folder
holding an unpacked sglang wheel (sm12x.mock.serving.tree): then
`python -m sglang.benchmark.dspark_sps_profiler ...` runs that wheel's
profiler, its SPS table code (dspark_sps.py) and its tokenizer loader
(benchmark/utils.get_tokenizer) unchanged.

Two things stand in for what cannot load on a CPU machine without the whole
runtime:
- `sglang` is registered as a bare package: its __init__ imports the whole
  runtime (CUDA kernels, the server);
- `sglang.benchmark.one_batch_server` is built from the real file's own
  source, but only the three names the profiler imports from it
  (DEFAULT_TIMEOUT and the two capacity guards `should_skip_due_to_*`), each
  compiled from that file as written: the rest of the module imports the HTTP
  server, ServerArgs and the profiler of the training stack.
Python imports sitecustomize at start-up, before `-m` runs the module.
"""

import ast
import importlib.machinery
import os
import sys
import types
from pathlib import Path

SITE = os.environ.get("SM12X_SPS_SGLANG_SITE")
KEPT = (
    "DEFAULT_TIMEOUT",
    "should_skip_due_to_max_running_requests",
    "should_skip_due_to_token_capacity",
)


def _bare_package(name: str, folder: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    module.__spec__, module.__path__ = spec, [str(folder)]
    sys.modules[name] = module
    return module


def _one_batch_server(path: Path) -> types.ModuleType:
    source = ast.parse(path.read_text(encoding="utf-8"), str(path))
    kept = [
        node
        for node in source.body
        if (isinstance(node, ast.FunctionDef) and node.name in KEPT)
        or (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) in KEPT for t in node.targets)
        )
    ]
    found = {getattr(n, "name", None) or n.targets[0].id for n in kept}
    if found != set(KEPT):
        raise ImportError(f"{path} no longer defines {sorted(set(KEPT) - found)}")
    module = types.ModuleType("sglang.benchmark.one_batch_server")
    module.__file__ = str(path)
    exec(compile(ast.Module(body=kept, type_ignores=[]), str(path), "exec"), module.__dict__)
    return module


if SITE:
    root = Path(SITE) / "sglang"
    _bare_package("sglang", root)
    sys.modules["sglang.benchmark.one_batch_server"] = _one_batch_server(
        root / "benchmark" / "one_batch_server.py"
    )
