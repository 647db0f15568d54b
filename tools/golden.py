"""Golden launch commands: what each recipe renders to inside its container.

tests/golden/ holds them; they are only ever rewritten on purpose, by
`python -m tools.regen` (its `goldens` entry), so every change to a rendered
command shows up as a reviewed diff. tests/unit/test_golden.py renders each
recipe again per node rank.
"""

from __future__ import annotations

from pathlib import Path

from sm12x.launch.plan import build_launch
from sm12x.launch.render import LaunchContext
from sm12x.recipe import Recipe, load_all

ROOT = Path(__file__).resolve().parents[1]

GOLDEN_DIR = ROOT / "tests" / "golden"
# The head address used in multi-node goldens (a documentation-style address).
HEAD_ADDR = "192.168.100.1"


def context(recipe: Recipe, node_rank: int) -> LaunchContext:
    """The context compose gives the container (see compose.yaml)."""
    host_env = {
        name: var.example for name, var in recipe.env.items() if var.from_host and var.example
    }
    return LaunchContext(
        node_rank=node_rank if recipe.is_multinode else None,
        head_addr=HEAD_ADDR if recipe.is_multinode else None,
        model_path="/model",
        host="127.0.0.1" if recipe.container.host_network else "0.0.0.0",
        api_key=True,
        cache_dir="/cache",
        host_env=host_env,
    )


def render(recipe: Recipe, node_rank: int) -> str:
    plan = build_launch(recipe, context(recipe, node_rank))
    header = (
        f"# Golden: recipes/{recipe.name}.yaml rendered as in its compose service"
        + (f", node {node_rank}" if recipe.is_multinode else "")
        + ".\n# Regenerate with scripts/regen; review the diff.\n"
    )
    return header + plan.shell()


def goldens() -> dict[Path, str]:
    files = {}
    for recipe in load_all():
        if recipe.is_multinode:
            for rank in range(recipe.hardware.nodes):
                files[GOLDEN_DIR / f"{recipe.name}.node{rank}.sh"] = render(recipe, rank)
        else:
            files[GOLDEN_DIR / f"{recipe.name}.sh"] = render(recipe, 0)
    return files
