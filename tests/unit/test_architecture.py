"""docs/architecture.md against the tree and the import contracts: every
package and module of sm12x and verify is named there, nothing it names is
missing, and every contract pyproject.toml gives import-linter is quoted."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text()


def modules() -> set[str]:
    """Dotted names of every module and package, private ones and __main__ left out."""
    found = set()
    for top in ("sm12x", "verify"):
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts[-1] in ("__main__",) or any(p.startswith("_") for p in parts):
                continue
            found.add(".".join(parts))
    return found


def named(module: str) -> bool:
    """Named in full (`sm12x.recipe`), or as `leaf` in its package's paragraph."""
    if f"`{module}`" in DOC:
        return True
    package, _, leaf = module.rpartition(".")
    if not package:
        return False
    for paragraph in DOC.split("\n\n"):
        if f"`{package}`" in paragraph and re.search(rf"`{re.escape(leaf)}`", paragraph):
            return True
    # verify.checks.basic is written `checks.basic` in verify's paragraph.
    top, _, rest = module.partition(".")
    return any(f"`{top}`" in p and f"`{rest}`" in p for p in DOC.split("\n\n"))


def test_every_module_is_named():
    missing = sorted(m for m in modules() if not named(m))
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_every_dotted_name_in_the_doc_exists():
    written = set(re.findall(r"`((?:sm12x|verify)(?:\.\w+)+)`", DOC))
    assert written, "the doc names no module in full"
    stale = sorted(w for w in written if w not in modules())
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"


def test_every_import_contract_is_quoted():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = [c["name"] for c in config["tool"]["importlinter"]["contracts"]]
    assert names
    missing = [n for n in names if f'"{n}"' not in DOC]
    assert not missing, f"contracts not in docs/architecture.md: {missing}"
