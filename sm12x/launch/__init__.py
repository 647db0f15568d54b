"""Turning a recipe into a running sglang server.

plan.plan(loaded, command=...) -> LaunchPlan     the launch plan, built once
plan.deployment(recipe, track, image)             a deployment's plan (compose, k8s)
plan.build_launch(recipe, LaunchContext)          the render alone (render.render)
gpus.query_gpus() / gpus.pick_recipe()            RECIPE=auto
main: `sm12x launch`, render_cmd: `sm12x render` (registered by
sm12x.deploy.render_k8s with its --k8s form), health: `sm12x healthcheck`
"""

from sm12x.launch.plan import LaunchPlan, build_launch
from sm12x.launch.render import EnvRef, LaunchContext

__all__ = ["EnvRef", "LaunchContext", "LaunchPlan", "build_launch"]
