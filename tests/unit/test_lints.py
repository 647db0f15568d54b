"""Every lint fires on a failing example, with a message that says what to do."""

from __future__ import annotations

import pytest

from sm12x.patches.series import VerifyRows
from sm12x.recipe import Recipe, RecipeError, lint_recipe
from sm12x.recipe.lints import LINTS
from sm12x.recipe.load import validate_recipe
from tests.support.cli import raw_recipe


def build(mutate, base: str = "rtx-pro-6000-tp4") -> Recipe:
    data = raw_recipe(base)
    mutate(data)
    return validate_recipe(data, "case.yaml")


def set_flag(name, value=None, why="a reason long enough to pass"):
    def mutate(data):
        entry = {"why": why} if value is None else {"value": value, "why": why}
        data["flags"][name] = entry

    return mutate


def drop_flag(name):
    return lambda data: data["flags"].pop(name)


def set_env(name, value):
    return lambda data: data["env"].__setitem__(
        name, {"value": value, "why": "a reason long enough"}
    )


def both(*mutations):
    def mutate(data):
        for m in mutations:
            m(data)

    return mutate


def depth(size, ack=None):
    def mutate(data):
        data["dspark"]["block_size"] = size
        if ack is not None:
            data["dspark"]["acknowledge_block_size_5"] = ack

    return mutate


V41 = "rtx-pro-6000-tp8-v41"
V41_TP4 = "rtx-pro-6000-tp4-v41"


def dspark(**fields):
    return lambda data: data["dspark"].update(fields)


def drop_env(name):
    return lambda data: data["env"].pop(name)


TP4_THROUGHPUT = "rtx-pro-6000-tp4-throughput"
INDEXER = "SGLANG_OPT_DSV4_NONPAGED_INDEXER_MIN_QUERY_TOKENS"


# (code, level, mutation, base recipe, words the message must contain)
CASES = [
    (
        "dspark-depth-5",
        "error",
        depth(5),
        "rtx-pro-6000-tp4",
        ["block_size 5 corrupts", "use 4", "acknowledge_block_size_5"],
    ),
    (
        "dspark-depth-5",
        "warning",
        depth(4, ack="reproducing the depth-5 bug on purpose"),
        "rtx-pro-6000-tp4",
        ["no effect", "remove it"],
    ),
    (
        "dspark-verify-rows",
        "error",
        depth(10),
        "rtx-pro-6000-tp4",
        [
            "block_size 10 verifies 11 rows",
            "0020-dsv4-compress-plan-verify-rows.patch",
            "at most 10 verify rows",
            "use block_size 9 or less",
        ],
    ),
    (
        "kv-cache-dtype",
        "error",
        set_flag("--kv-cache-dtype", "bf16"),
        "rtx-pro-6000-tp4",
        ["'bf16'", "fp8_e4m3", "crash-loops"],
    ),
    (
        "kv-cache-dtype",
        "error",
        drop_flag("--kv-cache-dtype"),
        "rtx-5090-tp8",
        ["missing", "set flags.--kv-cache-dtype.value: fp8_e4m3"],
    ),
    (
        "moe-runner-backend",
        "error",
        set_flag("--moe-runner-backend", "triton"),
        "rtx-pro-6000-tp2",
        ["'triton'", "flashinfer_mxfp4", "hidden-size mismatch"],
    ),
    (
        "moe-runner-backend",
        "error",
        drop_flag("--moe-runner-backend"),
        "dgx-spark-tp2",
        ["missing", "set flags.--moe-runner-backend.value: flashinfer_mxfp4"],
    ),
    (
        "tp-size",
        "error",
        set_flag("--tp-size", 2),
        "rtx-pro-6000-tp4",
        ["--tp-size is 2", "4 GPU(s) per node x 1 node(s)", "set it to 4"],
    ),
    (
        "tp-size",
        "error",
        set_flag("--tp-size", 1),
        "dgx-spark-tp2",
        ["1 GPU(s) per node x 2 node(s)", "set it to 2"],
    ),
    ("tp-size", "error", drop_flag("--tp-size"), "rtx-5090-tp8", ["missing", "set it to 8"]),
    (
        "cuda-graph-bs",
        "error",
        set_flag("--cuda-graph-max-bs-decode", 64),
        "dgx-spark-tp2",
        ["64 exceeds --max-running-requests (32)", "at most 32"],
    ),
    (
        "cuda-graph-bs",
        "error",
        both(drop_flag("--max-running-requests"), set_flag("--cuda-graph-max-bs-decode", 300)),
        "rtx-pro-6000-tp4",
        ["sglang's default --max-running-requests for DeepSeek-V4", "(256)"],
    ),
    (
        "compact-full-rank",
        "error",
        dspark(acknowledge_compact_full_rank=None),
        TP4_THROUGHPUT,
        [
            "sglang 0.5.23",
            "a DP rank holds up to 64 requests (--max-running-requests 256 // 4 DP ranks)",
            "largest decode graph has 64 slots (--cuda-graph-max-bs-decode 64",
            "no padding slot",
            "docs/benchmarks.md#compact-verify-at-a-full-dp-rank",
            "cannot prevent it",
            "ragged_verify: static",
            "patches/sglang/0.5.23/",
            "compact_full_rank = true",
            "dspark.acknowledge_compact_full_rank",
        ],
    ),
    (
        # ranks x (cap - 1): the pool, and with it the largest graph, follows the limit
        "compact-full-rank",
        "error",
        both(dspark(acknowledge_compact_full_rank=None), set_flag("--max-running-requests", 252)),
        TP4_THROUGHPUT,
        ["up to 63 requests (--max-running-requests 252 // 4 DP ranks)", "has 63 slots"],
    ),
    (
        "compact-full-rank",
        "error",
        both(
            dspark(acknowledge_compact_full_rank=None),
            set_flag("--cuda-graph-max-bs-decode", 16),
        ),
        "rtx-pro-6000-tp2-throughput",
        ["up to 48 requests (--max-running-requests 48)", "has 16 slots", "16 requests"],
    ),
    (
        "compact-full-rank",
        "warning",
        dspark(acknowledge_compact_full_rank="a reason long enough to pass"),
        "rtx-pro-6000-tp4",
        ["has no effect with ragged_verify static", "remove it"],
    ),
    (
        "default-claim",
        "error",
        lambda d: d["flags"]["--swa-full-tokens-ratio"].pop("sglang_default"),
        TP4_THROUGHPUT,
        [
            "flags.--swa-full-tokens-ratio.why speaks of a default",
            "write flags.--swa-full-tokens-ratio.sglang_default",
            "the wheels suite checks it",
        ],
    ),
    (
        "default-claim",
        "error",
        lambda d: d["env"][INDEXER].pop("sglang_default"),
        TP4_THROUGHPUT,
        [f"env.{INDEXER}.why speaks of a default"],
    ),
    (
        "default-claim",
        "error",
        set_flag("--load-balance-method", "round_robin"),
        TP4_THROUGHPUT,
        ["sglang_defaults.--load-balance-method is also in flags", "remove one"],
    ),
    (
        "default-claim",
        "error",
        lambda d: d["sglang_defaults"].pop("--load-balance-method"),
        TP4_THROUGHPUT,
        [
            "status.note speaks of sglang's default beside --load-balance-method",
            "add sglang_defaults.--load-balance-method",
        ],
    ),
    (
        "flashmla-triton",
        "warning",
        set_env("SGLANG_SM120_FLASHMLA_BACKEND", "triton"),
        "rtx-5090-tp8",
        ["costs throughput", "not needed", "remove it"],
    ),
    (
        "weight-loader-mmap",
        "error",
        set_flag("--weight-loader-disable-mmap"),
        "dgx-spark-tp2",
        ["hangs unified-memory hosts", "remove it"],
    ),
    (
        "derived-flag",
        "error",
        set_flag("--speculative-dspark-block-size", 5),
        "rtx-pro-6000-tp4",
        ["rendered from dspark.block_size", "remove it from flags"],
    ),
    (
        "derived-flag",
        "error",
        set_flag("--nnodes", 2),
        "dgx-spark-tp2",
        ["rendered from hardware.nodes"],
    ),
    (
        "flag-spelling",
        "error",
        both(drop_flag("--tp-size"), set_flag("--tensor-parallel-size", 4)),
        "rtx-pro-6000-tp4",
        ["write --tp-size"],
    ),
    (
        "tracks",
        "error",
        lambda data: data.__setitem__("tracks", ["nightly"]),
        "rtx-pro-6000-tp4",
        ["'nightly' is not a track", "SM12X_TRACKS", "pinned"],
    ),
    (
        "tracks",
        "error",
        lambda data: data.__setitem__("tracks", []),
        "rtx-pro-6000-tp4",
        ["tracks is empty"],
    ),
    (
        "retired-env",
        "warning",
        set_env("SGLANG_ENABLE_SPEC_V2", "1"),
        "rtx-pro-6000-tp4",
        ["removed", "drop it"],
    ),
    (
        "retired-env",
        "warning",
        set_env("SGLANG_ENABLE_THINKING", "1"),
        "rtx-pro-6000-tp4",
        ["SGLANG_DEFAULT_THINKING"],
    ),
    # --- model lines (sm12x.recipe.lines) ---
    (
        "model-line-track",
        "error",
        lambda data: data.pop("tracks"),
        V41,
        [
            "v4.1-flash needs sglang >= 0.5.23",
            "pinned track's sglang is 0.5.17",
            "tracks: [current]",
        ],
    ),
    (
        "model-line-track",
        "error",
        lambda data: data.__setitem__("tracks", ["pinned"]),
        V41,
        ["no deepseek_v41 config", "tracks: [current]"],
    ),
    (
        "model-line-parsers",
        "error",
        set_flag("--tool-call-parser", "deepseekv4"),
        V41,
        ["--tool-call-parser is 'deepseekv4'", "needs deepseekv41", "prompt encoder"],
    ),
    (
        "model-line-parsers",
        "error",
        set_flag("--reasoning-parser", "deepseek-v41"),
        "rtx-pro-6000-tp4",
        ["DeepSeek-V4-Flash-0731 needs deepseek-v4"],
    ),
    (
        "model-line-refused",
        "error",
        set_flag("--enable-two-batch-overlap"),
        V41,
        ["refuses two-batch overlap for DeepSeek-V4.1-Flash", "remove it"],
    ),
    (
        "model-line-refused",
        "error",
        set_flag("--enable-hisparse"),
        V41,
        ["HiSparse"],
    ),
    (
        "model-line-refused",
        "error",
        set_flag("--pp-size", 2),
        V41,
        ["--pp-size 2", "pipeline parallelism"],
    ),
    (
        "model-line-refused",
        "error",
        set_flag("--enable-encoder-swa-bounded-replay"),
        "rtx-pro-6000-tp4",
        ["requires DeepSeek-V4.1", "DeepSeek-V4-Flash-0731"],
    ),
    (
        "model-line-refused",
        "error",
        both(
            set_flag("--enable-encoder-swa-bounded-replay"), set_flag("--chunked-prefill-size", 64)
        ),
        V41,
        ["128 replay tokens plus one page"],
    ),
    # the field's RTX PRO 6000 reports: TP and EP over every card (TP8/EP8, TP4/EP4)
    (
        "v41-layout",
        "error",
        drop_flag("--ep-size"),
        V41,
        ["started only with TP and EP over every card", "--ep-size None", "--ep-size 8"],
    ),
    (
        "v41-layout",
        "error",
        set_flag("--ep-size", 2),
        V41_TP4,
        ["TP4/EP4 in its 2026-09-27 update", "--ep-size 2", "set --tp-size 4 and --ep-size 4"],
    ),
    # sglang 0.5.23's V4.1 paths give compact rows to the wrong requests
    (
        "ragged-verify",
        "error",
        dspark(ragged_verify="compact", sps_table="tuned"),
        V41,
        [
            "ragged_verify compact with DeepSeek-V4.1",
            "token_req_indices",
            "use ragged_verify: static",
        ],
    ),
    (
        "ragged-verify",
        "error",
        dspark(ragged_verify="cap-accept", sps_table="tuned"),
        V41_TP4,
        ["ragged_verify cap-accept with DeepSeek-V4.1", "wrong requests"],
    ),
    # V4.1's own compress paths (ratio 2 ring, ratio 1), not V4's c4 plan, bound its depth
    (
        "dspark-verify-rows",
        "error",
        depth(10),
        V41,
        ["block_size 10 verifies 11 rows", "ratio-2 pair ring", "at most 10", "block_size 9"],
    ),
    (
        "v41-layout",
        "error",
        set_flag("--enable-dp-attention"),
        V41,
        ["without --enable-dp-attention"],
    ),
    (
        "v41-layout",
        "error",
        both(set_flag("--ep-size", 4), set_flag("--tp-size", 8)),
        V41,
        ["--ep-size 4", "sgl-project/sglang#40877"],
    ),
    (
        "v41-field",
        "warning",
        depth(4),
        V41,
        ["block_size 4", "block size 6 only", "unreported"],
    ),
    (
        "v41-field",
        "warning",
        set_flag("--chunked-prefill-size", 8192),
        V41,
        ["--chunked-prefill-size 8192", "ran 2048", "crashed"],
    ),
    (
        "model-fit",
        "error",
        both(
            lambda d: d["hardware"].__setitem__("gpus_per_node", 4),
            set_flag("--tp-size", 4),
            set_flag("--ep-size", 4),
            set_flag("--max-running-requests", 8),
            set_flag("--cuda-graph-max-bs-decode", 8),
        ),
        V41,
        [
            "DeepSeek-V4.1-Flash does not fit 4x rtx-pro-6000",
            "118.8 GiB of weights per GPU",
            "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1",
            "76.8 GiB usable",
            "pick a rig with more memory",
        ],
    ),
    (
        "cuda-graph-bs",
        "error",
        set_flag("--cuda-graph-max-bs-decode", 65),
        TP4_THROUGHPUT,
        [
            "65 exceeds --max-running-requests (256) / DP attention's 4 ranks, per rank (64)",
            "at most 64",
        ],
    ),
    (
        "indexer-min-query-tokens",
        "error",
        set_env("SGLANG_OPT_DSV4_NONPAGED_INDEXER_MIN_QUERY_TOKENS", "4096"),
        TP4_THROUGHPUT,
        ["is '4096'", "--chunked-prefill-size 4096 / 4 DP ranks = 1024", 'set it to "1024"'],
    ),
    (
        "indexer-min-query-tokens",
        "error",
        set_env("SGLANG_OPT_DSV4_NONPAGED_INDEXER_MIN_QUERY_TOKENS", "1024"),
        "rtx-pro-6000-tp4",
        ["--chunked-prefill-size 4096 (no DP attention) = 4096", 'set it to "4096"'],
    ),
    (
        "indexer-min-query-tokens",
        "error",
        drop_flag("--chunked-prefill-size"),
        TP4_THROUGHPUT,
        ["--chunked-prefill-size is not a positive integer", "write --chunked-prefill-size"],
    ),
    (
        "dp-attention",
        "error",
        set_flag("--enable-dp-attention"),
        "rtx-pro-6000-tp4",
        ["--dp-size 1 (or none)", "silently turns DP attention off"],
    ),
    (
        "dp-attention",
        "error",
        set_flag("--dp-size", 4),
        "rtx-pro-6000-tp4",
        ["--dp-size 4 without --enable-dp-attention", "4 x 4 GPUs", "--attn-dp-size"],
    ),
    (
        "dp-attention",
        "error",
        set_flag("--attn-dp-size", 3),
        TP4_THROUGHPUT,
        ["DP attention width 3 does not divide --tp-size 4", "tp_size % dp_size"],
    ),
    (
        "dp-attention",
        "error",
        set_flag("--enable-dp-attention"),
        TP4_THROUGHPUT,
        ["two spellings of DP attention", "keep --attn-dp-size"],
    ),
    (
        "dp-attention",
        "error",
        drop_flag("--enable-dp-lm-head"),
        TP4_THROUGHPUT,
        ["DSPARK with DP attention needs --enable-dp-lm-head"],
    ),
    (
        "dp-attention",
        "error",
        set_flag("--enable-dp-lm-head"),
        "rtx-pro-6000-tp4",
        ["--enable-dp-lm-head needs DP attention", "remove it"],
    ),
    (
        "dp-attention",
        "error",
        set_flag("--ep-size", 3),
        TP4_THROUGHPUT,
        ["--ep-size 3 must be a positive divisor of --tp-size 4"],
    ),
    (
        "dp-attention",
        "error",
        set_flag("--attn-dp-size", "four"),
        TP4_THROUGHPUT,
        ["--attn-dp-size is 'four'", "positive integer"],
    ),
    (
        "dp-attention",
        "warning",
        set_flag("--enable-prefill-delayer"),
        "rtx-pro-6000-tp4",
        ["--enable-prefill-delayer", "without DP attention it does nothing", "remove it"],
    ),
    (
        "ragged-verify",
        "error",
        dspark(ragged_verify="compact"),
        "rtx-pro-6000-tp4",
        [
            "ragged_verify compact without an SPS table",
            "verify-all",
            "sps_table: tuned",
            "sm12x tune",
        ],
    ),
    (
        "ragged-verify",
        "error",
        both(dspark(sps_table=None), dspark(ragged_verify="cap-accept")),
        TP4_THROUGHPUT,
        ["ragged_verify cap-accept without an SPS table"],
    ),
    (
        "ragged-verify",
        "error",
        dspark(sps_table_path="/tables/mine.json"),
        TP4_THROUGHPUT,
        ["both name a table", "keep one"],
    ),
    (
        "ragged-verify",
        "warning",
        dspark(sps_table="tuned"),
        "rtx-pro-6000-tp4",
        ["static", "no-op", "ragged_verify: compact"],
    ),
    (
        "ragged-verify",
        "warning",
        both(
            set_flag("--attn-dp-size", 2),
            set_env("SGLANG_OPT_DSV4_NONPAGED_INDEXER_MIN_QUERY_TOKENS", "2048"),
        ),
        TP4_THROUGHPUT,
        ["DP attention width 2 below --tp-size 4", "graph_tier=pinned", "set the width to 4"],
    ),
    (
        "derived-env",
        "error",
        set_env("SGLANG_RAGGED_VERIFY_MODE", "compact"),
        TP4_THROUGHPUT,
        ["env.SGLANG_RAGGED_VERIFY_MODE is rendered from dspark.ragged_verify", "remove it"],
    ),
    (
        "track-feature",
        "error",
        set_env("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "1"),
        "rtx-pro-6000-tp2",
        [
            "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE",
            "not in the pinned track's sglang 0.5.17",
            "sglang 0.5.23",
            "tracks:",
        ],
    ),
    (
        "track-feature",
        "error",
        set_flag("--load-balance-method", "prefix_affinity"),
        TP4_THROUGHPUT,
        ["--load-balance-method prefix_affinity", "no tracked sglang", "remove it"],
    ),
    (
        "track-feature",
        "error",
        set_flag("--attn-dp-size", 4),
        "rtx-pro-6000-tp4",
        ["--attn-dp-size (DP attention's own flag) is not in the pinned track's sglang 0.5.17"],
    ),
    (
        "track-feature",
        "error",
        both(
            set_flag("--dp-size", 4),
            set_flag("--enable-dp-attention"),
            set_flag("--enable-dp-lm-head"),
        ),
        "rtx-pro-6000-tp4",
        [
            "--enable-dp-attention is deprecated in the current track's sglang 0.5.23",
            "--attn-dp-size N",
        ],
    ),
    (
        "dspark-verify-rows",
        "error",
        depth(10),
        TP4_THROUGHPUT,
        [
            "block_size 10 verifies 11 rows",
            "the current track's sglang 0.5.23",
            "at most 10 verify rows",
        ],
    ),
]


def test_every_lint_has_a_failing_example():
    assert {code for code, *_ in CASES} == set(LINTS)


@pytest.mark.parametrize(
    "code, level, mutate, base, words", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_lint_fires_with_actionable_message(code, level, mutate, base, words, monkeypatch):
    if code == "compact-full-rank":
        # A release without the fix (the shipped 0.5.23 series has 0024: the tests
        # below hold the recipes to it).
        from sm12x.recipe import lints

        monkeypatch.setattr(lints.patch_series, "compact_full_rank_fix", lambda v: None)
    findings = [f for f in lint_recipe(build(mutate, base)) if f.code == code]
    assert findings, f"{code} did not fire"
    assert findings[0].level == level
    for word in words:
        assert word in findings[0].message, findings[0].message


def test_depth_5_passes_with_an_acknowledgement():
    recipe = build(depth(5, ack="reproducing the depth-5 corruption on purpose"))
    assert [f for f in lint_recipe(recipe) if f.code == "dspark-depth-5"] == []


def test_mmap_flag_is_not_a_lint_error_on_discrete_gpus():
    recipe = build(set_flag("--weight-loader-disable-mmap"), "rtx-pro-6000-tp4")
    assert [f for f in lint_recipe(recipe) if f.code == "weight-loader-mmap"] == []


def test_errors_come_before_warnings():
    recipe = build(both(set_env("SGLANG_ENABLE_SPEC_V2", "1"), set_flag("--tp-size", 3)))
    levels = [f.level for f in lint_recipe(recipe)]
    assert levels == sorted(levels, key=lambda level: level != "error")


def test_load_refuses_a_recipe_with_lint_errors(tmp_path):
    from sm12x.recipe import load_recipe
    from tests.support.cli import write_recipe

    data = raw_recipe("rtx-pro-6000-tp4")
    depth(5)(data)
    path = write_recipe(tmp_path, data)
    with pytest.raises(RecipeError, match=r"error\[dspark-depth-5\]"):
        load_recipe(path)
    assert load_recipe(path, lint=False).dspark.block_size == 5


# --- dspark-verify-rows: the depth a recipe may use is what the image's series makes clean


def verify_row_findings(recipe):
    return [f for f in lint_recipe(recipe) if f.code == "dspark-verify-rows"]


@pytest.fixture
def image_sglang(monkeypatch):
    """image_sglang(version): the lint sees versions.env pinning that sglang."""
    from sm12x.recipe import lints, tracks

    def pin(version: str) -> None:
        for module in (lints, tracks):
            monkeypatch.setattr(module, "tracks", lambda: ("pinned",))
            monkeypatch.setattr(
                module, "load_versions", lambda track=None: {"SGLANG_VERSION": version}
            )

    return pin


@pytest.fixture
def series_file(monkeypatch, tmp_path):
    """series_file(text): the lint reads this patches.toml instead of the project's."""
    from sm12x.patches import series as patch_series

    def use(text: str) -> None:
        path = tmp_path / "patches.toml"
        path.write_text(text)
        monkeypatch.setattr(patch_series, "patches_toml", lambda: path)
        patch_series._load.cache_clear()

    yield use
    patch_series._load.cache_clear()


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17"])
def test_the_series_with_the_row_fix_allows_depth_4_to_9(image_sglang, version):
    image_sglang(version)
    for size in (4, 6, 7, 9):
        assert verify_row_findings(build(depth(size))) == [], size


def test_a_series_without_the_row_fix_refuses_depth_4_and_says_why(image_sglang):
    # 0.5.18's series (the dispatch patch alone) has no verify-row fix: a real series.
    image_sglang("0.5.18")
    (finding,) = verify_row_findings(build(depth(4)))
    assert finding.level == "error"
    for words in (
        "block_size 4 verifies 5 rows",
        "sglang 0.5.18",
        "at most 4 verify rows",
        "kMaxMTPDraftTokens",
        "#32183",
        "stale compressed KV",
        "Use block_size 3",
        "patches/sglang/0.5.18/",
        "0020-dsv4-compress-plan-verify-rows.patch exists for sglang 0.5.16, 0.5.17",
    ):
        assert words in finding.message, (words, finding.message)
    assert verify_row_findings(build(depth(3))) == []


def test_the_lint_reads_the_rows_from_patches_toml(image_sglang, series_file):
    image_sglang("0.5.17")
    entry = """[[patch]]
file = "0020-x.patch"
sglang = ["0.5.17"]
{rows}
"""
    series_file(entry.format(rows=""))
    assert verify_row_findings(build(depth(4)))
    series_file(entry.format(rows="verify_rows = 6"))
    assert verify_row_findings(build(depth(5))) == []
    (finding,) = verify_row_findings(build(depth(6)))
    assert "even with 0020-x.patch" in finding.message and "use block_size 5" in finding.message
    series_file(entry.replace('"0.5.17"', '"0.5.16"').format(rows="verify_rows = 10"))
    assert verify_row_findings(build(depth(4))), "a fix for another sglang must not count"


def test_every_track_s_sglang_is_judged_and_named(monkeypatch):
    """A recipe runs on every track's image: the lint asks each track's sglang."""
    from sm12x.recipe import lints, tracks

    pins = {"pinned": "0.5.17", "current": "0.5.18"}
    for module in (lints, tracks):
        monkeypatch.setattr(module, "tracks", lambda: tuple(pins))
        monkeypatch.setattr(
            module, "load_versions", lambda track=None: {"SGLANG_VERSION": pins[track]}
        )
    (finding,) = verify_row_findings(build(depth(4)))
    assert "the current track's sglang 0.5.18" in finding.message
    assert "pinned" not in finding.message


def test_the_current_track_s_own_plan_keeps_ten_rows():
    """sglang 0.5.23 keeps a verify of up to 10 rows with no patch (its [[release]]
    entry; tests/patch/test_dsv4_kernel_patches.py reads it from 0.5.23's code)."""
    from sm12x.patches import series as patch_series
    from sm12x.versions import load_versions

    assert load_versions("current")["SGLANG_VERSION"] == "0.5.23"
    assert patch_series.verify_rows("0.5.23") == VerifyRows(10, None)
    for size in (3, 4, 6, 7, 9):
        assert verify_row_findings(build(depth(size))) == [], size


def test_depth_5_stays_refused_with_the_row_fix(image_sglang):
    image_sglang("0.5.17")
    findings = lint_recipe(build(depth(5)))
    assert [f.code for f in findings if f.level == "error"] == ["dspark-depth-5"]


def test_load_refuses_depth_4_on_a_series_without_the_fix(image_sglang, tmp_path):
    from sm12x.recipe import load_recipe
    from tests.support.cli import write_recipe

    image_sglang("0.5.18")
    path = write_recipe(tmp_path, raw_recipe("rtx-pro-6000-tp4"))
    with pytest.raises(RecipeError, match=r"error\[dspark-verify-rows\]"):
        load_recipe(path)


def test_the_depth_rule_judges_only_the_recipe_s_tracks(monkeypatch):
    # A recipe limited to one track is not refused for another track's series.
    from sm12x.recipe import lints

    seen = []

    def rows(version):
        seen.append(version)
        return VerifyRows(rows=10, patch=None)

    monkeypatch.setattr(lints.patch_series, "verify_rows", rows)
    lint_recipe(build(lambda d: d.__setitem__("tracks", ["current"])))
    assert seen == [lints.load_versions("current")["SGLANG_VERSION"]]


@pytest.mark.parametrize(
    "configuration, words",
    [
        (
            {"rig": "other", "kind": "baseline", "why": "a reason long enough"},
            ["a baseline recipe is its rig", "'rtx-pro-6000-tp4'"],
        ),
        (
            {"rig": "rtx-pro-6000-tp4", "kind": "throughput", "why": "a reason long enough"},
            ["configuration.rig names this recipe"],
        ),
    ],
)
def test_a_configuration_names_its_rig(configuration, words):
    with pytest.raises(RecipeError) as caught:
        build(lambda d: d.__setitem__("configuration", configuration))
    for word in words:
        assert word in str(caught.value)


def test_a_recipe_without_configuration_is_its_rig_s_baseline():
    recipe = build(lambda d: None)
    assert (recipe.rig, recipe.configuration_kind) == ("rtx-pro-6000-tp4", "baseline")


# --- the model line's structure rules (sm12x.recipe.model.Model) -----------------


@pytest.mark.parametrize(
    "model, words",
    [
        (
            {"architecture": "DeepseekV41ForConditionalGeneration"},
            ["maps only DeepseekV41ForCausalLM", "would not load"],
        ),
        (
            {"architecture": "Qwen3ForCausalLM"},
            ["not a DeepSeek-V4.1-Flash architecture", "DeepseekV41ForCausalLM"],
        ),
        ({"revision_why": "a reason long enough to pass"}, ["not both"]),
        ({"revision": None}, ["`revision_why` saying why"]),
        (
            {"line": "v4-flash-0731", "architecture": None},
            ["has no vision tower", "line: v4.1-flash"],
        ),
    ],
)
def test_a_model_must_fit_its_line(model, words):
    def mutate(data):
        data["model"].update(model)
        data["model"] = {k: v for k, v in data["model"].items() if v is not None or k == "revision"}

    with pytest.raises(RecipeError) as caught:
        build(mutate, V41)
    for word in words:
        assert word in str(caught.value), str(caught.value)


def test_a_verified_recipe_pins_its_checkpoint():
    def mutate(data):
        data["model"].update(revision=None, revision_why="no commit known, for this test")
        data["status"] = {
            "state": "verified",
            "note": "booted and verified on the rig",
            "verified_by": "someone",
            "verified_on": "2026-12-01",
        }

    with pytest.raises(RecipeError) as caught:
        build(mutate, V41)
    assert "name model.revision" in str(caught.value)


def test_a_recipe_without_a_line_serves_v4_flash_0731():
    recipe = build(lambda d: None)
    assert recipe.model.line == "v4-flash-0731"
    assert recipe.model.resolved_architecture == "DeepseekV4ForCausalLM"
    assert not recipe.model.vision
    v41 = build(lambda d: None, V41)
    assert (v41.model.line, v41.model.vision, v41.tracks) == ("v4.1-flash", True, ["current"])


def test_the_v41_block_size_the_field_ran_passes_clean():
    recipe = build(lambda d: None, V41)
    assert [f for f in lint_recipe(recipe)] == []


# --- the throughput invariants beyond the table above


def test_every_throughput_recipe_passes_every_lint():
    from sm12x.recipe import load_all

    throughput = [r for r in load_all() if r.configuration_kind == "throughput"]
    # every V4-Flash-0731 rig has one; the V4.1-Flash rig has no field data for one
    assert {r.rig for r in throughput} == {
        r.name
        for r in load_all()
        if r.configuration_kind == "baseline" and r.model.line == "v4-flash-0731"
    }
    for recipe in throughput:
        assert lint_recipe(recipe) == [], recipe.name


@pytest.mark.parametrize("size", [3, 4, 6, 7])
def test_ragged_verify_at_the_clean_depths_passes_on_both_tracks(size):
    recipe = build(
        both(
            depth(size),
            dspark(ragged_verify="compact", sps_table="tuned"),
        )
    )
    assert [f for f in lint_recipe(recipe) if f.level == "error"] == []


def test_ragged_verify_needs_a_plan_checked_for_mixed_widths(image_sglang):
    # 0.5.18's series has no verify-row fix and no [[release]] entry: even depth 3
    # (4 rows, within the unpatched cap) is refused once widths mix.
    image_sglang("0.5.18")
    assert verify_row_findings(build(depth(3))) == []
    (finding,) = verify_row_findings(
        build(both(depth(3), dspark(ragged_verify="compact", sps_table="tuned")))
    )
    for words in (
        "mixes per-request verify widths of 1 to 4 rows",
        "sglang 0.5.18",
        "use ragged_verify: static",
        "patches/sglang/0.5.18/",
        "0020-dsv4-compress-plan-verify-rows.patch exists for sglang 0.5.16, 0.5.17",
    ):
        assert words in finding.message, (words, finding.message)


def test_ragged_verify_at_depth_7_on_the_patched_series(image_sglang):
    image_sglang("0.5.17")
    recipe = build(both(depth(7), dspark(ragged_verify="compact", sps_table="tuned")))
    assert verify_row_findings(recipe) == []


def test_the_feature_lint_judges_only_the_recipe_s_tracks():
    recipe = build(
        both(
            set_env("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "1"),
            lambda d: d.__setitem__("tracks", ["current"]),
        ),
        "rtx-pro-6000-tp2",
    )
    assert [f for f in lint_recipe(recipe) if f.code == "track-feature"] == []


def test_the_graph_limit_without_dp_attention_is_the_whole_request_limit():
    recipe = build(set_flag("--cuda-graph-max-bs-decode", 48), "rtx-pro-6000-tp2")
    assert [f for f in lint_recipe(recipe) if f.code == "cuda-graph-bs"] == []


# --- compact verify at a full DP rank


def test_compact_full_rank_passes_where_the_series_has_the_fix():
    # The shipped series: 0024 fixes both tracks' sglang.
    bare = build(lambda d: None, TP4_THROUGHPUT)
    assert bare.dspark.acknowledge_compact_full_rank is None
    assert [f for f in lint_recipe(bare) if f.code == "compact-full-rank"] == []
    acknowledged = build(
        dspark(acknowledge_compact_full_rank="a reason long enough"), TP4_THROUGHPUT
    )
    (finding,) = [f for f in lint_recipe(acknowledged) if f.code == "compact-full-rank"]
    assert finding.level == "warning"
    assert "every track's sglang has the fixes" in finding.message


def test_compact_full_rank_asks_for_the_context_limit_fix_too(monkeypatch):
    """A track with 0024 but not 0025: the padding rows near the context limit still
    read past their request's row, so the lint refuses and names the missing key."""
    from sm12x.recipe import lints

    monkeypatch.setattr(lints.patch_series, "compact_context_limit_fix", lambda v: None)
    findings = [
        f
        for f in lint_recipe(build(lambda d: None, TP4_THROUGHPUT))
        if f.code == "compact-full-rank"
    ]
    assert findings and all(f.level == "error" for f in findings)
    message = findings[0].message
    assert "compact_context_limit = true" in message
    assert "compact_full_rank = true" not in message
    assert "docs/benchmarks.md#compact-verify-near-the-context-limit" in message
    assert "an eager verify has none at any batch size" in message


def test_the_series_names_the_compact_full_rank_fix(tmp_path):
    from sm12x.patches import series

    toml = tmp_path / "patches.toml"
    toml.write_text(
        '[[patch]]\nfile = "0099-pad.patch"\nsglang = ["0.5.23"]\ncompact_full_rank = true\n'
        '[[patch]]\nfile = "0098-other.patch"\nsglang = ["0.5.23"]\n'
        '[[release]]\nsglang = "0.5.30"\ncompact_full_rank = true\n'
    )
    assert series.compact_full_rank_fix("0.5.23", toml) == "0099-pad.patch"
    assert series.compact_full_rank_fix("0.5.30", toml) == "sglang 0.5.30"
    assert series.compact_full_rank_fix("0.5.17", toml) is None
    # The shipped series: 0024 on both tracks' sglang, none on 0.5.18 (no track's).
    fix = "0024-dsv4-compact-verify-compressor-widths.patch"
    assert series.compact_full_rank_fix("0.5.23") == fix
    assert series.compact_full_rank_fix("0.5.17") == fix
    assert series.compact_full_rank_fix("0.5.18") is None
    # The context-limit fix beside it: 0025 on both tracks' sglang.
    limit = "0025-dsv4-verify-padding-rows-within-row.patch"
    assert series.compact_context_limit_fix("0.5.23") == limit
    assert series.compact_context_limit_fix("0.5.17") == limit
    assert series.compact_context_limit_fix("0.5.18") is None


def test_the_largest_decode_graph_follows_the_rank_s_pool():
    from sm12x.recipe.derived import largest_decode_graph, per_rank_requests

    tp4 = build(lambda d: None, TP4_THROUGHPUT)
    assert (per_rank_requests(tp4), largest_decode_graph(tp4)) == (64, 64)
    lowered = build(set_flag("--max-running-requests", 252), TP4_THROUGHPUT)
    assert (per_rank_requests(lowered), largest_decode_graph(lowered)) == (63, 63)
    raised = build(set_flag("--cuda-graph-max-bs-decode", 65), TP4_THROUGHPUT)
    assert largest_decode_graph(raised) == 64
    tp2 = build(lambda d: None, "rtx-pro-6000-tp2-throughput")
    assert (per_rank_requests(tp2), largest_decode_graph(tp2)) == (48, 32)
