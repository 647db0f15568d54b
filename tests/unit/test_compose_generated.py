"""compose.yaml and .env.example as the generators write them (tools/regen.py's
`compose` and `env-example`; test_generated holds the files to them, and
tests/integration/test_compose.py runs the real Compose binary on every profile)."""

from __future__ import annotations

import re

import pytest
import yaml

from sm12x.deploy import compose_yaml, env_example
from sm12x.deploy.compose import profiles
from sm12x.recipe import load_all
from sm12x.settings import Settings, env_name, meta

RECIPES = load_all()
TEXT = compose_yaml.render(RECIPES)


def test_every_profile_of_every_recipe_is_a_service():
    services = yaml.safe_load(TEXT)["services"]
    for recipe in RECIPES:
        for profile in profiles(recipe):
            assert services[profile]["profiles"] == [profile]
            assert services[profile]["environment"]["SM12X_RECIPE"] == recipe.name


def test_env_example_lists_what_compose_reads_and_nothing_else():
    text = env_example.render(RECIPES, TEXT)
    written = re.findall(r"(?m)^([A-Z_][A-Z0-9_]*)=", text)
    assert written == list(dict.fromkeys(written))  # each once
    assert set(written) == {"COMPOSE_PROFILES", *compose_yaml.variables(TEXT)}


def test_every_sm12x_variable_there_is_a_setting_under_its_one_name():
    names = {env_name(n) for n in Settings.model_fields}
    old = {o for n in Settings.model_fields for o in meta(n).old}
    for name in compose_yaml.variables(TEXT):
        assert name not in old, name
        if name.startswith("SM12X_") and name not in env_example.COMPOSE_ONLY:
            assert name in names, name


def test_a_variable_compose_reads_that_nothing_describes_stops_the_generator():
    with pytest.raises(ValueError, match="SM12X_SOMETHING_NEW: add each to a section"):
        env_example.render(RECIPES, TEXT + "\n# ${SM12X_SOMETHING_NEW:-}\n")


def test_the_template_has_every_mark_once():
    text = compose_yaml.TEMPLATE.read_text()
    for mark in ("@RIG_SERVICES@", "@X_SM12X@", "@GENERATED@"):
        assert text.count(mark) == 1, mark
    assert not re.search(r"@[A-Z_]+@", TEXT)
