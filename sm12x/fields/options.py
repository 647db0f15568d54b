"""argparse types over sm12x.fields' value types (verify, bench, tune, doctor),
and the paths an option names, refused before the run, not after it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from sm12x.errors import UserError
from sm12x.fields.values import Count, Fraction, NonNegativeFloat, PositiveFloat, parse

# --- argparse types over the value types above (verify, bench, tune, doctor)


def seconds(text: str) -> float:
    """A finite number of seconds above 0."""
    return _option(PositiveFloat, text)


def non_negative(text: str) -> float:
    return _option(NonNegativeFloat, text)


def fraction(text: str) -> float:
    return _option(Fraction, text)


def count(text: str) -> int:
    """A whole number, 1 or more."""
    return _option(Count, text)


def _option(kind: Any, text: str) -> Any:
    import argparse

    try:
        return parse(kind, text, "value")
    except UserError as exc:
        raise argparse.ArgumentTypeError(exc.message.removeprefix("value=")) from None


# --- paths an option names: refused before the run, not after it


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
