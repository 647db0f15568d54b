"""Compact verify near the context limit: padding rows stay inside their request's row
(patch 0025, both tracks; issue 48).

Without a padding slot after it, the last request of a compact verify carries the
tier's leftover rows: on graph replay when a rank holds max_bs requests, on the eager
path (bs = len(seq_lens)) at any batch size once a DP neighbour sets the tier. Their
causal lengths run to its position plus the leftover; near --context-length that is
past the end of its req_to_token row, and the SWA-index kernel loads there with no
upper bound.

tests/patch/context_limit_probe.py runs each tree's own verify metadata chain and its
Triton metadata kernels under the interpreter, with the request on the pool's last
row at the furthest position sglang allows (P = context + 4: the row is context + 4
+ draft tokens wide and DSPARK allocates the draft slots before the verify), on the
largest tier the tree's token buckets give for the recipe's largest decode graph:
the largest overshoot the tier formula allows. A guard region after req_to_token and
full_to_swa, and poison on the freed slots past each request's allocation, show
every read that leaves the row. Pristine reads the guard; patched never does, and
its real rows are bit-identical to an unpoisoned run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import trees

PROBE = Path(__file__).with_name("context_limit_probe.py")
GUARD, FREED = -777, -555
CONTEXT = 1024  # any context: the overshoot is the leftover, not the context
DRAFT = 8
# The throughput recipes' largest decode graph at a full rank (sm12x/recipe/lints.py
# largest_decode_graph: 64 on rtx-pro-6000-tp4-throughput, the largest of the four;
# tests/unit/test_lints.py holds it). Graph: a full rank of width-1 requests on the
# largest tier; eager: one width-1 request on the same tier (a neighbour's).
MAX_BS = 64
PAGE = 256  # the backend's page_size (asserted): the page table's column width
ALIGNED = 4 * PAGE - 4 - DRAFT  # a context whose request row ends on a page boundary


def cases() -> list[dict]:
    tier = MAX_BS * DRAFT  # the largest of _build_ragged_verify_token_buckets([..., max_bs])
    last = CONTEXT + 4
    graph = {
        "path": "graph",
        "max_bs": MAX_BS,
        "capture_bs": [1, 2, 4, 8, 16, 32, MAX_BS],
        "tier": tier,
        "widths": [1] * MAX_BS,
        "seq_lens": [300 + 11 * i for i in range(MAX_BS - 1)] + [last],
        "ctx": CONTEXT,
    }
    eager = {**graph, "path": "eager", "widths": [1], "seq_lens": [last]}
    # The c4 boundary: one request at exactly P = ctx + 4 with its full verify, on a
    # tier a neighbour sets (twice its rows). At CONTEXT the row (1,036) ends inside a
    # page; at ALIGNED it ends on a page boundary (1,012 + 4 + 8 = 4 x 256), where the
    # leftover rows' c4 lengths need one page-table column more than the row holds.
    boundary = {**eager, "widths": [DRAFT], "tier": 2 * DRAFT}
    aligned = {**boundary, "ctx": ALIGNED, "seq_lens": [ALIGNED + 4]}
    return [graph, eager, boundary, aligned]


@pytest.fixture(scope="module")
def probed(sglang_tree) -> dict:
    out = {}
    for version in ("0.5.17", "0.5.23"):
        for patched in (False, True):
            tree = sglang_tree(version, patched=patched)
            proc = trees.run_python(
                [tree],
                [str(PROBE), json.dumps({"cases": cases(), "clean": patched})],
                env={"TRITON_INTERPRET": "1", "PYTHONWARNINGS": "ignore"},
                timeout=900,
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            out[version, patched] = json.loads(proc.stdout)
    return out


def runs(probed, version, patched, path, clean=False):
    return [
        r
        for r in probed[version, patched]
        if r["case"]["path"] == path and r["clean"] == clean and r["case"]["tier"] > 2 * DRAFT
    ]


def past_row(run) -> list[int]:
    """The verify rows whose SWA window read outside their request's row."""
    return [i for i, row in enumerate(run["swa"]) if GUARD in row]


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
@pytest.mark.parametrize("path", ["graph", "eager"])
def test_pristine_padding_rows_read_past_the_pool_s_last_row(probed, version, path):
    run = runs(probed, version, False, path)[0]
    n = len(run["case"]["widths"])
    # No padding slot: the last request carries the leftover.
    assert run["slots"] == n
    assert run["extends"][-1] == run["case"]["tier"] - sum(run["case"]["widths"][:-1])
    bad = past_row(run)
    assert bad, "pristine read nothing past the row: the case is not near the limit"
    # Only the last request's padding rows leave the row, never a real row.
    assert all(run["owner"][i] == n - 1 and not run["real"][i] for i in bad)
    # The request sits at P = context + 4 on a row context + 4 + 8 wide: its causal
    # lengths reach P + extend, so every row of the extend past the first 8 reads past
    # the row (docs/benchmarks.md: 441 on graph replay, 504 eager).
    overshoot = max(run["seq_lens_casual"]) - run["row_width"]
    assert overshoot == len(bad) == run["extends"][-1] - DRAFT
    # ... and their c4 lengths ask for page-table columns the row does not have.
    assert max(run["c4_columns"]) > run["page_table_columns"]


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
@pytest.mark.parametrize("path", ["graph", "eager"])
def test_patched_padding_rows_stay_in_their_row_and_real_rows_are_unchanged(probed, version, path):
    run, clean = runs(probed, version, True, path)[0], runs(probed, version, True, path, True)[0]
    assert past_row(run) == []
    assert max(run["seq_lens_casual"]) <= run["row_width"]
    # Every page-table column the c4 lengths ask for exists.
    assert max(run["c4_columns"]) <= run["page_table_columns"]
    # Real rows never see the poison, and match the unpoisoned run and pristine exactly.
    pristine = runs(probed, version, False, path)[0]
    for i, real in enumerate(run["real"]):
        if real:
            assert FREED not in run["swa"][i] and GUARD not in run["swa"][i]
            assert run["swa"][i] == clean["swa"][i] == pristine["swa"][i], i
            assert run["page_table"][i] == clean["page_table"][i] == pristine["page_table"][i]
            assert run["seq_lens_casual"][i] == pristine["seq_lens_casual"][i]


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_the_c4_indexer_boundary_on_the_eager_path(probed, version):
    """One request at exactly P = context + 4 with its full verify on the eager path:
    its real rows end at the row's last column and their c4 lengths (the indexer's
    compressed lengths, 64 to a page-table column) ask for no column the table lacks,
    on either tree. Its padding rows (the tier's leftover) run 8 rows past the row
    pristine: where the row ends on a page boundary they need one column more than
    the row's page table holds (the indexer would read past the row); patched (0025)
    they stop at the row's end."""
    for patched in (False, True):
        found = {
            r["case"]["ctx"]: r
            for r in probed[version, patched]
            if r["case"]["tier"] == 2 * DRAFT and not r["clean"]
        }
        assert sorted(found) == [ALIGNED, CONTEXT]
        for ctx, run in found.items():
            real = [i for i, r in enumerate(run["real"]) if r]
            padding = [i for i, r in enumerate(run["real"]) if not r]
            assert padding and len(real) == DRAFT
            assert run["row_width"] == ctx + 4 + DRAFT
            assert run["page_table_columns"] == -(-run["row_width"] // PAGE)
            assert max(run["seq_lens_casual"][i] for i in real) == run["row_width"]
            assert max(run["c4_columns"][i] for i in real) <= run["page_table_columns"]
            if patched:
                assert max(run["c4_columns"]) <= run["page_table_columns"]
                assert past_row(run) == []
            else:
                assert past_row(run), "pristine: the leftover reads past the row"
        aligned = found[ALIGNED]
        over = [i for i, c in enumerate(aligned["c4_columns"]) if c > aligned["page_table_columns"]]
        if patched:
            assert over == []
        else:
            assert max(aligned["c4_columns"]) == aligned["page_table_columns"] + 1
            assert over and not any(aligned["real"][i] for i in over)


def test_the_cases_take_the_largest_tier_of_the_compact_recipes():
    """MAX_BS x DRAFT is the largest top tier (the recipe's largest decode graph times
    its draft tokens) over the compact recipes, and that recipe verifies 8 rows: the
    largest leftover, so the largest overshoot, any recipe can meet."""
    from sm12x.recipe import load_recipe
    from sm12x.recipe.derived import largest_decode_graph

    tiers = {}
    for path in sorted((trees.REPO / "recipes").glob("*.yaml")):
        if path.name.endswith(".schema.json"):
            continue
        recipe = load_recipe(path, lint=False)
        if recipe.dspark is not None and recipe.dspark.ragged_verify == "compact":
            draft = recipe.dspark.block_size + 1
            tiers[path.stem] = (largest_decode_graph(recipe) * draft, draft)
    assert tiers, "no compact recipe"
    top, draft = max(tiers.values())
    assert (top, draft) == (MAX_BS * DRAFT, DRAFT), tiers
