"""Turning a recipe into a running sglang server.

render.build_launch(recipe, LaunchContext) -> LaunchPlan   argv/env, the one renderer
gpus.query_gpus() / gpus.pick_recipe()                     RECIPE=auto
main: `sm12x launch`, render_cmd: `sm12x render`, health: `sm12x healthcheck`
"""

from sm12x.launch.render import EnvRef, LaunchContext, LaunchPlan, build_launch

__all__ = ["EnvRef", "LaunchContext", "LaunchPlan", "build_launch"]
