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


RESULTS = Path(__file__).resolve().parents[2] / "results"


def _recipe_name(bundle: Path) -> str | None:
    import json

    try:
        return json.loads((bundle / RESULT).read_text())["recipe"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _hash(bundle: Path) -> str | None:
    import json

    try:
        return json.loads((bundle / RESULT).read_text())["recipe"]["hash"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def evidence(recipe: Recipe, results: Path = RESULTS) -> tuple[bool, str | None]:
    """(a bundle here backs `verified` for the recipe's current render, the measured
    throughput of the newest bundle that passes --check, as a table cell's text)."""
    import json

    from sm12x.qualify.render_hash import recipe_hash

    backed, measured = False, None
    current = recipe_hash(recipe)
    for bundle in reversed(bundles(results, recipe.name)):
        # A bundle vouches for the render it measured: this recipe's, as given now.
        if _recipe_name(bundle) != recipe.name or _hash(bundle) != current:
            continue
        if check.problems(bundle):
            continue
        backed = backed or not check.problems(bundle, for_verified=True)
        if measured is None:
            data = json.loads((bundle / RESULT).read_text())
            runs = [
                r
                for s in data["steps"]
                if s["kind"] == "bench" and s["verdict"] == "pass"
                for r in s["runs"]
            ]
            if runs:
                figures = ", ".join(
                    f"C{r['concurrency']} {r['figures']['output_tokens_per_s']:,.0f}" for r in runs
                )
                mock = " (mock)" if data["provenance"]["mock"] else ""
                measured = f"measured{mock}: {figures} ([{bundle.name}](results/{recipe.name}/{bundle.name}))"
    return backed, measured
