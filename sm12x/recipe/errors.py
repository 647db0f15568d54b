"""The error a bad recipe raises: loading and linting both raise it, so it
lives below both (sm12x.recipe.load imports sm12x.recipe.lints, never the
other way round)."""

from __future__ import annotations

from sm12x.errors import UserError


class RecipeError(UserError):
    pass
