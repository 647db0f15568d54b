"""The DSPARK streaming census, sampled: sglang's real chat streaming path on
0.5.16 and 0.5.17 unpatched, 0.5.17 patched, and 0.5.23 (the current track)
unpatched and patched (scripts/stream-census runs the full one; docs/streaming.md
has its table)."""

from __future__ import annotations

import json

import pytest

from sm12x.mock import serving as sglang_serving
from sm12x.mock import wheels
from tests.support import stream_census, trees

CONFIGS = {
    "0.5.16": ("0.5.16", False),
    "0.5.17": ("0.5.17", False),
    "0.5.17+patches": ("0.5.17", True),
    "0.5.23": ("0.5.23", False),
    "0.5.23+patches": ("0.5.23", True),
}
GAMMAS = ["gamma3", "gamma4", "gamma5", "gamma6", "gamma7"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Each configuration's report. Trees run with the same pins share one process
    (stream_census runs them one after the other, each tree's sglang modules
    replacing the last's, as tests/support/stream_checks does): the imports every
    tree needs (torch, transformers, openai) are paid once per set of pins."""
    sites = {
        name: sglang_serving.tree(version, patched) for name, (version, patched) in CONFIGS.items()
    }
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, (version, _) in CONFIGS.items():
        groups.setdefault(tuple(wheels.pythonpath(version)), []).append(name)
    folder = tmp_path_factory.mktemp("census")
    args = ["-m", "tests.support.stream_census", "--samples", "1", "--split-stride", "7"]
    for names in groups.values():
        pairs = [
            a for n in names for a in ("--site", str(sites[n]), "--json", str(folder / f"{n}.json"))
        ]
        proc = trees.run_python([sites[names[0]]], [*args, *pairs], timeout=900 * len(names))
        assert proc.returncode == 0, proc.stderr[-3000:]
    out = {name: json.loads((folder / f"{name}.json").read_text()) for name in CONFIGS}
    for name, (version, _) in CONFIGS.items():
        assert out[name]["sglang"] == version, name  # each report is its own tree's
    return out


def test_patched_0_5_17_has_no_divergent_stream_in_any_mode(reports):
    report = reports["0.5.17+patches"]
    assert report["sglang"] == "0.5.17"
    table = stream_census.table(report)
    assert set(table) == set(stream_census.MODES)
    for mode, row in table.items():
        assert row["streams"] > 0, mode
        bad = [r for r in report["streams"] if r["mode"] == mode and r["failures"]]
        assert row["divergent"] == 0, (mode, bad[:3])
    assert not [o for o in report["oracle"] if o["failures"]]


@pytest.mark.parametrize("config", ["0.5.16", "0.5.17"])
def test_unpatched_releases_lose_prose_under_dspark_chunks(reports, config):
    table = stream_census.table(reports[config])
    for mode in [*GAMMAS, "burst16", "split"]:
        row = table[mode]
        assert row["prose-cut"] + row["prose-lost"] > 0, (config, mode, row)
    everything = {f: sum(table[m][f] for m in table) for f in stream_census.FAILURES}
    assert everything["markup-in-content"] > 0
    # the non-streamed parser drops text after the calls and strips string values
    assert [o for o in reports[config]["oracle"] if o["failures"]]


def test_one_token_chunks_hide_most_of_the_preamble_bug(reports):
    """What the stand-in's old token-by-token stream could not show: one token
    per chunk loses prose only where it ends in "<" (held as a possible
    opener) or follows the calls; DSPARK's chunks lose it everywhere."""
    one = [r for r in reports["0.5.17"]["streams"] if r["mode"] == "one-token"]
    cut = {r["case"] for r in one if {"prose-cut", "prose-lost"} & set(r["failures"])}
    assert cut and all("trailing-angle" in c or "after" in c for c in cut), cut
    gamma = [r for r in reports["0.5.17"]["streams"] if r["mode"] in GAMMAS]
    assert {r["case"] for r in gamma if {"prose-cut", "prose-lost"} & set(r["failures"])} - cut


def test_on_0_5_23_no_stream_differs_from_the_non_streamed_response(reports):
    """The current track, unpatched: DSPARK's chunking changes nothing a client gets,
    in any mode; what differs from the text written is deepseek-recipe's own reading,
    the same without streaming (docs/tracks.md): one newline after prose ending in
    "<" (in V4's format), and shapes outside it (text after the calls, JSON-body and
    self-closing invokes)."""
    report = reports["0.5.23"]
    assert report["sglang"] == "0.5.23"
    assert not [r for r in report["streams"] if r["stream_only"]]
    in_format = {r["case"] for r in report["streams"] if r["failures"] and r["in_format"]}
    assert in_format == {"chat/trailing-angle+weather", "think/trailing-angle+weather"}
    assert {f for r in report["streams"] if r["in_format"] for f in r["failures"]} == {
        "separator-in-content"
    }
    for record in report["streams"]:
        if record["failures"] and not record["in_format"]:
            case = record["case"]
            assert "after" in case or "[json]" in case or "calls" in case, case
    # The same outputs differ without streaming, and only those.
    oracle = {o["case"] for o in report["oracle"] if o["failures"]}
    assert {r["case"] for r in report["streams"] if r["failures"]} == oracle


def test_patched_0_5_23_has_no_divergence_in_v4_s_format(reports):
    """The current track's series (0023): no output in DeepSeek-V4's own format
    differs, in any mode or without streaming; what remains is the shapes outside
    it, exactly as unpatched, and still no stream differs from the non-streamed
    response."""
    report, unpatched = reports["0.5.23+patches"], reports["0.5.23"]
    assert report["sglang"] == "0.5.23"
    assert not [r for r in report["streams"] if r["failures"] and r["in_format"]]
    assert not [o for o in report["oracle"] if o["failures"] and o["in_format"]]
    assert not [r for r in report["streams"] if r["stream_only"]]
    remaining = {
        (r["case"], r["mode"], tuple(r["failures"])) for r in report["streams"] if r["failures"]
    }
    before = {
        (r["case"], r["mode"], tuple(r["failures"]))
        for r in unpatched["streams"]
        if r["failures"] and not r["in_format"]
    }
    assert remaining == before


def test_each_tree_needs_its_own_report(tmp_path, capsys):
    """One --json per --site: a census of two trees into one report is refused in one
    line before any tree is loaded."""
    with pytest.raises(SystemExit) as caught:
        stream_census.main(
            ["--site", str(tmp_path / "a"), "--site", str(tmp_path / "b"), "--json", "x.json"]
        )
    assert caught.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert "2 --site but 1 --json: give one of each" in said, said
