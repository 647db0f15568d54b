"""verify's full-load check against the mock server: every DP rank full.

The mock's `full-rank` fault (sm12x/mock/fullrank.py) corrupts only a request
that fills its DP rank (its running requests reach the largest decode graph),
as sglang 0.5.23's compact-verify full-rank padding does: the ordinary soak,
whose streams fill no rank, passes it; the full-load check, which holds the
server's max running requests in flight, catches it and names the cause; the
healthy mock passes both.
"""

from __future__ import annotations

from sm12x.mock.fullrank import Layout
from tests.integration.conftest import SMALL_SOAK, check, verdicts

# Four DP ranks of four: a rank is full at its largest decode graph (4).
LAYOUT = Layout(dp=4, max_running_requests=16, cuda_graph_max_bs=4)
FULL = ["--full-load", "--full-load-rounds", "2"]
ONLY = ["--only", "health,models,one-token,soak,full-load"]


def test_the_healthy_mock_passes_the_full_load_check(fake, verify):
    server = fake(layout=LAYOUT)
    code, report = verify("--base-url", server.base_url, *SMALL_SOAK, *FULL, *ONLY)
    assert code == 0, [c for c in report["checks"] if c["verdict"] != "pass"]
    full = check(report, "full-load")
    assert full["verdict"] == "pass"
    metrics = full["metrics"]
    # The server's own max_running_requests and DP size (its /server_info).
    assert metrics["streams"] == 16 and metrics["dp_ranks"] == 4 and metrics["per_rank"] == 4
    assert metrics["requests"] == 32 and metrics["wrong"] == 0
    assert "the server's max_running_requests" in " ".join(full["evidence"])
    # Every rank was full: the mock saw requests that filled their rank.
    assert server.app.state.ranks.filled > 0


def test_the_full_rank_fault_passes_the_soak_and_fails_the_full_load_check(fake, verify):
    server = fake("full-rank", layout=LAYOUT)
    code, report = verify(
        "--base-url", server.base_url, "--soak-concurrency", "8", "--soak-rounds", "2", *FULL, *ONLY
    )
    assert code == 1
    failed = {n for n, v in verdicts(report).items() if v == "fail"}
    assert failed == {"full-load"}, failed  # the soak's 8 streams over 4 ranks fill none
    assert check(report, "soak")["verdict"] == "pass"
    full = check(report, "full-load")
    assert full["metrics"]["wrong"] > 0
    assert "answered wrong with 16 requests in flight (4 a DP rank)" in full["problem"]
    assert "fills its largest decode CUDA graph under compact ragged verify" in full["cause"]
    assert "0024" in full["fix"] and "SM12X_CONFIGURATION=baseline" in full["fix"]
    assert any("expected '" in line for line in full["evidence"])


def test_no_rank_fills_when_its_share_is_below_its_largest_graph(fake, verify):
    """The recipe invariant part 5 lints: a rank that cannot reach its largest
    decode graph is never hurt, at any load."""
    server = fake("full-rank", layout=Layout(dp=4, max_running_requests=12, cuda_graph_max_bs=4))
    code, report = verify("--base-url", server.base_url, *FULL, "--only", "full-load")
    assert code == 0, check(report, "full-load")
    assert server.app.state.ranks.filled == 0


def test_full_load_is_off_without_a_ragged_verify_recipe_or_the_flag(fake, verify):
    server = fake("full-rank", layout=LAYOUT)
    code, report = verify(
        "--base-url", server.base_url, "--only", "health,models,one-token,full-load"
    )
    assert code == 0
    off = check(report, "full-load")
    assert off["verdict"] == "skip" and "not asked for (--full-load" in str(off), off
    assert server.app.state.ranks.filled == 0  # nothing loaded it


def test_the_recipe_sets_the_load_and_turns_it_on(fake, verify):
    """A ragged-verify recipe runs the check by default, at its own
    --max-running-requests when it sets one, else at the server's."""
    from sm12x.recipe import load_recipe
    from tests.support import throughput as tp

    recipe = load_recipe(tp.FIXTURE)
    server = fake(layout=LAYOUT)
    code, report = verify(
        "--base-url",
        server.base_url,
        "--recipe",
        str(tp.FIXTURE),
        "--full-load-concurrency",
        "8",
        "--only",
        "full-load",
    )
    full = check(report, "full-load")
    assert full["verdict"] == "pass", full
    assert (
        full["metrics"]["streams"] == 8 and full["metrics"]["source"] == "--full-load-concurrency"
    )
    assert full["metrics"]["dp_ranks"] == 4  # the recipe's DP attention
    assert recipe.dspark.ragged_verify == "compact"
    assert "the server resolved max_running_requests=16, not 8" in " ".join(full["evidence"])
