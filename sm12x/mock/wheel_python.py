"""sglang's own benchmark tools for a Python without sglang: the release's wheel, unpacked.

`sm12x tune --url` runs `python -m sglang.benchmark.dspark_sps_profiler` and
`sm12x bench` runs `python -m sglang.benchmark.serving`. On the rig that is the
image's sglang. On a CPU machine trying them against `sm12x mock-server` there
is no sglang to import (the `mock` extra carries none: the mock unpacks the
wheel for itself), so they run

    python -m sm12x.mock.wheel_python VERSION [--patched] -m MODULE ARG ...
    python -m sm12x.mock.wheel_python VERSION -c CODE

which makes the tree of that release's wheel importable in this process
(sm12x.mock.serving.tree, the mock's own cache; the release's own library pins
first, sm12x.mock.wheels.pythonpath) and then runs the module or code as
`python -m`/`-c` would. What runs is the wheel's code as shipped; three things
stand in for what cannot load on a CPU machine without the whole runtime:

- `sglang` is registered as a bare package: its __init__ imports the whole
  runtime (CUDA kernels, the server);
- `sglang.benchmark.one_batch_server` is built from the real file's own
  source, but only the three names the profiler imports from it
  (DEFAULT_TIMEOUT and the two capacity guards `should_skip_due_to_*`), each
  compiled from that file as written: the rest of the module imports the HTTP
  server, ServerArgs and the profiler of the training stack;
- for the benchmark client (CLIENT), `torchvision`: the client imports
  sglang's runtime utilities and model configs, which import torchvision
  names at import time and never call them here (sm12x.selftest.env's
  placeholders; the real torchvision would pull a CUDA torch).

Which tree. The profiler runs the pristine one: no patch of the series touches
what it imports (PROFILER_FILES; tests/unit/test_wheel_python.py holds that),
so it needs no patching. The client imports files the series patches (0.5.17's
OpenAI protocol and tool-call detector, the test lists them), so bench passes
--patched: the tree
sm12x.patches.apply made, the one the image runs and the mock serves by
default (already in the cache when the mock started). tune and bench name this
module as a program, never import it (the mock is a leaf: pyproject's import
contracts).

A tree that cannot be had (offline without the wheel, no network, a bad
download, a series that does not apply) is one line on stderr, exit 2,
before anything of sglang runs.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import runpy
import subprocess
import sys
import types
import zipfile
from pathlib import Path

from sm12x.mock import forkserver

USAGE = (
    "usage: python -m sm12x.mock.wheel_python VERSION [--patched] (-m MODULE | -c CODE) [ARG ...]"
)
MODULE = "sm12x.mock.wheel_python"  # this module's name, also when run as __main__
# sglang's benchmark client (sm12x bench): the one module here that needs torchvision.
CLIENT = "sglang.benchmark.serving"
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


def site_for(version: str, patched: bool = False) -> tuple[Path, list[str]]:
    """(the release's site folder, pristine or patched, what goes first on sys.path for it)."""
    from sm12x.mock import serving, wheels

    try:
        return serving.tree(version, patched=patched), wheels.pythonpath(version)
    except wheels.Forbidden as exc:
        raise CannotHave(f"sglang {version} from its wheel: {exc}") from None
    except RuntimeError as exc:
        if "apply-patches" not in str(exc):
            raise _no_tree(version, exc) from None
        raise CannotHave(f"sglang {version}'s patched tree (the image's): {exc}") from None
    except (OSError, subprocess.CalledProcessError, zipfile.BadZipFile) as exc:
        raise _no_tree(version, exc) from None


def _no_tree(version: str, exc: BaseException) -> CannotHave:
    return CannotHave(
        f"this Python has no sglang, and sglang {version}'s wheel cannot stand in "
        f"for it ({exc}): run `sm12x mock-server --fetch --sglang-version {version}` "
        "once with the network, or pass --python with a Python that has sglang"
    )


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


def prepare(module: str) -> None:
    """What running `module` needs beyond the tree (the docstring's third point)."""
    if module == CLIENT:
        from sm12x.selftest.env import stub_torchvision

        stub_torchvision()
        # The client asks the Hub for the served model's config.json and, when it
        # cannot have it, goes on without it: from a machine without the Hub that
        # was 55 s of silent retries per run (docs/benchmarks.md). The mock serves
        # no model files and bench hands the client a tokenizer folder, so nothing
        # is to be had there.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


def forkserver_spec(version: str, patched: bool, module: str) -> dict:
    """What a zygote imports and runs for `module` (sm12x.mock.forkserver)."""
    args = {"version": version, "patched": patched, "module": module}
    return {"setup": f"{MODULE}:preload", "run": f"{MODULE}:run_module", "args": args}


def preload(version: str, patched: bool, module: str) -> None:
    """A zygote's import (sm12x.mock.forkserver): all that running `module` imports."""
    install(*site_for(version, patched))
    prepare(module)
    importlib.import_module(module)


def run_module(version: str, patched: bool, module: str, argv: list[str]) -> None:
    """`python -m module *argv` in a process where install() has run."""
    del version, patched  # install()'s: the zygote's key, or done by main()
    prepare(module)
    # A zygote imported it: run it afresh as __main__, as `python -m` would (its
    # imports stay), not as the module object runpy would warn about.
    sys.modules.pop(module, None)
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def main(argv: list[str]) -> int:
    patched = len(argv) > 1 and argv[1] == "--patched"
    if patched:
        argv = [argv[0], *argv[2:]]
    if len(argv) < 3 or argv[1] not in ("-m", "-c"):
        print(USAGE, file=sys.stderr)
        return 2
    version, how, what, rest = argv[0], argv[1], argv[2], argv[3:]
    try:
        site, first = site_for(version, patched)
        if how == "-m":
            # The test suite's many runs fork from one import (sm12x.mock.forkserver).
            served = forkserver.run(forkserver_spec(version, patched, what), rest)
            if served is not None:
                return served
        install(site, first)
    except CannotHave as exc:
        print(f"sm12x.mock.wheel_python: error: {exc}", file=sys.stderr)
        return 2
    if how == "-m":
        run_module(version, patched, what, rest)
    else:
        sys.argv = ["-c", *rest]
        exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
