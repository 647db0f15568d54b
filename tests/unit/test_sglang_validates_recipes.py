"""Every recipe, every node, on every track it runs on, passes what sglang checks
before it starts a process: its real parser, the whole ServerArgs resolution
(__post_init__; 0.5.23's resolve_once) and check_server_args, reading the
checkpoint's config.json (tests/fixtures/models/), with only the GPU stubbed
(tests/support/server_args_check.py says what and why).

test_sglang_accepts_recipes.py checks each rendered flag against each release's
parser; this runs the resolution the flags go through, where DP attention, expert
parallel, DSPARK's draft and the DeepSeek-V4 defaults are validated together. The
figures sglang resolves are held to the lints' own arithmetic (per-rank graphs,
the indexer threshold), so a lint that drifted from sglang fails here. The
negative cases run a recipe the lints would refuse (lints skipped) to show sglang
refuses it too.
"""

from __future__ import annotations

import math

import pytest

from sm12x.recipe import Recipe, load_all
from sm12x.recipe.derived import attention_dp, per_rank_requests
from sm12x.recipe.lints import INDEXER_MIN_QUERY, claimed_defaults
from sm12x.recipe.load import validate_recipe
from sm12x.recipe.tracks import recipe_tracks
from sm12x.sglang_parser import load_description
from sm12x.versions import load_versions
from tests.support.cli import raw_recipe
from tests.support.server_args_check import GPUS, model_dir, validate
from tests.support.server_args_check import V41_FLASH as V41_MODEL

CASES = [
    (recipe, rank, track)
    for recipe in load_all()
    for rank in range(recipe.hardware.nodes)
    for track in recipe_tracks(recipe)
]

pytestmark = pytest.mark.wheels  # sglang's real ServerArgs, from each track's wheel


@pytest.fixture(scope="module")
def verdicts():
    made = {}

    def get(recipe, rank, track):
        key = (recipe.name, rank, track)
        if key not in made:
            made[key] = validate(recipe, rank, track, model_dir(recipe))
        return made[key]

    return get


@pytest.mark.parametrize(
    "recipe, rank, track", CASES, ids=[f"{r.name}-node{n}-{t}" for r, n, t in CASES]
)
def test_sglang_would_launch_it(verdicts, recipe, rank, track):
    verdict = verdicts(recipe, rank, track)
    verdict.raise_for_refusal()
    got = verdict.resolved
    assert got["device"] == "cuda"
    assert got["speculative_algorithm"] == "DSPARK"
    assert got["speculative_dspark_block_size"] == recipe.dspark.block_size
    assert got["speculative_num_draft_tokens"] == recipe.dspark.block_size + 1
    assert got["tp_size"] == recipe.flag_value("--tp-size")
    assert got["kv_cache_dtype"] == "fp8_e4m3"
    assert got["moe_runner_backend"] == "flashinfer_mxfp4"
    # The draft is the one bundled in the checkpoint (config.json's dspark_* keys).
    assert (
        got["speculative_draft_model_path"] == verdict.argv[verdict.argv.index("--model-path") + 1]
    )
    if recipe.is_multinode:
        assert (got["nnodes"], got["node_rank"]) == (recipe.hardware.nodes, rank)
    dp = attention_dp(recipe)
    width = (
        got["attn_dp_size"]
        if "attn_dp_size" in got and got["attn_dp_size"]
        else (got["dp_size"] if got["enable_dp_attention"] else 1)
    )
    assert width == dp, "the lints' DP attention width is sglang's"
    assert got["enable_dp_lm_head"] is (dp > 1)
    # The lints' per-rank arithmetic is sglang's: DP attention divides the chunk ...
    chunk = recipe.flag_value("--chunked-prefill-size")
    if isinstance(chunk, int):
        assert got["chunked_prefill_size"] == chunk // dp
    indexer = recipe.env.get(INDEXER_MIN_QUERY)
    if indexer is not None:
        assert int(indexer.value) == got["chunked_prefill_size"]
    # ... and a rank runs max_running_requests // dp requests, the graph's ceiling.
    if got["cuda_graph_max_bs_decode"] is not None:
        assert got["cuda_graph_max_bs_decode"] <= got["max_running_requests"] // dp
    # The request limit the lints read (the flag, else the model's fallback) is sglang's.
    assert got["max_running_requests"] == recipe.max_running_requests
    assert max(1, got["max_running_requests"] // width) == per_rank_requests(recipe)


# --- the defaults recipes state (sglang_default, sglang_defaults: lint default-claim)

CLAIMS = [
    (recipe, track)
    for recipe in load_all()
    if claimed_defaults(recipe)
    for track in recipe_tracks(recipe)
]


def _dests(track: str) -> dict[str, str]:
    """option -> ServerArgs field, from the track's sglang parser (its description,
    sm12x/sglang_parsers/, which the suite holds to the real parser)."""
    version = load_versions(track)["SGLANG_VERSION"]
    actions = load_description(version)["actions"]
    return {option: a["dest"] for a in actions for option in a["options"]}


def _same(claim, got) -> bool:
    if isinstance(claim, bool) or isinstance(got, bool):
        return claim is got
    if isinstance(claim, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(claim, got)
    return str(claim) == str(got)


def wrong_defaults(recipe: Recipe, track: str) -> list[str]:
    """Each default the recipe states that sglang's own resolution of the recipe,
    without the claimed settings, contradicts on `track`."""
    claims = claimed_defaults(recipe)
    dests = _dests(track)
    flags = {n: v for n, v in claims.items() if n.startswith("--")}
    env = {n: str(v) for n, v in claims.items() if not n.startswith("--")}
    data = raw_recipe(recipe.name)
    for name in claims:
        data["flags"].pop(name, None)
        data.get("env", {}).pop(name, None)
    bare = validate_recipe(data, f"{recipe.name} without its claimed settings")
    fields = tuple(dests[n] for n in flags if n in dests)
    verdict = validate(bare, 0, track, model_dir(recipe), fields=fields, env_claims=env)
    verdict.raise_for_refusal()
    wrong = []
    for name, claim in flags.items():
        if name not in dests:
            wrong.append(f"{name}: sglang {verdict.sglang}'s parser has no such flag")
            continue
        got = verdict.resolved.get(dests[name])
        if not _same(claim, got):
            wrong.append(
                f"{name}: the recipe says sglang's default is {claim!r}, sglang {verdict.sglang} resolves {got!r}"
            )
    for name, claim in env.items():
        default, parsed = verdict.env_defaults.get(name, [None, None])
        if parsed is None:
            wrong.append(f"{name}: sglang {verdict.sglang} declares no such variable")
        elif default != parsed:
            wrong.append(
                f"{name}: the recipe says sglang's default is {claim!r}, sglang {verdict.sglang} has {default!r}"
            )
    return wrong


@pytest.mark.parametrize("recipe, track", CLAIMS, ids=[f"{r.name}-{t}" for r, t in CLAIMS])
def test_every_default_a_recipe_states_is_sglang_s(recipe, track):
    assert wrong_defaults(recipe, track) == []


def test_a_default_sglang_contradicts_is_caught():
    data = raw_recipe("rtx-pro-6000-tp4-throughput")
    data["flags"]["--swa-full-tokens-ratio"]["sglang_default"] = 0.8  # the generic value
    data["sglang_defaults"]["SGLANG_OPT_DEEPGEMM_HC_PRENORM"]["sglang_default"] = "0"
    recipe = validate_recipe(data, "case.yaml")
    wrong = wrong_defaults(recipe, "current")
    assert len(wrong) == 2, wrong
    assert "--swa-full-tokens-ratio: the recipe says sglang's default is 0.8" in wrong[0]
    assert "resolves 0.1" in wrong[0]
    assert "SGLANG_OPT_DEEPGEMM_HC_PRENORM" in wrong[1] and "has True" in wrong[1]


def test_every_recipe_and_node_is_checked():
    names = {r.name for r, _, _ in CASES}
    assert names == {r.name for r in load_all()}
    assert {(r.name, n) for r, n, _ in CASES if r.is_multinode} == {
        (r.name, n) for r in load_all() if r.is_multinode for n in range(r.hardware.nodes)
    }


def test_the_stub_answers_as_the_recipe_s_gpu():
    for recipe in load_all():
        gpu = GPUS[recipe.hardware.gpu]
        assert ".".join(map(str, gpu.capability)) == recipe.hardware.compute_capability
        # nvidia-smi's figure is the marketed size less what the driver keeps.
        assert (
            0.9 * recipe.hardware.memory_gib_per_gpu * 1024
            <= gpu.memory_mib
            <= (recipe.hardware.memory_gib_per_gpu * 1024)
        )


def _mutated(base: str, mutate):
    data = raw_recipe(base)
    mutate(data)
    return validate_recipe(data, "case.yaml")  # the lints would refuse it: not run


def test_sglang_refuses_dp_attention_without_the_dp_lm_head():
    recipe = _mutated(
        "rtx-pro-6000-tp4-throughput", lambda d: d["flags"].pop("--enable-dp-lm-head")
    )
    verdict = validate(recipe, 0, "current")
    assert not verdict.ok
    assert "DSpark with dp attention requires --enable-dp-lm-head" in verdict.error


def test_sglang_refuses_a_dp_width_that_does_not_divide_tp():
    def mutate(data):
        data["flags"]["--attn-dp-size"]["value"] = 3

    verdict = validate(_mutated("rtx-pro-6000-tp4-throughput", mutate), 0, "current")
    assert not verdict.ok, verdict.resolved


@pytest.mark.parametrize(
    "flag, refused",
    [
        (["--enable-two-batch-overlap"], "DeepSeek-V4.1 does not support two-batch overlap"),
    ],
)
def test_sglang_refuses_for_v41_what_the_line_lint_refuses(flag, refused):
    """model-line-refused's V4.1 refusals are sglang's own (lints skipped here)."""
    data = raw_recipe("rtx-pro-6000-tp8-v41")
    data["flags"][flag[0]] = {"why": "a negative case: the lint refuses it"}
    recipe = validate_recipe(data, "case.yaml")
    verdict = validate(recipe, 0, "current", model_dir(recipe))
    assert not verdict.ok
    assert refused in verdict.error, verdict.error


V41_RECIPES = [r for r in load_all() if r.model.line == "v4.1-flash"]


@pytest.mark.parametrize("recipe", V41_RECIPES, ids=lambda r: r.name)
def test_sglang_runs_the_v41_limits_the_recipe_writes(verdicts, recipe):
    """sglang 0.5.23 with the published V4.1 config resolves each V4.1 recipe's limits to
    the recipe's own figures (nothing it would raise or lower behind the recipe)."""
    got = verdicts(recipe, 0, "current").resolved
    assert got["max_running_requests"] == recipe.flag_value("--max-running-requests")
    assert got["cuda_graph_max_bs_decode"] == recipe.flag_value("--cuda-graph-max-bs-decode")
    assert got["mem_fraction_static"] == recipe.flag_value("--mem-fraction-static")
    # unset, sglang takes the checkpoint's own context at model load, not here
    assert got["context_length"] == recipe.flag_value("--context-length")
    # one rank runs every request: its largest decode graph holds a full batch
    assert got["max_running_requests"] // attention_dp(recipe) == got["cuda_graph_max_bs_decode"]
    # V4's override of the SWA share (0.1) skips deepseek_v41: 0.8 stays
    assert got["swa_full_tokens_ratio"] == 0.8


def test_without_its_limits_sglang_would_run_v41_at_its_own_defaults():
    """What the recipes' `why`s say sglang would do without them: 256 requests for this
    model under DSPARK, and no decode graph ceiling of the recipe's (sglang picks its
    capture sizes at boot)."""

    def mutate(data):
        for flag in ("--max-running-requests", "--cuda-graph-max-bs-decode"):
            data["flags"].pop(flag)

    got = validate(_mutated("rtx-pro-6000-tp8-v41", mutate), 0, "current", V41_MODEL).resolved
    assert got["max_running_requests"] == 256
    assert got["cuda_graph_max_bs_decode"] is None
