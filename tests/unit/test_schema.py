"""recipes/recipe.schema.json is what the model generates, and it accepts the recipes."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from sm12x.recipe import list_recipes
from sm12x.recipe.load import recipes_dir
from sm12x.recipe.schema import schema_path


@pytest.mark.parametrize("name", list_recipes())
def test_schema_accepts_each_recipe(name):
    schema = json.loads(schema_path().read_text())
    data = yaml.safe_load((recipes_dir() / f"{name}.yaml").read_text())
    jsonschema.validate(data, schema)


def test_schema_rejects_unknown_keys():
    schema = json.loads(schema_path().read_text())
    data = yaml.safe_load((recipes_dir() / "rtx-pro-6000-tp4.yaml").read_text())
    data["hardware"]["gpu_count"] = 4
    with pytest.raises(jsonschema.ValidationError, match="gpu_count"):
        jsonschema.validate(data, schema)


@pytest.mark.parametrize("name", list_recipes())
def test_recipe_points_editors_at_the_schema(name):
    first = (recipes_dir() / f"{name}.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=recipe.schema.json"
