"""Retirement canary: the pinned flashinfer lacks topk 192; 0.6.18 has it and the pad stops.

When this goes red because the pinned flashinfer gained 192, the patch can be
retired (patches/sglang/patches.toml says when; docs/patch.md says how).
"""

from __future__ import annotations

import json
from collections import Counter

from tests.support import trees

DECODE_TABLE = (
    "import json; from flashinfer.mla import _sparse_mla_sm120 as fi; "
    "print(json.dumps(sorted(fi._DECODE_DSV4_DISPATCH)))"
)


def _decode_table(tree) -> set[tuple[int, int]]:
    proc = trees.run_python([tree], ["-c", DECODE_TABLE])
    assert proc.returncode == 0, proc.stderr
    return {tuple(pair) for pair in json.loads(proc.stdout)}


def test_pinned_flashinfer_decode_table_lacks_192(flashinfer_tree, pins):
    table = _decode_table(flashinfer_tree(pins["FLASHINFER_VERSION"]))
    assert table, "the pinned flashinfer has no DSV4 decode table"
    assert 192 not in {topk for _, topk in table}, (
        f"flashinfer {pins['FLASHINFER_VERSION']} instantiates topk 192: the dispatch patch "
        "can retire (see patches/sglang/patches.toml)"
    )


def test_canary_flashinfer_has_192_and_the_patch_stops_padding(
    sglang_tree, flashinfer_tree, pins, series, tmp_path
):
    canary = pins["FLASHINFER_CANARY_VERSION"]
    assert canary == series[0]["retire_flashinfer"]
    fi = flashinfer_tree(canary)
    assert (64, 192) in _decode_table(fi)

    proc, report = trees.selftest(
        [sglang_tree(pins["SGLANG_VERSION"]), fi], tmp_path / "census.json", "--quick"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["versions"]["flashinfer-python"] == canary
    draft = [c for c in report["calls"] if c["phase"] == "draft" and c["scenario"] == "patched"]
    assert draft and Counter((c["route"], c["width"]) for c in draft) == {
        ("cutlass", 192): len(draft)
    }
    # The same shapes no longer crash upstream either: the pin bump alone fixes them.
    unpatched = Counter(c["route"] for c in report["calls"] if c["scenario"] == "unpatched")
    assert unpatched["abort"] == 0
