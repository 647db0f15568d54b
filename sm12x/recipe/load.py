"""Find, parse and validate recipes, with one clear error line per problem.

load_recipe() is what every consumer calls: it returns a Recipe that passed
the schema and every error-level lint, or raises RecipeError (a UserError)
naming the file, the key and what to do.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from sm12x import bounded
from sm12x.paths import data_path
from sm12x.recipe.errors import RecipeError
from sm12x.recipe.lints import raise_on_errors
from sm12x.recipe.model import RECIPE_NAME_MAX, RECIPE_NAME_PATTERN, Recipe

SUFFIX = ".yaml"
__all__ = ["RecipeError", "list_recipes", "load_all", "load_recipe", "recipe_path"]


def recipes_dir() -> Path:
    return data_path("recipes")


def list_recipes() -> list[str]:
    """Names of the shipped recipes, sorted."""
    return sorted(p.stem for p in recipes_dir().glob(f"*{SUFFIX}"))


def _shown(text: str) -> str:
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def _is_file(path: Path, text: str) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        reason = getattr(exc, "strerror", None) or exc
        raise RecipeError(f"recipe {_shown(text)!r} cannot be opened: {reason}") from None


def recipe_path(name_or_path: str | Path) -> Path:
    """A shipped recipe by name, or any recipe file by path."""
    text = str(name_or_path)
    if text.endswith((".yaml", ".yml")) or "/" in text:
        path = Path(text)
        if not _is_file(path, text):
            raise RecipeError(f"recipe file {_shown(text)} does not exist")
        return path
    if not re.fullmatch(RECIPE_NAME_PATTERN, text) or len(text) > RECIPE_NAME_MAX:
        raise RecipeError(
            f"no recipe named {_shown(text)!r}: a recipe name is lowercase letters, digits and "
            f"'-', at most {RECIPE_NAME_MAX} characters; choose one of "
            f"{', '.join(list_recipes())} or give a path to a .yaml file"
        )
    path = recipes_dir() / f"{text}{SUFFIX}"
    if not _is_file(path, text):
        raise RecipeError(
            f"no recipe named {text!r}: choose one of {', '.join(list_recipes())} "
            "or give a path to a .yaml file"
        )
    return path


# A recipe is a few KB of YAML, four levels deep: far larger or deeper is
# not a recipe (a 200 MB file took minutes and GBs to refuse; deep nesting
# ended in RecursionError).
MAX_BYTES = 256 * 1024
MAX_DEPTH = 16


def read_text(path: Path, source: str) -> str:
    try:
        return bounded.read_text(path, MAX_BYTES)
    except bounded.TooBig as exc:
        raise RecipeError(f"{source}: not a recipe file ({exc})") from None
    except UnicodeDecodeError as exc:
        raise RecipeError(
            f"{source}: not UTF-8 text (byte {exc.start} is 0x{exc.object[exc.start]:02x}): "
            "save the recipe as UTF-8"
        ) from None
    except OSError as exc:
        raise RecipeError(f"{source}: cannot be read ({exc.strerror or exc})") from None


# --- YAML -----------------------------------------------------------------


# libyaml's parser (in every PyYAML wheel) with PyYAML's safe constructor: the
# same documents and marks as the pure-Python SafeLoader, at about a tenth of its
# CPU; every `sm12x` command and the test suite parse the ten recipes many times.
_SAFE_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SAFE_LOADER):  # type: ignore[misc,valid-type]
    """SafeLoader that refuses a key written twice in one mapping.

    Plain PyYAML keeps the last value silently; in a recipe that would let a
    flag be written twice with only one of them taking effect.
    """


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep=False):
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"key {key!r} is written twice (lines {seen[key]} and {line}); keep one",
                key_node.start_mark,
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def _check_shape(text: str, source: str) -> None:
    """Depth and aliases from the event stream (flat, no recursion) before
    the composer recurses: deeper than MAX_DEPTH, or any alias (a recipe
    needs none; nested aliases multiply a small file into a huge document),
    is refused."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_UniqueKeyLoader):  # noqa: S506 (a SafeLoader)
            if isinstance(event, yaml.AliasEvent):
                raise RecipeError(
                    f"{source}:{event.start_mark.line + 1}: a YAML alias (*name): "
                    "write the value out, recipes use no anchors"
                )
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _too_deep(f"{source}:{event.start_mark.line + 1}")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError as exc:
        # libyaml scans ahead of a possible simple key: brackets opened a thousand
        # times stop its scanner before the events reach MAX_DEPTH. Deep either way.
        if "maximum nesting depth" in str(getattr(exc, "problem", "")):
            raise _too_deep(source) from None
        raise


def _too_deep(where: str) -> RecipeError:
    return RecipeError(f"{where}: nested more than {MAX_DEPTH} levels deep: not a recipe")


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        _check_shape(text, source)
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise RecipeError(f"{where}: not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: a recipe is a YAML mapping (name:, hardware:, ...)")
    return data


# --- validation -------------------------------------------------------------


def _model_at(loc: tuple, model: type[BaseModel]) -> type[BaseModel] | None:
    """The pydantic model that owns the key at loc (for 'allowed keys' hints)."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            # list index or dict key: step into the item model
            continue
        fields = getattr(current, "model_fields", {})
        field = fields.get(part)
        if field is None:
            # a dict key such as a flag name: its value model is the annotation's
            continue
        current = _inner_model(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    from typing import get_args

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def format_validation_error(exc: ValidationError, source: str) -> str:
    parts = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        if error["type"] == "extra_forbidden":
            owner = _model_at(loc, Recipe)
            allowed = ", ".join(owner.model_fields) if owner else "see recipes/recipe.schema.json"
            parts.append(f"{where}: unknown key (allowed here: {allowed})")
        elif error["type"] == "missing":
            parts.append(f"{where}: required key is missing")
        else:
            message = error["msg"].removeprefix("Value error, ")
            parts.append(f"{where}: {message}")
    return f"{source}: " + "; ".join(parts)


def validate_recipe(data: dict[str, Any], source: str) -> Recipe:
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(format_validation_error(exc, source)) from None


def load_recipe(name_or_path: str | Path, *, lint: bool = True) -> Recipe:
    """Load a recipe by name (rtx-pro-6000-tp4) or path, validated and linted.

    Raises RecipeError on unreadable YAML, schema errors, a name that does
    not match the file, or (with lint=True) any error-level lint. Warnings
    are not raised: get them with sm12x.recipe.lints.lint_recipe().
    """
    path = recipe_path(name_or_path)
    source = _display(path)
    recipe = validate_recipe(parse_yaml(read_text(path, source), source), source)
    if (
        path.suffix in (".yaml", ".yml")
        and path.parent == recipes_dir()
        and recipe.name != path.stem
    ):
        raise RecipeError(
            f"{source}: name is {recipe.name!r} but the file is {path.name}: make them the same"
        )
    if lint:
        raise_on_errors(recipe, source)
    return recipe


def load_all() -> list[Recipe]:
    return [load_recipe(name) for name in list_recipes()]


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
