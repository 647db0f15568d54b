"""Every flag and SGLANG_* variable a recipe renders exists in the sglang
releases the image can carry (those the patch series applies to, every track's
among them), read from the real wheels (tools/sglang_cli.py: 0.5.23's
real parser, the older ones' source). A typo, a renamed flag or a value outside
sglang's choices fails here, not at boot on the rig. On 0.5.23 nothing the
recipes render is renamed or removed; the variables the lints refuse are not
read there at all (0.5.16-0.5.18 still name them to warn)."""

from __future__ import annotations

import pytest

from sm12x.launch.plan import build_launch
from sm12x.launch.render import CACHE_ENV, EnvRef
from sm12x.mock import wheels
from sm12x.recipe import load_all
from sm12x.recipe.lints import (
    CANONICAL_FLAGS,
    DEPRECATED_SINCE,
    DERIVED_ENV,
    DERIVED_FLAGS,
    FEATURE_SINCE,
    RETIRED_ENV,
    _release,
)
from sm12x.recipe.tracks import recipe_tracks
from sm12x.versions import load_versions
from tools import golden
from tools.sglang_cli import env_vars, server_flags

VERSIONS = sorted({v for patch in wheels.patch_series()["patch"] for v in patch["sglang"]})
PLANS = [
    build_launch(recipe, golden.context(recipe, rank))
    for recipe in load_all()
    for rank in range(recipe.hardware.nodes)
]


def versions_of(recipe) -> list[str]:
    """The releases a recipe is held to: every checked one, or its tracks' sglang."""
    if recipe.tracks is None:
        return VERSIONS
    return sorted({load_versions(t)["SGLANG_VERSION"] for t in recipe_tracks(recipe)})


PAIRS = [(version, plan) for plan in PLANS for version in versions_of(plan.recipe)]


def test_every_track_s_sglang_is_among_the_checked_versions():
    from sm12x.versions import load_versions, tracks

    for track in tracks():
        assert load_versions(track)["SGLANG_VERSION"] in VERSIONS, track


@pytest.mark.parametrize(
    "version, plan",
    PAIRS,
    ids=[f"{v}-{p.recipe.name}-node{p.context.node_rank or 0}" for v, p in PAIRS],
)
def test_sglang_accepts_every_rendered_flag(version, plan):
    flags = server_flags(version)
    for arg in plan.args:
        spec = flags.get(arg.flag)
        assert spec is not None, f"sglang {version} has no {arg.flag}"
        assert not spec.deprecated, f"{arg.flag} is deprecated in sglang {version}"
        if spec.switch is True:
            assert arg.value is None, f"{arg.flag} is a switch in sglang {version}"
        elif spec.switch is False:
            assert arg.value is not None, f"{arg.flag} takes a value in sglang {version}"
        if spec.choices is not None and not isinstance(arg.value, EnvRef):
            assert arg.value in spec.choices, f"{arg.flag} {arg.value}: not in {spec.choices}"


@pytest.mark.parametrize("version", VERSIONS)
def test_sglang_reads_every_sglang_variable_the_recipes_set(version):
    declared, retired = env_vars(version)
    for plan in PLANS:
        if version not in versions_of(plan.recipe):
            continue
        for env in plan.env:
            # The cache locations (render.CACHE_ENV) are set for every release: one
            # image ENV serves both tracks, and a release ignores the other's name.
            if env.name.startswith("SGLANG_") and env.name not in CACHE_ENV:
                assert env.name not in retired, (
                    f"{env.name}: {retired[env.name]} (sglang {version})"
                )
                assert env.name in declared, f"sglang {version} does not read {env.name}"


@pytest.mark.parametrize("version", VERSIONS)
def test_lint_tables_name_real_flags_and_variables(version):
    flags = server_flags(version)
    _, retired = env_vars(version)
    for name in DERIVED_FLAGS:
        assert name in flags, name
    for canonical in CANONICAL_FLAGS.values():
        assert canonical in flags, canonical
    declared, _ = env_vars(version)
    for name in RETIRED_ENV:
        # Renamed or removed: sglang says so (0.5.16-0.5.18), or no longer reads it.
        assert name in retired or name not in declared, name
    assert "SGLANG_SM120_FLASHMLA_BACKEND" in env_vars(version)[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_feature_table_is_what_each_release_has(version):
    """lints.FEATURE_SINCE / DEPRECATED_SINCE, read against the wheels: a feature is
    there exactly from its release on, a deprecation exactly from its release on."""
    flags = server_flags(version)
    declared, _ = env_vars(version)
    for (name, value), (since, _what) in FEATURE_SINCE.items():
        if name.startswith("--"):
            spec = flags.get(name)
            if value is None:
                present = spec is not None
            else:
                assert spec is not None and spec.choices is not None, (
                    f"sglang {version}'s {name} has no choices to judge {value} by"
                )
                present = value in spec.choices
        else:
            present = name in declared
        want = since is not None and _release(version) >= _release(since)
        assert present == want, (name, value, version)
    for name, (since, _instead) in DEPRECATED_SINCE.items():
        assert flags[name].deprecated == (_release(version) >= _release(since)), (name, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_derived_variables_are_sglang_s(version):
    declared, _ = env_vars(version)
    for name in DERIVED_ENV:
        assert name in declared, (name, version)
