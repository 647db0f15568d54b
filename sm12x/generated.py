"""Files generated from code (JSON Schemas): print them, or --write them in place.

scripts/regen calls each generator with --write; the tests compare the
committed file with a fresh generation and never rewrite it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def main(argv: list[str], generate: Callable[[], str], path: Path, prog: str) -> int:
    if argv == ["--write"]:
        path.write_text(generate(), encoding="utf-8")
        print(f"wrote {path}")
        return 0
    if argv == []:
        sys.stdout.write(generate())
        return 0
    print(f"usage: python -m {prog} [--write]", file=sys.stderr)
    return 2
