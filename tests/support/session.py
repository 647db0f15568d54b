"""What this pytest session collected, for a test whose claim is about the suite
itself: tests/unit/test_doc_commands.py's InSuite commands (`scripts/test`,
`scripts/test tests/...py`, `-m kernels`) hold only when this session runs what
the command would.

tests/conftest.py records the test files that skip themselves at import (tests/gpu
without a CUDA GPU): such a file has no items, yet a whole session did collect it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Test files (relative to the repository) whose collection reported a skip.
skipped_files: set[str] = set()


def missing(entries: tuple[str, ...], items: list, markers: list[str]) -> list[str]:
    """The entries this session's `items` do not cover. An entry is a test file,
    `file::test` (each parametrization counts), a folder ending in `/` (every
    test file under it, or its import-time skip) or `-m MARKER`. An entry that
    names what the checkout lacks (a file, a test function, a marker) is an
    AssertionError: the claim would be false in every session."""
    ids = [item.nodeid for item in items]
    files = {i.split("::", 1)[0] for i in ids}
    out = []
    for entry in entries:
        if entry.startswith("-m "):
            marker = entry[3:]
            assert any(m.split(":", 1)[0].strip() == marker for m in markers), (
                f"{entry}: no such marker in pyproject.toml"
            )
            found = any(item.get_closest_marker(marker) for item in items)
        elif entry.endswith("/"):
            wanted = {str(p.relative_to(ROOT)) for p in (ROOT / entry).rglob("test_*.py")}
            assert wanted, f"{entry}: no test file there"
            found = wanted <= files | skipped_files
        else:
            path, _, name = entry.partition("::")
            assert (ROOT / path).is_file(), f"{entry}: no such file"
            if name:
                assert re.search(
                    rf"^\s*(?:async\s+)?def {re.escape(name)}\(", (ROOT / path).read_text(), re.M
                ), f"{entry}: {path} defines no {name}"
                found = any(i == entry or i.startswith(entry + "[") for i in ids)
            else:
                found = path in files
        if not found:
            out.append(entry)
    return out
