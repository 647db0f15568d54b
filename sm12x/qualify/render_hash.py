"""The recipe hash: sha256 over what the recipe renders (the launch plan's argv
and environment, per node, on every track), not over its status, notes or
references. A recipe whose render changes gets a new hash, so a bundle stops
vouching for it; editing `status` or a `why` does not."""

from __future__ import annotations

import hashlib
import json

from sm12x.launch.plan import build_launch
from sm12x.launch.render import LaunchContext
from sm12x.recipe import Recipe
from sm12x.versions import tracks


def rendered(recipe: Recipe) -> dict:
    out: dict = {}
    for track in tracks():
        nodes = []
        for rank in range(recipe.hardware.nodes):
            context = LaunchContext(
                node_rank=rank if recipe.hardware.nodes > 1 else None,
                head_addr="$SM12X_HEAD_ADDR" if recipe.hardware.nodes > 1 else None,
                track=track,
            )
            plan = build_launch(recipe, context)
            nodes.append({"argv": plan.argv(), "env": plan.env_dict()})
        out[track] = nodes
    return out


def recipe_hash(recipe: Recipe) -> str:
    text = json.dumps(rendered(recipe), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
