"""sglang's own SPS profiler for a Python without sglang: the release's wheel, unpacked.

`sm12x tune --url` runs `python -m sglang.benchmark.dspark_sps_profiler`. On the
rig that is the image's sglang. On a CPU machine trying tune against
`sm12x mock-server` there is no sglang to import (the `mock` extra carries
none: the mock unpacks the wheel for itself), so tune runs

    python -m sm12x.mock.profiler_python VERSION -m sglang.benchmark.dspark_sps_profiler ...
    python -m sm12x.mock.profiler_python VERSION -c CODE

which makes the pristine tree of that release's wheel importable in this
process (sm12x.mock.serving.tree, the mock's own cache; the release's own
library pins first, sm12x.mock.wheels.pythonpath) and then runs the module or
code as `python -m`/`-c` would. The profiler, its SPS table code
(dspark_sps.py) and its tokenizer loader (benchmark/utils.get_tokenizer) run as
the wheel ships them. Two things stand in for what cannot load on a CPU
machine without the whole runtime:

- `sglang` is registered as a bare package: its __init__ imports the whole
  runtime (CUDA kernels, the server);
- `sglang.benchmark.one_batch_server` is built from the real file's own
  source, but only the three names the profiler imports from it
  (DEFAULT_TIMEOUT and the two capacity guards `should_skip_due_to_*`), each
  compiled from that file as written: the rest of the module imports the HTTP
  server, ServerArgs and the profiler of the training stack.

Pristine, not patched: no patch of the series touches what the profiler
imports (PROFILER_FILES; tests/unit/test_profiler_python.py holds that), so the
pristine tree runs the code the image runs, and a pip-installed sm12x without
scripts/apply-patches can build it. tune names this module as a program, never
imports it (the mock is a leaf: pyproject's import contracts).

A tree that cannot be had (offline without the wheel, no network, a bad
download) is one line on stderr, exit 2, before anything of sglang runs.
"""

from __future__ import annotations

import ast
import importlib.machinery
import runpy
import subprocess
import sys
import types
import zipfile
from pathlib import Path

USAGE = "usage: python -m sm12x.mock.profiler_python VERSION (-m MODULE | -c CODE) [ARG ...]"
# What `python -m sglang.benchmark.dspark_sps_profiler` imports from sglang, as
# paths relative to site-packages, the patches' own (a folder covers all under it).
PROFILER_FILES = (
    "sglang/benchmark/",
    "sglang/srt/speculative/dspark_components/dspark_sps.py",
)
KEPT = (
    "DEFAULT_TIMEOUT",
    "should_skip_due_to_max_running_requests",
    "should_skip_due_to_token_capacity",
)


class CannotHave(RuntimeError):
    """The release's tree is not to be had here; the message says what to do."""


def site_for(version: str) -> tuple[Path, list[str]]:
    """(the release's pristine site folder, what goes first on sys.path for it)."""
    from sm12x.mock import serving, wheels

    try:
        return serving.tree(version, patched=False), wheels.pythonpath(version)
    except wheels.Forbidden as exc:
        raise CannotHave(f"sglang {version}'s profiler from its wheel: {exc}") from None
    except (OSError, RuntimeError, subprocess.CalledProcessError, zipfile.BadZipFile) as exc:
        raise CannotHave(
            f"this Python has no sglang, and sglang {version}'s wheel cannot stand in "
            f"for it ({exc}): run `sm12x mock-server --fetch --sglang-version {version}` "
            "once with the network, or pass --python with a Python that has sglang"
        ) from None


def _bare_package(name: str, folder: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    module.__spec__, module.__path__ = spec, [str(folder)]
    sys.modules[name] = module
    return module


def _defines(node: ast.stmt) -> str | None:
    """The KEPT name a top-level statement defines, if it defines one."""
    if isinstance(node, ast.FunctionDef):
        return node.name if node.name in KEPT else None
    if isinstance(node, ast.Assign):
        names = [t.id for t in node.targets if isinstance(t, ast.Name) and t.id in KEPT]
        return names[0] if names else None
    return None


def _one_batch_server(path: Path) -> types.ModuleType:
    source = ast.parse(path.read_text(encoding="utf-8"), str(path))
    kept: list[ast.stmt] = [node for node in source.body if _defines(node)]
    found = {_defines(node) for node in kept}
    if found != set(KEPT):
        raise CannotHave(f"{path} no longer defines {sorted(set(KEPT) - found)}")
    module = types.ModuleType("sglang.benchmark.one_batch_server")
    module.__file__ = str(path)
    exec(compile(ast.Module(body=kept, type_ignores=[]), str(path), "exec"), module.__dict__)
    return module


def install(site: Path, first: list[str]) -> None:
    """Make `site`'s sglang importable in this process, as described above."""
    for folder in reversed(first):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    root = site / "sglang"
    _bare_package("sglang", root)
    sys.modules["sglang.benchmark.one_batch_server"] = _one_batch_server(
        root / "benchmark" / "one_batch_server.py"
    )


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("-m", "-c"):
        print(USAGE, file=sys.stderr)
        return 2
    version, how, what, rest = argv[0], argv[1], argv[2], argv[3:]
    try:
        install(*site_for(version))
    except CannotHave as exc:
        print(f"sm12x.mock.profiler_python: error: {exc}", file=sys.stderr)
        return 2
    if how == "-m":
        sys.argv = [what, *rest]
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *rest]
        exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
