"""Every environment variable each track's sglang reads, found in its whole tree.

The launcher (sm12x.launch_env) refuses a caller's variable that
sglang reads unless the recipe, the settings or the allowlist give it; which
variables sglang reads comes from here, read from each track's wheel (never
from memory) by tests/support/sglang_tree.py (the forms it finds: its
scanner, tests/support/sglang_scan.py) and written to
sm12x/launch/sglang_env.json (`python -m tools.regen --only sglang-env-reads`).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import sglang_tree

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "sm12x" / "launch" / "sglang_env.json"


def reads_of(inventory: sglang_tree.Inventory) -> dict[str, str]:
    """name -> its first place (path:line), as the launcher shows it."""
    return {n: w.partition(" ")[0] for n, w in sorted(inventory.reads.items())}


def reads(version: str) -> dict[str, str]:
    """Every variable one sglang release reads, with its first place (path:line)."""
    return reads_of(sglang_tree.of_version(version))


def versions() -> list[str]:
    return sglang_tree.versions()


def render() -> dict[Path, str]:
    data = {v: reads(v) for v in versions()}
    return {OUT: json.dumps(data, indent=1, sort_keys=True) + "\n"}
