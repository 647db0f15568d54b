"""Importing the real sglang/flashinfer modules on a machine without a GPU."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path


def stub_torchvision() -> None:
    """sglang's import chain needs `torchvision.io.decode_jpeg` to exist, nothing
    more. Installing torchvision would drag in a CUDA torch, so where it is
    missing a stub module stands in; where it is installed it is left alone."""
    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        return
    torchvision = types.ModuleType("torchvision")
    io = types.ModuleType("torchvision.io")
    io.decode_jpeg = lambda *args, **kwargs: None
    torchvision.io = io
    sys.modules["torchvision"] = torchvision
    sys.modules["torchvision.io"] = io


def flashinfer_package() -> Path:
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.origin:
        raise RuntimeError("flashinfer is not installed")
    return Path(spec.origin).parent


def installed_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("sglang", "flashinfer-python", "torch")}
