"""Facts derived from a recipe's flags, as sglang resolves them.

The lints judge them; sps_tables, qualify, verify and the stand-in server read
them to size what a rank runs. They live here so that lints hold lints only.
"""

from __future__ import annotations

from sm12x.recipe.model import Recipe


def dp_size(recipe: Recipe) -> int:
    """--dp-size as written (1 when absent; a non-integer is the dp-attention lint's)."""
    value = recipe.flag_value("--dp-size")
    return value if isinstance(value, int) and value >= 1 else 1


def attention_dp(recipe: Recipe) -> int:
    """The DP attention ranks: --attn-dp-size (sglang >= 0.5.23's spelling), else
    --dp-size with --enable-dp-attention (the older one), else 1 (sglang turns DP
    attention off at width 1)."""
    value = recipe.flag_value("--attn-dp-size")
    if recipe.has_flag("--attn-dp-size"):
        return value if isinstance(value, int) and value >= 1 else 1
    return dp_size(recipe) if recipe.has_flag("--enable-dp-attention") else 1


def per_rank_requests(recipe: Recipe) -> int:
    """One DP rank's request limit, as sglang 0.5.23 divides it: max(1,
    max_running_requests // attn_dp_size) (mem_cache/kv_cache_configurator.py
    resolve_max_num_reqs, the size of the rank's req_to_token pool and the scheduler's
    running limit: tp_worker.get_worker_info)."""
    return max(1, recipe.max_running_requests // attention_dp(recipe))


def largest_decode_graph(recipe: Recipe) -> int:
    """The largest decode graph a rank replays: --cuda-graph-max-bs-decode, clamped to
    the rank's request pool, as sglang's get_batch_sizes_to_capture clamps it
    (model_executor/runner/base_cuda_graph_runner.py: every captured batch is at most
    req_to_token_pool.size, the pool size itself is added when the cap is above it).
    That function aligns the pool up to the attention TP width where DP attention
    gathers; taken here without that rounding, so this figure is never above
    sglang's (the lint errs towards refusing). Without
    the flag sglang's own cap (memory_hook.py) is at least as large as what it is
    clamped to here, so the pool bounds it."""
    rank = per_rank_requests(recipe)
    value = recipe.flag_value("--cuda-graph-max-bs-decode")
    return min(value, rank) if isinstance(value, int) and value >= 1 else rank
