"""sm12x: serve DeepSeek-V4-Flash-0731 + DSpark with SGLang on sm_120/sm_121.

Data flows one way: recipes/*.yaml -> sm12x.recipe (typed model) -> launch
command, compose service, verify expectations, bench references.

Importing the package does nothing: `__version__` is read from versions.env
when first asked for, so a subpackage that needs only the standard library
(sm12x.patches' apply, copied into the image) imports without it.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    if name == "__version__":
        from sm12x.versions import load_versions

        return load_versions()["SM12X_VERSION"]
    raise AttributeError(f"module 'sm12x' has no attribute {name!r}")
