"""sm12x: serve DeepSeek-V4-Flash-0731 + DSpark with SGLang on sm_120/sm_121.

Data flows one way: recipes/*.yaml -> sm12x.recipe (typed model) -> launch
command, compose service, verify expectations, bench references.
"""

from sm12x.versions import load_versions

__version__ = load_versions()["SM12X_VERSION"]
