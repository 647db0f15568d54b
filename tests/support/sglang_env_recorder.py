"""Import sglang's server modules under an os.environ that records every name read.

Run as a script, in a process whose PYTHONPATH holds one track's sglang tree
(tests/unit/test_sglang_tree.py): `python sglang_env_recorder.py OUT MODULE...`.
os.environ is replaced, before anything of sglang imports, by a subclass of
its own class whose `__getitem__` (what `get`, `in`, `os.getenv` and `[]` all
end in) records the name with the file of the first caller outside os and
collections.abc. Reads made while iterating the whole environment (a copy of
it) are not reads of a name and are left out. OUT gets, as JSON, each module's
import error (if any) and the names read from sglang's own files.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import traceback
import types

SKIPPED_FILES = (os.__file__, "_collections_abc.py", "<frozen os>", "<frozen _collections_abc>")


class RecordingEnviron(type(os.environ)):  # type: ignore[misc]
    """os.environ, recording each name read and who read it."""

    reads: dict[str, str] = {}

    def __getitem__(self, key):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.endswith(SKIPPED_FILES):
            if frame.f_code.co_name in ("__iter__", "copy", "items", "values"):
                return super().__getitem__(key)  # the whole environment, not a name
            frame = frame.f_back
        if frame is not None:
            RecordingEnviron.reads.setdefault(str(key), frame.f_code.co_filename)
        return super().__getitem__(key)


def install() -> None:
    recording = RecordingEnviron.__new__(RecordingEnviron)
    recording.__dict__.update(os.environ.__dict__)
    os.environ = recording  # type: ignore[assignment]  # noqa: B003 - replaced, not cleared


class _StubMeta(type):
    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(name)

    def __getitem__(cls, key):
        return cls


def _stub_class(name: str) -> type:
    return _StubMeta(name, (), {"__init__": lambda self, *a, **k: None,
                                "__call__": lambda self, *a, **k: None})  # fmt: skip


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(name)


# What sglang calls of a stubbed package at import: the standard library's own.
KNOWN = {"uvloop": {"EventLoopPolicy": asyncio.DefaultEventLoopPolicy,
                    "new_event_loop": asyncio.new_event_loop, "install": lambda: None}}  # fmt: skip


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Packages this host lacks (uvloop, torchvision: the GPU image has them),
    as empty modules: they read no environment of sglang's."""

    names: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__dict__.update(KNOWN.get(spec.name, {}))
        return module

    def exec_module(self, module) -> None:
        return None


def _import(name: str) -> str | None:
    """Import `name`, stubbing each missing package; the error, if any other."""
    for _ in range(40):
        try:
            importlib.import_module(name)
            return None
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            if not missing or missing in _StubFinder.names or missing == "sglang":
                return traceback.format_exc(limit=3)[-1500:]
            _StubFinder.names.add(missing)
            for loaded in [m for m in sys.modules if m == name or m.startswith("sglang")]:
                sys.modules.pop(loaded, None)
        except BaseException:  # noqa: BLE001 - reported; the reads so far still count
            return traceback.format_exc(limit=3)[-1500:]
    return "too many missing packages"


def main(out: str, modules: list[str]) -> None:
    install()
    sys.meta_path.insert(0, _StubFinder())
    errors = {}
    for name in modules:
        error = _import(name)
        if error is not None:
            errors[name] = error
    sglang_root = os.path.dirname(importlib.util.find_spec("sglang").origin)  # type: ignore[union-attr]
    reads = {
        name: os.path.relpath(path, os.path.dirname(sglang_root))
        for name, path in RecordingEnviron.reads.items()
        if os.path.abspath(path).startswith(sglang_root + os.sep)
    }
    with open(out, "w", encoding="utf-8") as handle:
        result = {"errors": errors, "reads": reads, "stubbed": sorted(_StubFinder.names)}
        json.dump(result, handle, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
