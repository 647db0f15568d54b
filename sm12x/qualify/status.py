"""A recipe's `verified` follows from bundles: results/RECIPE/*/result.json (JSON
and PNG only) passing `qualify --check --for-verified` for that recipe."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from sm12x.qualify import check
from sm12x.qualify.bundle import RESULT
from sm12x.recipe import Recipe


def bundles(results: Path, recipe: str) -> list[Path]:
    folder = results / recipe
    return sorted(p.parent for p in folder.glob(f"*/{RESULT}")) if folder.is_dir() else []


def stray_files(results: Path) -> list[str]:
    if not results.is_dir():
        return []
    return [
        str(p.relative_to(results))
        for p in sorted(results.rglob("*"))
        if p.is_file() and p.suffix not in (".json", ".png")
    ]


def problems(recipes: Iterable[Recipe], results: Path) -> list[str]:
    out = [f"{results.name}/{name}: only JSON and PNG belong here" for name in stray_files(results)]
    for recipe in recipes:
        if recipe.status.state != "verified":
            continue
        found = bundles(results, recipe.name)
        if not found:
            out.append(
                f"{recipe.name}: status verified, but no bundle under {results.name}/{recipe.name}/ "
                "(run `sm12x qualify` on the rig and submit its bundle)"
            )
            continue
        why = {b.name: check.problems(b, for_verified=True) for b in found}
        if all(why.values()):
            first = next(iter(why.items()))
            out.append(
                f"{recipe.name}: status verified, but no bundle passes --check --for-verified "
                f"({first[0]}: {first[1][0]})"
            )
    return out
