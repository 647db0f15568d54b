"""Recipes: one YAML file per rig, the single source of truth for its flags.

Public API (other modules and engineers use these, not the submodules):

    load_recipe(name_or_path) -> Recipe      validated and linted, or RecipeError
    list_recipes() -> list[str]              names of the shipped recipes
    load_all() -> list[Recipe]
    lint_recipe(recipe) -> list[Finding]     errors and warnings
    Recipe, Reference, Verify, ...           the typed model (sm12x.recipe.model)
"""

from sm12x.recipe.lints import Finding, lint_recipe, warnings_for
from sm12x.recipe.load import RecipeError, list_recipes, load_all, load_recipe, recipe_path
from sm12x.recipe.model import (
    DSpark,
    EnvVar,
    Flag,
    Hardware,
    Model,
    Recipe,
    Reference,
    Status,
    Verify,
)

__all__ = [
    "DSpark",
    "EnvVar",
    "Finding",
    "Flag",
    "Hardware",
    "Model",
    "Recipe",
    "RecipeError",
    "Reference",
    "Status",
    "Verify",
    "lint_recipe",
    "list_recipes",
    "load_all",
    "load_recipe",
    "recipe_path",
    "warnings_for",
]
