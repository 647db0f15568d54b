"""Importing the real sglang/flashinfer modules on a machine without a GPU."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path


class _Placeholder(type):
    """A stand-in class: any attribute is another stand-in (sglang's OCR configs
    read `torchvision.transforms.InterpolationMode.BICUBIC` at import)."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(name, (), {})


class _StubModule(types.ModuleType):
    """torchvision or one of its submodules: any name is a stand-in class."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _Placeholder(name, (), {})
        setattr(self, name, value)
        return value


class _TorchvisionStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `torchvision` and every `torchvision.*` as a stub package, with a
    real ModuleSpec (transformers asks importlib.util.find_spec about it)."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"
        return module

    def exec_module(self, module):
        module.decode_jpeg = lambda *args, **kwargs: None


def stub_torchvision() -> None:
    """sglang's import chain needs torchvision to exist (`torchvision.io.decode_jpeg`;
    with transformers installed, also its image-processor registrations and
    `torchvision.transforms` names) but never runs it here. Installing torchvision
    would drag in a CUDA torch, so where it is missing an import hook stands in:
    every `torchvision.*` module is a stub whose names are placeholder classes.
    Where the real torchvision is installed (the image) it is left alone."""
    if any(isinstance(f, _TorchvisionStub) for f in sys.meta_path):
        return
    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        return
    sys.meta_path.insert(0, _TorchvisionStub())


def flashinfer_package() -> Path:
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.origin:
        raise RuntimeError("flashinfer is not installed")
    return Path(spec.origin).parent


def installed_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("sglang", "flashinfer-python", "torch")}
