"""How many tests the suite has: pytest's own count (`pytest --collect-only`),
written into README.md's test-count block by `python -m tools.regen --only
test-count`, so the figure a reader sees is the suite's, not a past run's.

Collected in a child pytest from the repository root, with every plugin the
suite loads (its parametrisation is what counts): all tiers, nothing run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- test-count: [^>]*-->\n)(.*?)(<!-- /test-count -->)", re.DOTALL)
COLLECTED = re.compile(r"^(\d+) tests? collected", re.MULTILINE)


def count() -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SM12X_TIER"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    found = COLLECTED.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(
            "pytest --collect-only failed (exit "
            f"{done.returncode}): {(done.stdout + done.stderr)[-2000:]}"
        )
    return int(found[1])


def sentence(n: int) -> str:
    return f"The suite has **{n:,} tests** (`pytest --collect-only`, all tiers).\n"


def replace_block(text: str, n: int | None = None) -> str:
    if not BLOCK.search(text):
        raise RuntimeError("README.md has no <!-- test-count: ... --> block")
    body = sentence(count() if n is None else n)
    return BLOCK.sub(lambda m: m[1] + body + m[3], text, count=1)
