"""Import sglang's serving and scheduler-side modules, for real, on a CPU machine.

Call `prepare()` in a fresh process whose sys.path starts with an unpacked
sglang tree (tests/support/trees.py), before the first sglang import. What it
does, and why nothing more is needed:

- torchvision is not installable here (every wheel within reach is a CUDA
  build: it fails to load against the CPU torch), yet sglang's import chain
  (`sglang.srt.configs`, `sglang.srt.multimodal`, `sglang.srt.utils.common`)
  names torchvision at import time. An import hook answers every
  `torchvision.*` import with an empty module whose attributes are inert
  placeholders; calling one raises, so nothing can silently run on a stub.
  Only image preprocessing uses torchvision; the code under test never does.
- transformers, which looks for torchvision once at import, must see none (or
  it would load its own image stack through the stub). Without torchvision it
  turns `AutoImageProcessor` into a placeholder that refuses `register`, which
  sglang calls at import to register its own VLM configs; the real class
  (importable without torchvision) is put back.

Where a working torchvision is installed, nothing is changed. Everything else
is the real package: sglang's other dependencies are in the test virtualenv
(pyproject.toml, the `test` extra).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types


class _Placeholder:
    """Any torchvision attribute: can be looked up (module-level defaults such as
    `InterpolationMode.BICUBIC`), never called."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, key: str):
        if key.startswith("__"):
            raise AttributeError(key)
        return _Placeholder(f"{self._name}.{key}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is a placeholder (no torchvision on this machine)")

    def __repr__(self) -> str:
        return f"<torchvision placeholder {self._name}>"


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, key: str):
        if key.startswith("__"):
            raise AttributeError(key)
        return _Placeholder(f"{self.__name__}.{key}")


class _TorchvisionFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def prepare() -> None:
    """Make `import sglang.srt...` work here; idempotent."""
    if any(isinstance(f, _TorchvisionFinder) for f in sys.meta_path):
        return
    if importlib.util.find_spec("torchvision") is not None:
        return  # a real (CPU) torchvision: nothing to stand in for
    import transformers
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()  # cached: transformers sees no torchvision
    from transformers.models.auto.image_processing_auto import AutoImageProcessor

    # transformers swaps its module object in sys.modules on import.
    sys.modules["transformers"].AutoImageProcessor = AutoImageProcessor
    del transformers
    sys.meta_path.insert(0, _TorchvisionFinder())
