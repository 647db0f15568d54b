"""The full shape census through the real patched sglang + flashinfer Python.

Kernels are emulated from the installed wheel's csrc (sm12x.selftest.kernels):
a call lands only where the compiled launcher would accept it, and what the
real launcher aborts on raises with the real message.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest

from tests.support import trees


def _routes(report: dict, scenario: str) -> Counter:
    return Counter(c["route"] for c in report["calls"] if c["scenario"] == scenario)


@pytest.fixture(scope="module")
def pinned(sglang_tree, flashinfer_tree, pins, tmp_path_factory):
    """The image's configuration: the pinned sglang, patched, and the pinned flashinfer."""
    site = [sglang_tree(pins["SGLANG_VERSION"]), flashinfer_tree(pins["FLASHINFER_VERSION"])]
    proc, report = trees.selftest(site, tmp_path_factory.mktemp("census") / "census.json")
    return proc, report


def test_selftest_passes_on_the_pinned_stack(pinned, pins):
    proc, report = pinned
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["versions"]["sglang"] == pins["SGLANG_VERSION"]
    assert report["versions"]["flashinfer-python"] == pins["FLASHINFER_VERSION"]
    assert "every patched call lands on a CUTLASS kernel" in proc.stdout


def test_census_covers_the_dimensions_the_issue_names(pinned):
    calls = [c for c in pinned[1]["calls"] if c["scenario"] == "patched"]
    assert {c["phase"] for c in calls} == {"draft", "verify", "extend"}
    assert {c["path"] for c in calls} == {"decode", "prefill"}
    assert {c["layer"] for c in calls if c["phase"] == "verify"} == {"swa", "c4", "c128"}
    draft_tokens = {c["num_tokens"] for c in calls if c["phase"] == "draft"}
    # gamma 3..7 x batch 1..64: the smallest and largest draft batches exist.
    assert {3, 7, 64 * 3, 64 * 7} <= draft_tokens
    # sglang's own index builder gives the draft width 192 for every gamma.
    assert {c["topk"] for c in calls if c["phase"] == "draft"} == {192}
    assert {c["num_heads"] for c in calls} == {64}


def test_census_covers_calls_without_topk_length_and_the_page_split(pinned):
    """Every shape is called with and without topk_length, on 128-token SWA pages
    (the real split runs first; its copy is checked byte for byte in the patched
    scenario, and the pad must fill a missing topk_length with the original width)."""
    calls = [c for c in pinned[1]["calls"] if c["scenario"] == "patched"]

    def shape(c):
        return (c["phase"], c["layer"], c["num_tokens"], c["topk"], c["extra_topk"])

    with_length = {shape(c) for c in calls if c["with_topk_length"]}
    without = {shape(c) for c in calls if not c["with_topk_length"]}
    assert with_length == without and len(calls) == 2 * len(with_length)
    padded_without = [
        c for c in calls if c["route"] == "cutlass-padded" and not c["with_topk_length"]
    ]
    assert {c["path"] for c in padded_without} == {"decode", "prefill"}
    assert all(c["detail"] == "" for c in calls)


SABOTAGE = """
import json, sys, sm12x.selftest.env as e
e.stub_torchvision()
from sm12x.selftest import census
from sm12x.selftest.kernels import Emulator, Rules
from sglang.kernels.ops.attention import flash_mla_sm120 as m
how = sys.argv[1]
if how == "split-skips-a-page":
    # The split's page marking loses the highest page the indices touch.
    real_mark = Emulator._page_mark
    def mark(self, grid, indices, mask, n, pbs, block):
        real_mark(self, grid, indices, mask, n, pbs, block)
        mask[int(indices.max()) // pbs] = 0
    Emulator._page_mark = mark
elif how == "pad-drops-topk-length":
    real_pad = m._sm12x_pad_indices
    m._sm12x_pad_indices = lambda i, length, width: (real_pad(i, length, width)[0], length)
found = census.shapes(gammas=(4,), batches=(1, 2, 16, 32), tps=(4,), contexts=(1024,))
with Emulator(Rules.from_flashinfer(e.flashinfer_package())) as em:
    results = census.run(em, found, ["patched"])
print(json.dumps(sorted({o.detail for _, o in results})))
"""


@pytest.mark.parametrize(
    "how, detail",
    [
        ("split-skips-a-page", "the page split lost a page the indices reference"),
        ("pad-drops-topk-length", "topk_length missing, and not filled with the original width"),
    ],
)
def test_the_census_fails_a_split_or_pad_that_breaks_the_contract(
    how, detail, sglang_tree, flashinfer_tree, pins
):
    site = [sglang_tree(pins["SGLANG_VERSION"]), flashinfer_tree(pins["FLASHINFER_VERSION"])]
    proc = trees.run_python(site, ["-c", SABOTAGE, how])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert detail in json.loads(proc.stdout.strip().splitlines()[-1])


def test_with_the_patch_nothing_aborts_and_every_shape_is_on_cutlass(pinned):
    routes = _routes(pinned[1], "patched")
    assert routes["abort"] == routes["error"] == routes["triton"] == 0
    assert routes["cutlass"] > 0 and routes["cutlass-padded"] > 0
    for call in pinned[1]["calls"]:
        if call["scenario"] == "patched":
            assert call["detail"] == "", call


def test_only_the_draft_width_is_padded_and_to_the_smallest_instance(pinned):
    for call in pinned[1]["calls"]:
        if call["scenario"] != "patched":
            continue
        if call["phase"] == "draft":
            # decode (64 heads): {128, 512, 1024}; prefill: {128, 512, 1024, 2048}.
            assert (call["route"], call["width"]) == ("cutlass-padded", 512), call
        else:
            assert (call["route"], call["width"]) == ("cutlass", call["topk"]), call


def test_without_the_patch_every_draft_call_aborts_with_upstreams_messages(pinned):
    calls = [c for c in pinned[1]["calls"] if c["scenario"] == "unpatched"]
    for call in calls:
        if call["phase"] != "draft":
            assert call["route"] == "cutlass", call
        elif call["path"] == "decode":
            assert call["route"] == "abort"
            assert call["detail"].startswith(
                f"Check failed: num_tokens > 64 ({call['num_tokens']} vs. 64)"
            )
        else:
            assert call["route"] == "abort"
            assert call["detail"].startswith(
                "Unsupported sparse-MLA prefill configuration: model=DSV4 num_heads=64 topk=192"
            )


def test_the_triton_workaround_sends_every_call_to_triton(pinned):
    routes = _routes(pinned[1], "triton")
    assert set(routes) == {"triton"}


def test_switching_the_patch_off_is_exactly_upstream(
    pinned, sglang_tree, flashinfer_tree, pins, tmp_path
):
    """SGLANG_SM120_FLASHMLA_TOPK_PAD=0 on the patched tree lands every call where the
    pristine, unpatched sglang does."""
    site = [
        sglang_tree(pins["SGLANG_VERSION"], patched=False),
        flashinfer_tree(pins["FLASHINFER_VERSION"]),
    ]
    proc, pristine = trees.selftest(site, tmp_path / "pristine.json", "--scenarios", "unpatched")
    # A stock sglang is judged as it runs: its draft calls abort on this flashinfer.
    assert proc.returncode == 1 and "unpatched calls abort" in proc.stderr, proc.stderr[-2000:]

    def key(c):
        return (
            c["phase"],
            c["layer"],
            c["num_tokens"],
            c["topk"],
            c["extra_topk"],
            c["with_topk_length"],
        )

    upstream = {key(c): (c["route"], c["width"], c["detail"]) for c in pristine["calls"]}
    switched = {
        key(c): (c["route"], c["width"], c["detail"])
        for c in pinned[1]["calls"]
        if c["scenario"] == "unpatched"
    }
    assert switched == upstream


@pytest.mark.parametrize("sglang, flashinfer", [("0.5.17", "0.6.15.post1"), ("0.5.18", "0.6.17")])
def test_selftest_passes_on_the_other_patched_releases(
    sglang, flashinfer, sglang_tree, flashinfer_tree, tmp_path
):
    site = [sglang_tree(sglang), flashinfer_tree(flashinfer)]
    proc, report = trees.selftest(site, tmp_path / "census.json", "--quick")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["versions"]["sglang"] == sglang
    assert _routes(report, "patched")["abort"] == 0
    assert _routes(report, "unpatched")["abort"] > 0


def test_selftest_says_in_one_line_when_flashinfer_s_tables_are_not_where_it_reads(
    sglang_tree, flashinfer_tree, tmp_path, pins
):
    # A flashinfer whose sm_120 C++ moved (0.7 has no prefill table file): the
    # image build must stop with a sentence, not a traceback.
    moved = tmp_path / "flashinfer-moved"
    shutil.copytree(flashinfer_tree(pins["FLASHINFER_VERSION"]), moved)
    next(moved.rglob("sparse_mla_sm120_prefill.cu")).unlink()
    proc, _ = trees.selftest(
        [sglang_tree(pins["SGLANG_VERSION"]), moved], tmp_path / "census.json", "--quick"
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert (
        f"sm12x dispatch self-test FAILED: cannot read the sm_120 sparse-MLA dispatch rules "
        f"of flashinfer {pins['FLASHINFER_VERSION']}"
    ) in proc.stderr
