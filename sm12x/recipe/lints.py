"""Lints: the known traps of serving DeepSeek-V4-Flash + DSPARK on sm_12x.

Each lint has a code, a level and a message that says what to do. Errors stop
load_recipe() (a recipe that trips one would crash, corrupt output or hang
the host); warnings are printed by the launcher and `sm12x render`.
docs/recipes.md explains each one; tests/unit/test_lints.py has a failing
example and a message test for every code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from sm12x.patches import series as patch_series
from sm12x.recipe import fit
from sm12x.recipe.derived import attention_dp, dp_size, largest_decode_graph, per_rank_requests
from sm12x.recipe.errors import RecipeError
from sm12x.recipe.lines import V41_FLASH, serves
from sm12x.recipe.model import Recipe
from sm12x.recipe.tracks import recipe_tracks
from sm12x.versions import load_versions, tracks

Level = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    code: str
    level: Level
    message: str

    def __str__(self) -> str:
        return f"{self.level}[{self.code}]: {self.message}"


LintFn = Callable[[Recipe], Iterator[Finding]]
LINTS: dict[str, LintFn] = {}


def lint(code: str) -> Callable[[LintFn], LintFn]:
    def register(fn: LintFn) -> LintFn:
        LINTS[code] = fn
        return fn

    return register


# Flags the launcher renders from other sections; writing them in `flags`
# would put a second copy in the recipe (and sglang keeps the last one).
DERIVED_FLAGS = {
    "--model-path": "model.hf_id (or SM12X_MODEL_DIR at launch)",
    "--revision": "model.revision",
    "--served-model-name": "model.served_model_name",
    "--host": "SM12X_HOST (else SM12X_BIND) at launch",
    "--port": "serve.port (or SM12X_PORT at launch)",
    "--api-key": "SM12X_API_KEY at launch",
    "--nnodes": "hardware.nodes",
    "--node-rank": "SM12X_NODE_RANK at launch",
    "--dist-init-addr": "SM12X_HEAD_ADDR at launch and multinode.dist_init_port",
    "--speculative-algorithm": "the dspark section (always DSPARK)",
    "--speculative-dspark-block-size": "dspark.block_size",
    "--speculative-num-draft-tokens": "dspark.block_size (sglang sets it to block size + 1)",
    "--speculative-dspark-sps-table-path": "dspark.sps_table_path",
}

# Environment variables the launcher renders from other sections.
DERIVED_ENV = {
    "SGLANG_RAGGED_VERIFY_MODE": "dspark.ragged_verify",
}

# Other spellings sglang accepts (aliases, argparse prefixes, deprecated
# names): the lints below read the canonical name only.
CANONICAL_FLAGS = {
    "--tp": "--tp-size",
    "--tensor-parallel-size": "--tp-size",
    "--model": "--model-path",
    "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode",
    "--dp": "--dp-size",
    "--data-parallel-size": "--dp-size",
    "--ep": "--ep-size",
    "--expert-parallel-size": "--ep-size",
}

# Environment variables sglang 0.5.16-0.5.18 no longer reads under that name.
RETIRED_ENV = {
    "SGLANG_ENABLE_SPEC_V2": "sglang >= 0.5.16 removed it (speculative decoding always "
    "runs the V2 worker) and only logs a warning: drop it",
    "SGLANG_ENABLE_THINKING": "sglang >= 0.5.16 renamed it: write SGLANG_DEFAULT_THINKING",
}


@lint("tracks")
def _tracks(recipe: Recipe) -> Iterator[Finding]:
    known = tracks()
    for name in recipe.tracks or ():
        if name not in known:
            yield Finding(
                "tracks",
                "error",
                f"tracks: {name!r} is not a track of this sm12x (versions.env SM12X_TRACKS: "
                f"{', '.join(known)}): name one of them, or omit `tracks` for every track",
            )
    if recipe.tracks is not None and not recipe.tracks:
        yield Finding("tracks", "error", "tracks is empty: name at least one track, or omit it")


@lint("dspark-depth-5")
def _dspark_depth_5(recipe: Recipe) -> Iterator[Finding]:
    if recipe.dspark.block_size == 5 and recipe.dspark.acknowledge_block_size_5 is None:
        yield Finding(
            "dspark-depth-5",
            "error",
            "dspark.block_size 5 corrupts outputs under load on sm_12x (repetition loops, "
            "</think> leaks; 3, 4, 6 and 7 were clean in the field sweep): use 4, or set "
            "dspark.acknowledge_block_size_5 to the reason you accept it",
        )
    if recipe.dspark.block_size != 5 and recipe.dspark.acknowledge_block_size_5 is not None:
        yield Finding(
            "dspark-depth-5",
            "warning",
            f"dspark.acknowledge_block_size_5 has no effect at block size "
            f"{recipe.dspark.block_size}: remove it",
        )


def _rows_fix_elsewhere() -> str:
    """Where a patch that widens the verify rows exists, for the message."""
    found: dict[str, list[str]] = {}
    for patch in patch_series.load_patches():
        if patch.get("verify_rows", 0) > patch_series.UNPATCHED_VERIFY_ROWS:
            found.setdefault(patch["file"], []).extend(patch["sglang"])
    return "; ".join(
        f"{name} exists for sglang {', '.join(sorted(versions))}"
        for name, versions in sorted(found.items())
    )


@lint("dspark-verify-rows")
def _dspark_verify_rows(recipe: Recipe) -> Iterator[Finding]:
    # DSPARK at depth d verifies d + 1 rows per step; DeepSeek-V4's compressor must keep
    # every one of them in its state ring, and how many it keeps depends on the
    # image's sglang and its patch series (patches/sglang/patches.toml). A recipe runs
    # on every track's image (versions.env), so each track's sglang must keep them.
    # Ragged verify (compact, cap-accept) gives each request its own width, 1 to
    # depth + 1 rows, in one step. The plan keeps rows per request, so the widest
    # bounds the batch, but only the planners sm12x checked for it (0020's write rule
    # for widths 1..10 and mixed batches; 0.5.23's mtp_pad, a [[release]] entry) say
    # so: the unpatched 4-row cap was measured for uniform verifies only.
    depth = recipe.dspark.block_size
    ragged = recipe.dspark.ragged_verify != "static"
    if recipe.model.model_line is V41_FLASH:
        yield from _v41_verify_rows(recipe)
        return
    for track in recipe_tracks(recipe):
        version = load_versions(track)["SGLANG_VERSION"]
        allowed = patch_series.verify_rows(version)
        image = f"the {track} track's sglang {version}"
        checked = allowed.patch is not None or version in patch_series.releases()
        if depth + 1 <= allowed.rows and ragged and not checked:
            yield Finding(
                "dspark-verify-rows",
                "error",
                f"dspark.ragged_verify {recipe.dspark.ragged_verify} mixes per-request verify "
                f"widths of 1 to {depth + 1} rows in one step, but {image} has no verify-row "
                "fix (a patches.toml entry with verify_rows, or a [[release]] entry) whose "
                "plan was checked for mixed widths: use ragged_verify: static, or give "
                f"patches/sglang/{version}/ the fix"
                + (f" ({elsewhere})" if (elsewhere := _rows_fix_elsewhere()) else ""),
            )
            continue
        if depth + 1 <= allowed.rows:
            continue
        if allowed.patch is None:
            elsewhere = _rows_fix_elsewhere()
            message = (
                f"dspark.block_size {depth} verifies {depth + 1} rows per step, but {image} "
                f"with its patch series keeps at most {allowed.rows} verify rows in "
                "DeepSeek-V4's compressed-KV state (kMaxMTPDraftTokens in c_plan.cuh, "
                f"upstream #32183): the rest read stale compressed KV and outputs drift "
                f"under load. Use block_size {allowed.rows - 1}, or give "
                f"patches/sglang/{version}/ the verify-row fix (a patches.toml entry with "
                "verify_rows)" + (f" ({elsewhere})" if elsewhere else "")
            )
        else:
            message = (
                f"dspark.block_size {depth} verifies {depth + 1} rows per step; even with "
                f"{allowed.patch} DeepSeek-V4's compressor state ring keeps at most "
                f"{allowed.rows} verify rows (depth {allowed.rows - 1}) for {image}: "
                f"use block_size {allowed.rows - 1} or less"
            )
        yield Finding("dspark-verify-rows", "error", message)


def _v41_verify_rows(recipe: Recipe) -> Iterator[Finding]:
    # DeepSeek-V4.1 compresses at ratios 2 and 1 only (lines.V41_FLASH.compress_ratios):
    # c_plan.cuh's c4/c128 plan, which verify_rows bounds, serves none of its layers.
    # Its own bound is the [[release]] entry's v41_verify_rows (patches.toml says what
    # shows it); compact ragged verify is the ragged-verify lint's to refuse.
    depth = recipe.dspark.block_size
    for track in recipe_tracks(recipe):
        version = load_versions(track)["SGLANG_VERSION"]
        rows = patch_series.v41_verify_rows(version)
        image = f"the {track} track's sglang {version}"
        if rows is None:
            yield Finding(
                "dspark-verify-rows",
                "error",
                f"{image} has no check of DeepSeek-V4.1's ratio-2/ratio-1 compress paths "
                f"under DSPARK verify (a [[release]] entry with v41_verify_rows in "
                f"patches/sglang/patches.toml): no block size is shown to serve V4.1 there",
            )
        elif depth + 1 > rows:
            yield Finding(
                "dspark-verify-rows",
                "error",
                f"dspark.block_size {depth} verifies {depth + 1} rows per step; DeepSeek-V4.1's "
                f"ratio-2 pair ring is shown to serve at most {rows} on {image} "
                f"(patches.toml v41_verify_rows): use block_size {rows - 1} or less",
            )


@lint("kv-cache-dtype")
def _kv_cache_dtype(recipe: Recipe) -> Iterator[Finding]:
    value = recipe.flag_value("--kv-cache-dtype")
    if value != "fp8_e4m3":
        found = "missing (sglang then uses the model dtype)" if value is None else f"{value!r}"
        yield Finding(
            "kv-cache-dtype",
            "error",
            f"--kv-cache-dtype is {found}: on sm_12x only fp8_e4m3 works with this model "
            "(bf16 crash-loops); set flags.--kv-cache-dtype.value: fp8_e4m3",
        )


@lint("moe-runner-backend")
def _moe_runner_backend(recipe: Recipe) -> Iterator[Finding]:
    value = recipe.flag_value("--moe-runner-backend")
    if value != "flashinfer_mxfp4":
        found = "missing (sglang then picks one)" if value is None else f"{value!r}"
        yield Finding(
            "moe-runner-backend",
            "error",
            f"--moe-runner-backend is {found}: on sm_12x only flashinfer_mxfp4 works "
            "(triton fails on a hidden-size mismatch, flashinfer_trtllm corrupts outputs); "
            "set flags.--moe-runner-backend.value: flashinfer_mxfp4",
        )


@lint("tp-size")
def _tp_size(recipe: Recipe) -> Iterator[Finding]:
    hw = recipe.hardware
    want = hw.gpus_per_node * hw.nodes
    value = recipe.flag_value("--tp-size")
    if not recipe.has_flag("--tp-size"):
        yield Finding(
            "tp-size",
            "error",
            f"--tp-size is missing (sglang would use 1 GPU): set it to {want} "
            f"(gpus_per_node {hw.gpus_per_node} x nodes {hw.nodes})",
        )
    elif not isinstance(value, int) or value != want:
        yield Finding(
            "tp-size",
            "error",
            f"--tp-size is {value!r} but the hardware has {hw.gpus_per_node} GPU(s) per node "
            f"x {hw.nodes} node(s): set it to {want}, or fix hardware.gpus_per_node/nodes",
        )


@lint("cuda-graph-bs")
def _cuda_graph_bs(recipe: Recipe) -> Iterator[Finding]:
    # The decode graph's batch is one DP rank's batch: with DP attention each rank
    # runs max_running_requests // dp requests (sglang's pool configurator divides
    # by attn_dp_size), so graphs above that never replay.
    value = recipe.flag_value("--cuda-graph-max-bs-decode")
    if value is None:
        return
    total = recipe.max_running_requests
    dp = attention_dp(recipe)
    limit = total // dp
    source = (
        "--max-running-requests"
        if recipe.has_flag("--max-running-requests")
        else "sglang's default --max-running-requests for DeepSeek-V4"
    )
    if dp > 1:
        source += f" ({total}) / DP attention's {dp} ranks, per rank"
    if not isinstance(value, int) or value > limit:
        yield Finding(
            "cuda-graph-bs",
            "error",
            f"--cuda-graph-max-bs-decode {value!r} exceeds {source} ({limit}): graphs for "
            "batches that can never run only cost memory and boot time; lower it to at "
            f"most {limit} or raise --max-running-requests",
        )


@lint("compact-full-rank")
def _compact_full_rank(recipe: Recipe) -> Iterator[Finding]:
    """Compact ragged verify at a DP rank that holds as many requests as its largest
    decode graph: the last request is handed the graph tier's leftover rows.

    Read in sglang 0.5.23; 0.5.17 pads the same way (benchmarks/dsv4_full_rank_check.py
    runs both trees' own chains, on graph replay and eager, at every tier each
    compact recipe's rank can be set to). A compact verify replays a token-keyed graph: its tier is
    graph_num_tokens, at least num_reqs x (gamma + 1) (dspark_planner.py
    verify_layout_graph_num_tokens_floor) rounded up to a captured tier, and its slots
    are min(graph_num_tokens, max_bs) (decode_cuda_graph_runner.py
    _ragged_capture_slots). DeepSeek-V4's backend pads the live layout to those slots
    with no cap (deepseek_v4_backend.py _resolve_verify_layout ->
    RaggedVerifyLayout.padded_to_bucket(padded_bs=bs); speculative/ragged_verify.py:
    "with no padding rows, the last real row can exceed the per-request verify
    window"), and _padded_to_bucket_kernel gives the leftover graph_num_tokens -
    sum(verify_lens) to the padding slots, or, when there are none, to the last real
    request.

    With n requests on a rank and n < max_bs there always is a padding slot: gamma >=
    1, so graph_num_tokens >= 2n >= n + 1, and the slots min(graph_num_tokens, max_bs)
    >= n + 1. With n == max_bs there is none (slots = max_bs = n), and the leftover is
    positive whenever a request verifies fewer than gamma + 1 rows (more than max_bs
    requests cannot replay a graph: ragged_layout_exceeds_captured_grid). That holds at
    every tier above the batch's rows, not only the top one: the SPS planner's own
    tier or a larger one a DP neighbour's batch sets (64 width-1 requests on tier 80:
    17 rows to the last).

    That is graph replay. The eager path (a verify that replays no graph, its tier set
    by a DP neighbour's batch through the MLP sync) pads with bs = len(seq_lens): it
    never has a padding slot, so pristine sglang hands the last request the leftover at
    any batch size, one request included (docs/benchmarks.md#compact-verify-at-a-full-dp-rank).

    Near --context-length the same leftover rows read past their request's
    req_to_token row: their causal lengths are its position plus the leftover, and the
    SWA-index kernel loads req_to_token[rid, pos - k] with no upper bound (past the
    pool's last row: outside the allocation). A compact recipe needs both fixes on
    its track: compact_full_rank (the compressor, 0024) and compact_context_limit
    (the padding rows' reads, 0025; docs/benchmarks.md#compact-verify-near-the-context-limit).

    So the invariant would be "a rank never holds max_bs requests", i.e. the rank's
    request limit below max_bs. sglang 0.5.23 makes that unreachable from a recipe:
    max_bs is max(capture_bs), and get_batch_sizes_to_capture keeps only batches up to
    req_to_token_pool.size, adding that size when the cap is above it; the pool is
    the rank's request limit (max_running_requests // attn_dp_size, at attention TP
    1 with no rounding). So max_bs <= the rank's limit for every
    --max-running-requests and --cuda-graph-max-bs-decode, and a rank reaches max_bs
    requests whenever its load does: lowering the limit to ranks x (cap - 1) makes
    the pool, and with it max_bs, cap - 1. Only a fix in sglang (a patch, or a release
    whose own code caps the widths or keeps a padding slot) or static verify removes
    it. cap-accept is not affected: the token-keyed graphs and the uncapped padding
    are compact only (ragged_verify_compact_graphs_enabled, _resolve_verify_layout
    returns None for any other mode).
    """
    d = recipe.dspark
    if d.ragged_verify != "compact":
        if d.acknowledge_compact_full_rank is not None:
            yield Finding(
                "compact-full-rank",
                "warning",
                f"dspark.acknowledge_compact_full_rank has no effect with ragged_verify "
                f"{d.ragged_verify}: remove it",
            )
        return
    rank = per_rank_requests(recipe)
    graph = largest_decode_graph(recipe)
    dp = attention_dp(recipe)
    cap = recipe.flag_value("--cuda-graph-max-bs-decode")
    written = f"--cuda-graph-max-bs-decode {cap}" if cap is not None else "sglang's own cap"
    limit = (
        f"--max-running-requests {recipe.max_running_requests} // {dp} DP ranks"
        if dp > 1
        else f"--max-running-requests {recipe.max_running_requests}"
    )
    unfixed = []
    for track in recipe_tracks(recipe):
        version = load_versions(track)["SGLANG_VERSION"]
        missing = [
            key
            for key, fix in (
                ("compact_full_rank", patch_series.compact_full_rank_fix),
                ("compact_context_limit", patch_series.compact_context_limit_fix),
            )
            if fix(version) is None
        ]
        if missing:
            unfixed.append((track, version, missing))
    if not unfixed:
        if d.acknowledge_compact_full_rank is not None:
            yield Finding(
                "compact-full-rank",
                "warning",
                "dspark.acknowledge_compact_full_rank has no effect: every track's sglang "
                "has the fixes (patches.toml compact_full_rank and compact_context_limit): "
                "remove it",
            )
        return
    if d.acknowledge_compact_full_rank is not None:
        return
    for track, version, missing in unfixed:
        yield Finding(
            "compact-full-rank",
            "error",
            f"compact ragged verify on the {track} track's sglang {version}: a DP rank "
            f"holds up to {rank} requests ({limit}) and its largest decode graph has "
            f"{graph} slots ({written}, clamped by sglang to the rank's request pool), "
            f"so a step with {graph} requests on a rank has no padding slot (an eager "
            "verify has none at any batch size) and the last request is handed the "
            "tier's leftover verify rows, corrupting its compressed KV "
            "(docs/benchmarks.md#compact-verify-at-a-full-dp-rank) and, near the "
            "context limit, reading past its req_to_token row "
            "(docs/benchmarks.md#compact-verify-near-the-context-limit). "
            "Lowering --max-running-requests or raising the graph cap cannot prevent it "
            "on this sglang (its graphs never exceed the request pool): use "
            f"ragged_verify: static, give patches/sglang/{version}/ the fixes (entries "
            f"with {' = true and '.join(missing)} = true), or set "
            "dspark.acknowledge_compact_full_rank to the reason you accept it",
        )


# Where a recipe speaks of sglang's defaults: the word, and the names of settings.
_DEFAULT_WORD = re.compile(r"(?<![A-Za-z0-9_])defaults?(?![A-Za-z0-9_])", re.IGNORECASE)
_SETTING_NAME = re.compile(r"(?<![A-Za-z0-9_-])(--[a-z0-9][a-z0-9-]*|[A-Z][A-Z0-9]*_[A-Z0-9_]+)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")


def claimed_defaults(recipe: Recipe) -> dict[str, str | int | float | bool]:
    """Every sglang default the recipe states, by flag or variable name: flags' and
    variables' sglang_default and the sglang_defaults section. The wheels-tier suite
    holds each to sglang's own resolution of the recipe."""
    claims: dict[str, str | int | float | bool] = {}
    for name, flag in recipe.flags.items():
        if flag.sglang_default is not None:
            claims[name] = flag.sglang_default
    for name, var in recipe.env.items():
        if var.sglang_default is not None:
            claims[name] = var.sglang_default
    for name, left in recipe.sglang_defaults.items():
        claims[name] = left.sglang_default
    return claims


@lint("default-claim")
def _default_claim(recipe: Recipe) -> Iterator[Finding]:
    # A default stated in prose cannot be checked; stated as sglang_default it is
    # (tests/unit/test_sglang_validates_recipes.py, against each track's resolution).
    claims = claimed_defaults(recipe)
    for name in recipe.sglang_defaults:
        if name in recipe.flags or name in recipe.env:
            where = "flags" if name in recipe.flags else "env"
            yield Finding(
                "default-claim",
                "error",
                f"sglang_defaults.{name} is also in {where}: a setting the recipe writes is "
                f"not left to sglang; remove one (a default of a setting it writes goes in "
                f"{where}.{name}.sglang_default)",
            )
    entries: list[tuple[str, str, object]] = [
        *((f"flags.{n}", n, f) for n, f in recipe.flags.items()),
        *((f"env.{n}", n, v) for n, v in recipe.env.items()),
    ]
    for where, name, entry in entries:
        why = getattr(entry, "why", "")
        if _DEFAULT_WORD.search(why) and getattr(entry, "sglang_default", None) is None:
            yield Finding(
                "default-claim",
                "error",
                f"{where}.why speaks of a default, but {where} states no sglang_default: "
                f"write {where}.sglang_default (what sglang resolves {name} to for this "
                "recipe without it; the wheels suite checks it), or drop the claim",
            )
    notes = [("status.note", recipe.status.note)]
    if recipe.configuration is not None:
        notes.append(("configuration.why", recipe.configuration.why))
    for where, text in notes:
        for sentence in _SENTENCE_END.split(" ".join(text.split())):
            if not _DEFAULT_WORD.search(sentence):
                continue
            names = [n for n in _SETTING_NAME.findall(sentence) if n not in claims]
            for name in dict.fromkeys(names):
                yield Finding(
                    "default-claim",
                    "error",
                    f"{where} speaks of sglang's default beside {name} but the recipe "
                    f"states none for it: add sglang_defaults.{name} (sglang_default and "
                    f"why; or {name}.sglang_default where the recipe sets it), or take "
                    "the claim out of that sentence",
                )


# sglang reads this threshold per DP rank ("per-rank local query rows, after
# DP-attention sharding", environ.py), and DP attention divides the prefill chunk
# by --dp-size: set to the per-rank chunk, a full chunk takes the non-paged path.
INDEXER_MIN_QUERY = "SGLANG_OPT_DSV4_NONPAGED_INDEXER_MIN_QUERY_TOKENS"


@lint("indexer-min-query-tokens")
def _indexer_min_query_tokens(recipe: Recipe) -> Iterator[Finding]:
    var = recipe.env.get(INDEXER_MIN_QUERY)
    if var is None:
        return
    chunk = recipe.flag_value("--chunked-prefill-size")
    if not isinstance(chunk, int) or chunk <= 0:
        yield Finding(
            "indexer-min-query-tokens",
            "error",
            f"env.{INDEXER_MIN_QUERY} is set but --chunked-prefill-size is not a positive "
            "integer: write --chunked-prefill-size so the threshold can be set to one DP "
            "rank's chunk",
        )
        return
    dp = attention_dp(recipe)
    want = chunk // dp
    if var.from_host or var.value != str(want):
        shown = "taken from the host" if var.from_host else repr(var.value)
        per = (
            f"--chunked-prefill-size {chunk} / {dp} DP ranks"
            if dp > 1
            else (f"--chunked-prefill-size {chunk} (no DP attention)")
        )
        yield Finding(
            "indexer-min-query-tokens",
            "error",
            f"env.{INDEXER_MIN_QUERY} is {shown} but sglang compares it with one DP rank's "
            f'query rows, whose prefill chunk is {per} = {want}: set it to "{want}"',
        )


@lint("dp-attention")
def _dp_attention(recipe: Recipe) -> Iterator[Finding]:
    # What sglang's ServerArgs resolution requires of DP attention (0.5.17:
    # server_args.py _handle_data_parallelism, arg_groups/overrides.py
    # _data_parallelism_defaults and _dp_lm_head_validation; both: speculative_hook.py
    # _handle_dspark). DP attention is `--dp-size N --enable-dp-attention` up to
    # 0.5.18 and `--attn-dp-size N` from 0.5.23 (the old spelling deprecated there).
    def error(message: str) -> Finding:
        return Finding("dp-attention", "error", message)

    for name in ("--dp-size", "--attn-dp-size"):
        raw = recipe.flag_value(name)
        if recipe.has_flag(name) and (not isinstance(raw, int) or raw < 1):
            yield error(f"{name} is {raw!r}: write a positive integer that divides --tp-size")
            return
    dp = dp_size(recipe)
    tp = recipe.flag_value("--tp-size")
    enabled = recipe.has_flag("--enable-dp-attention")
    new_spelling = recipe.has_flag("--attn-dp-size")
    if new_spelling and enabled:
        yield error(
            "--attn-dp-size and --enable-dp-attention are two spellings of DP "
            "attention: keep --attn-dp-size (sglang >= 0.5.23) and remove the other"
        )
    if enabled and dp == 1:
        yield error(
            "--enable-dp-attention with --dp-size 1 (or none): sglang silently turns DP "
            "attention off; set --dp-size to the number of attention replicas (a divisor "
            "of --tp-size) or remove --enable-dp-attention"
        )
    if dp > 1 and not enabled:
        yield error(
            f"--dp-size {dp} without --enable-dp-attention starts {dp} whole replicas of "
            f"--tp-size {tp} each ({dp} x {tp} GPUs; across nodes sglang refuses it): for "
            "DP attention inside the one TP group write --attn-dp-size (sglang >= 0.5.23) "
            "or add --enable-dp-attention, or remove --dp-size"
        )
    width = attention_dp(recipe)
    if isinstance(tp, int) and width > 1 and tp % width:
        yield error(
            f"DP attention width {width} does not divide --tp-size {tp} (sglang "
            "asserts tp_size % dp_size == 0): use a divisor of the tensor-parallel size"
        )
    if recipe.has_flag("--enable-dp-lm-head") and width == 1:
        yield error(
            "--enable-dp-lm-head needs DP attention (a width above 1): sglang "
            "refuses it otherwise; remove it"
        )
    if width > 1 and not recipe.has_flag("--enable-dp-lm-head"):
        yield error(
            "DSPARK with DP attention needs --enable-dp-lm-head (sglang refuses to "
            "launch without it): add the switch"
        )
    ep = recipe.flag_value("--ep-size")
    if recipe.has_flag("--ep-size") and (
        not isinstance(ep, int) or ep < 1 or (isinstance(tp, int) and tp % ep)
    ):
        yield error(
            f"--ep-size {ep!r} must be a positive divisor of --tp-size {tp} (the "
            "experts are split across the tensor-parallel group)"
        )
    if recipe.has_flag("--enable-prefill-delayer") and width == 1:
        yield Finding(
            "dp-attention",
            "warning",
            "--enable-prefill-delayer only holds prefills back across DP attention "
            "ranks; without DP attention it does nothing: remove it",
        )


@lint("ragged-verify")
def _ragged_verify(recipe: Recipe) -> Iterator[Finding]:
    d = recipe.dspark
    has_table = d.sps_table is not None or d.sps_table_path is not None
    if d.sps_table is not None and d.sps_table_path is not None:
        yield Finding(
            "ragged-verify",
            "error",
            "dspark.sps_table: tuned and dspark.sps_table_path both name a table: keep one "
            "(tuned: the table `sm12x tune` made on this rig; sps_table_path: a file of yours)",
        )
    if d.ragged_verify != "static" and not has_table:
        yield Finding(
            "ragged-verify",
            "error",
            f"dspark.ragged_verify {d.ragged_verify} without an SPS table: sglang's verify "
            "budget then degenerates to verify-all (zero throughput gain, sglang's own help "
            "says); set dspark.sps_table: tuned (and run `sm12x tune` once on the rig) or "
            "dspark.sps_table_path, or use ragged_verify: static",
        )
    if d.ragged_verify != "static" and recipe.model.model_line is V41_FLASH:
        # sglang 0.5.23's V4.1 low-ratio sources (the c2 ring, the c1/c2 indexers) take
        # each verify row's request from dsv41_sparse.token_req_indices, which repeats
        # every request draft_token_num times, while ragged rows are packed by
        # verify_lens (and the c2 verify kernel takes uniform blocks only).
        yield Finding(
            "ragged-verify",
            "error",
            f"dspark.ragged_verify {d.ragged_verify} with DeepSeek-V4.1: sglang 0.5.23's V4.1 "
            "compressor and indexers assume every request verifies block_size + 1 rows "
            "(token_req_indices), so ragged rows go to the wrong requests, or the CUDA "
            "graph capture fails (repeat_interleave: Invalid output_size); use "
            "ragged_verify: static",
        )
    tp = recipe.flag_value("--tp-size")
    dp = attention_dp(recipe)
    if d.ragged_verify == "compact" and dp > 1 and isinstance(tp, int) and dp < tp:
        # dspark_planner.py: the DP ranks agree a verify graph tier only when attention
        # TP is 1; otherwise the tier is "pinned" and no rank's verify shrinks.
        yield Finding(
            "ragged-verify",
            "warning",
            f"compact ragged verify with DP attention width {dp} below --tp-size {tp}: "
            "sglang agrees the verify graph tier across DP ranks only when each rank's "
            "attention TP is 1 (else it pins the tier, graph_tier=pinned in its log), so "
            f"the verify budget buys little; set the width to {tp} if memory allows",
        )
    if d.ragged_verify == "static" and has_table:
        yield Finding(
            "ragged-verify",
            "warning",
            "an SPS table with dspark.ragged_verify static: only the ragged-verify scheduler "
            "reads it (sglang logs that it is a no-op); set ragged_verify: compact or drop "
            "the table",
        )


@lint("flashmla-triton")
def _flashmla_triton(recipe: Recipe) -> Iterator[Finding]:
    var = recipe.env.get("SGLANG_SM120_FLASHMLA_BACKEND")
    if var is not None and (var.value == "triton" or var.default == "triton"):
        yield Finding(
            "flashmla-triton",
            "warning",
            "SGLANG_SM120_FLASHMLA_BACKEND=triton routes every sparse-MLA call, including "
            "the topk-2048 decode hot path, through Triton and costs throughput; the sm12x "
            "image carries the dispatch patch, so it is not needed: remove it",
        )


@lint("weight-loader-mmap")
def _weight_loader_mmap(recipe: Recipe) -> Iterator[Finding]:
    if recipe.has_flag("--weight-loader-disable-mmap") and recipe.hardware.unified_memory:
        yield Finding(
            "weight-loader-mmap",
            "error",
            "--weight-loader-disable-mmap hangs unified-memory hosts (DGX Spark) while "
            "loading: remove it; against OOM kills lower --mem-fraction-static or add "
            "--weight-loader-drop-cache-after-load",
        )


@lint("derived-flag")
def _derived_flag(recipe: Recipe) -> Iterator[Finding]:
    for name in recipe.flags:
        if name in DERIVED_FLAGS:
            yield Finding(
                "derived-flag",
                "error",
                f"flags.{name} is rendered from {DERIVED_FLAGS[name]}: remove it from flags "
                "so it is written once",
            )


@lint("flag-spelling")
def _flag_spelling(recipe: Recipe) -> Iterator[Finding]:
    for name in recipe.flags:
        if name in CANONICAL_FLAGS:
            yield Finding(
                "flag-spelling",
                "error",
                f"flags.{name}: write {CANONICAL_FLAGS[name]} (the name the lints and "
                "sglang's docs use)",
            )


@lint("derived-env")
def _derived_env(recipe: Recipe) -> Iterator[Finding]:
    for name in recipe.env:
        if name in DERIVED_ENV:
            yield Finding(
                "derived-env",
                "error",
                f"env.{name} is rendered from {DERIVED_ENV[name]}: set it there and remove "
                "it from env, so it is written once",
            )


# What some sglang releases lack: (flag or variable, value or None for any) -> (the
# first tracked sglang that has it, or None for none, and what it is).
# tests/unit/test_sglang_accepts_recipes.py proves each entry against every wheel.
FEATURE_SINCE: dict[tuple[str, str | None], tuple[str | None, str]] = {
    ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", None): ("0.5.23", "FlashInfer's PCIe-IPC all-reduce"),
    ("SGLANG_PCIE_IPC_MAX_NUMEL", None): ("0.5.23", "the PCIe-IPC all-reduce's workspace bound"),
    ("--attn-dp-size", None): ("0.5.23", "DP attention's own flag"),
    ("--load-balance-method", "prefix_affinity"): (
        None,
        "prefix-affinity DP routing (a patch of a public deployment, in no release)",
    ),
}


# What a later sglang deprecates (it warns, and drops it later): (flag) -> (the first
# tracked sglang that deprecates it, what to write instead). Proven against the wheels
# by the same test.
DEPRECATED_SINCE: dict[str, tuple[str, str]] = {
    "--enable-dp-attention": (
        "0.5.23",
        "write --attn-dp-size N instead of --dp-size N --enable-dp-attention "
        "(sglang says it goes after 2026-12-31)",
    ),
}


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3] if part.isdigit())


def _uses(recipe: Recipe, name: str, value: str | None) -> bool:
    if name.startswith("--"):
        return recipe.has_flag(name) and (value is None or recipe.flag_value(name) == value)
    var = recipe.env.get(name)
    return var is not None and (value is None or var.value == value)


@lint("track-feature")
def _track_feature(recipe: Recipe) -> Iterator[Finding]:
    for (name, value), (since, what) in FEATURE_SINCE.items():
        if not _uses(recipe, name, value):
            continue
        shown = name if value is None else f"{name} {value}"
        for track in recipe_tracks(recipe):
            version = load_versions(track)["SGLANG_VERSION"]
            if since is not None and _release(version) >= _release(since):
                continue
            where = f"sglang {since} on" if since else "no tracked sglang"
            yield Finding(
                "track-feature",
                "error",
                f"{shown} ({what}) is not in the {track} track's sglang {version} (it is in "
                f"{where}): limit the recipe with `tracks:` to the tracks that have it, or "
                "remove it",
            )
    for name, (since, instead) in DEPRECATED_SINCE.items():
        if not recipe.has_flag(name):
            continue
        for track in recipe_tracks(recipe):
            version = load_versions(track)["SGLANG_VERSION"]
            if _release(version) >= _release(since):
                yield Finding(
                    "track-feature",
                    "error",
                    f"{name} is deprecated in the {track} track's sglang {version}: "
                    f"{instead}; limit the recipe with `tracks:` if it must keep the old "
                    "spelling",
                )


@lint("retired-env")
def _retired_env(recipe: Recipe) -> Iterator[Finding]:
    for name in recipe.env:
        if name in RETIRED_ENV:
            yield Finding("retired-env", "warning", f"env.{name}: {RETIRED_ENV[name]}")


@lint("model-line-track")
def _model_line_track(recipe: Recipe) -> Iterator[Finding]:
    # A line's code exists from one sglang release on (sm12x.recipe.lines); a recipe
    # runs on every track it names (or every track), so each must have it.
    line = recipe.model.model_line
    for track in recipe_tracks(recipe):
        version = load_versions(track)["SGLANG_VERSION"]
        if not serves(line, version):
            able = [t for t in tracks() if serves(line, load_versions(t)["SGLANG_VERSION"])]
            yield Finding(
                "model-line-track",
                "error",
                f"model.line {line.name} needs sglang >= {line.min_sglang} "
                f"({line.min_sglang_why}), but the {track} track's sglang is {version}: "
                + (
                    f"set `tracks: [{', '.join(able)}]`"
                    if able
                    else "no track of this sm12x can serve it"
                ),
            )


@lint("model-line-parsers")
def _model_line_parsers(recipe: Recipe) -> Iterator[Finding]:
    # In sglang 0.5.23 the tool-call parser also picks the prompt encoder
    # (chat_encoding.resolve_chat_encoding_spec: deepseekv4 -> V4's, deepseekv41 ->
    # V4.1's), and a reasoning parser of one line with the tool parser of the other
    # stops the boot (serving_deepseek_recipe: "cannot be mixed"); a V4.1 parser on a
    # V4 model is refused per request ("this server does not serve that model").
    line = recipe.model.model_line
    for flag, want in (
        ("--reasoning-parser", line.reasoning_parser),
        ("--tool-call-parser", line.tool_call_parser),
    ):
        value = recipe.flag_value(flag)
        if value != want:
            found = "missing" if value is None else f"{value!r}"
            yield Finding(
                "model-line-parsers",
                "error",
                f"{flag} is {found}, but {line.title} needs {want}: sglang picks the prompt "
                f"encoder and the output parser from it; set flags.{flag}.value: {want}",
            )


# What sglang 0.5.23's validate_deepseek_v41_features refuses for V4.1 at boot
# ("DeepSeek-V4.1 does not support ... yet") though V4 accepts it, as flag -> what.
V41_REFUSED_FLAGS = {
    "--enable-hisparse": "HiSparse",
    "--enable-two-batch-overlap": "two-batch overlap",
}
# ... and what it refuses for V4 but V4.1 accepts.
V4_REFUSED_FLAGS = {
    "--enable-encoder-swa-bounded-replay": 'encoder SWA bounded replay ("requires DeepSeek-V4.1")',
}


@lint("model-line-refused")
def _model_line_refused(recipe: Recipe) -> Iterator[Finding]:
    line = recipe.model.model_line
    refused = V41_REFUSED_FLAGS if line is V41_FLASH else V4_REFUSED_FLAGS
    for name, what in refused.items():
        if recipe.has_flag(name):
            yield Finding(
                "model-line-refused",
                "error",
                f"flags.{name}: sglang 0.5.23 refuses {what} for {line.title} at boot "
                "(arg_groups/deepseek_v4_hook.py validate_deepseek_v41_features): remove it",
            )
    pp = recipe.flag_value("--pp-size")
    if line is V41_FLASH and isinstance(pp, int) and pp > 1:
        yield Finding(
            "model-line-refused",
            "error",
            f"--pp-size {pp}: sglang 0.5.23 refuses pipeline parallelism for DeepSeek-V4.1 "
            "(validate_deepseek_v41_features): use tensor parallelism across the GPUs",
        )
    if recipe.has_flag("--enable-encoder-swa-bounded-replay") and line is V41_FLASH:
        chunk = recipe.flag_value("--chunked-prefill-size")
        if not isinstance(chunk, int) or chunk < 128 + 1:
            yield Finding(
                "model-line-refused",
                "error",
                "--enable-encoder-swa-bounded-replay needs --chunked-prefill-size of at least "
                "128 replay tokens plus one page (validate_deepseek_v41_encoder_replay_budget)",
            )


# Public field reports of V4.1-Flash on these GPUs (/work/shared/reference/v41-field.md):
# 8x RTX PRO 6000 (sgl-project/sglang#40877, vllm-project/vllm#56700) and 4x DGX
# Spark (0xSero/local-ai-registry#55).
V41_FIELD: dict[str, dict[str, Any]] = {
    "rtx-pro-6000": {
        "block_sizes": (6,),
        "max_chunked_prefill": 2048,
        "source": "sgl-project/sglang#40877 (8x RTX PRO 6000, TP8/EP8)",
    },
    "gb10": {
        "block_sizes": (3,),
        "max_chunked_prefill": None,
        "source": "0xSero/local-ai-registry#55 (4x DGX Spark, TP4)",
    },
}


@lint("v41-layout")
def _v41_layout(recipe: Recipe) -> Iterator[Finding]:
    # RTX PRO 6000: the field runs V4.1 with tensor parallelism and the experts split
    # over every card (TP8/EP8, sgl-project/sglang#40877; TP4/EP4 since its author's
    # 2026-09-27 update); attention DP, or the MoE split by TP alone, did not start.
    if recipe.model.model_line is not V41_FLASH or recipe.hardware.gpu != "rtx-pro-6000":
        return
    tp, ep = recipe.flag_value("--tp-size"), recipe.flag_value("--ep-size")
    gpus = recipe.hardware.total_gpus
    if ep != gpus or tp != gpus or recipe.has_flag("--enable-dp-attention"):
        yield Finding(
            "v41-layout",
            "error",
            f"DeepSeek-V4.1-Flash on RTX PRO 6000 started only with TP and EP over every card "
            f"in the field (TP8/EP8 in sgl-project/sglang#40877, TP4/EP4 in its 2026-09-27 "
            f"update; this recipe: --tp-size {tp}, --ep-size {ep}"
            + (", --enable-dp-attention" if recipe.has_flag("--enable-dp-attention") else "")
            + f"): set --tp-size {gpus} and --ep-size {gpus}, without --enable-dp-attention",
        )


@lint("v41-field")
def _v41_field(recipe: Recipe) -> Iterator[Finding]:
    field = V41_FIELD.get(recipe.hardware.gpu)
    if recipe.model.model_line is not V41_FLASH or field is None:
        return
    depth = recipe.dspark.block_size
    if depth not in field["block_sizes"]:
        sizes = ", ".join(map(str, field["block_sizes"]))
        yield Finding(
            "v41-field",
            "warning",
            f"dspark.block_size {depth}: the field ran V4.1-Flash on {recipe.hardware.gpu} at "
            f"block size {sizes} only ({field['source']}); {depth} is unreported there",
        )
    limit = field["max_chunked_prefill"]
    chunk = recipe.flag_value("--chunked-prefill-size")
    if limit is not None and (not isinstance(chunk, int) or chunk > limit):
        yield Finding(
            "v41-field",
            "warning",
            f"--chunked-prefill-size {chunk}: the layout that served V4.1-Flash on "
            f"{recipe.hardware.gpu} ran {limit} ({field['source']}); another configuration "
            f"crashed at run time: use {limit} or less",
        )


@lint("model-fit")
def _model_fit(recipe: Recipe) -> Iterator[Finding]:
    verdict = fit.judge(
        recipe.model.model_line, recipe.hardware, engram_on_gpu=fit.engram_on_gpu(recipe)
    )
    if not verdict.fits:
        yield Finding(
            "model-fit",
            "error",
            f"{recipe.model.model_line.title} does not fit {verdict.rig}: "
            f"{verdict.arithmetic} (weights: "
            f"{fit.WEIGHTS[recipe.model.line].source}): pick a rig with more memory",
        )


def lint_recipe(recipe: Recipe) -> list[Finding]:
    """Every finding for a recipe, errors first, in lint order."""
    findings = [f for fn in LINTS.values() for f in fn(recipe)]
    return sorted(findings, key=lambda f: f.level != "error")


def raise_on_errors(recipe: Recipe, source: str) -> None:
    errors = [f for f in lint_recipe(recipe) if f.level == "error"]
    if errors:
        raise RecipeError(f"{source}: " + "; ".join(str(f) for f in errors))


def warnings_for(recipe: Recipe) -> list[Finding]:
    return [f for f in lint_recipe(recipe) if f.level == "warning"]
