"""tune's --input-len is bounded by the recipe's context (issue 45: 10^12 reached
the server)."""

from __future__ import annotations

import pytest

from sm12x.errors import UserError
from sm12x.recipe import load_recipe
from sm12x.tune.main import check_input_len

WITH_FLAG = "rtx-pro-6000-tp2-throughput"  # sets --context-length
WITHOUT = "rtx-pro-6000-tp4-throughput"  # leaves it to the server


def context(name: str) -> int:
    value = load_recipe(name).flag_value("--context-length")
    assert isinstance(value, int)
    return value


@pytest.mark.parametrize("input_len", [10**12, 2**31, "context"])
def test_past_the_recipe_s_context_is_refused(input_len):
    n = context(WITH_FLAG) if input_len == "context" else input_len
    with pytest.raises(UserError, match="does not fit recipe .*--context-length") as caught:
        check_input_len(n, load_recipe(WITH_FLAG))
    assert f"at most {context(WITH_FLAG) - 1:,}" in caught.value.message


def test_within_it_passes():
    check_input_len(context(WITH_FLAG) - 1, load_recipe(WITH_FLAG))
    check_input_len(1024, load_recipe(WITH_FLAG))


@pytest.mark.parametrize("served", [8192, 131072])
def test_without_the_flag_the_server_s_context_bounds_it(served):
    recipe = load_recipe(WITHOUT)
    assert recipe.flag_value("--context-length") is None
    check_input_len(served - 1, recipe, {"context_length": served})
    with pytest.raises(UserError, match="the server's context_length"):
        check_input_len(served, recipe, {"context_length": served})
    # What the server says is believed only as a whole number.
    check_input_len(10**12, recipe, {"context_length": True})
    check_input_len(10**12, recipe, {"context_length": "8192"})
