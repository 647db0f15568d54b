"""argparse types and checks shared by verify, bench and doctor: one clear
error for a value that would turn a limit off or fail later with a traceback
(`--timeout nan` disables every comparison, `inf` overflows a deadline, an
unwritable report path only fails after the whole run)."""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from pathlib import Path


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A finite number of seconds above 0."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive (seconds), got {text!r}")
    return value


def non_negative(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def fraction(text: str) -> float:
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text!r}")
    return value


def count(text: str) -> int:
    """A whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def writable_file(path: Path) -> str | None:
    """None if path can be written, else why not. Makes its folder and writes a
    probe file there: permission bits say nothing to root or on a read-only mount."""
    if path.is_dir():
        return f"{path} is a folder; give a file name"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".sm12x-probe-"):
            pass
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    if path.exists() and not os.access(path, os.W_OK):
        return f"cannot overwrite {path} (permission denied)"
    return None


def writable_folder(path: Path) -> str | None:
    """None if files can be written in path (made if need be), else why not."""
    if path.exists() and not path.is_dir():
        return f"{path} exists and is not a folder"
    return writable_file(path / "probe")
