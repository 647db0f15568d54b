"""Patch 0011: on the DSPARK path, sliding-window KV that fell out of the window is freed.

sglang's real scheduler-side bookkeeping runs on CPU (tests/patch/swa_probe.py):
the DeepSeek-V4 KV pool, the SWA allocator, req_to_token and the radix cache,
built small; admission, prefill preparation, the decode-memory check and
`prepare_for_decode` are sglang's own. Two requests decode with DSPARK depth 7,
every draft accepted. The SWA pool holds 10 pages of 256 tokens; what the two
requests would hold without eviction (prompt plus 1,600 generated tokens each)
is about one and a half times that.

Without the patch (upstream #33805) nothing is evicted: SWA use grows with
every generated token and the scheduler's memory check fails (where it would
retract) while the full pool is mostly free. With it, SWA use stays under a
bound set by the window, the page size and the eviction interval, and every
position attention still reads keeps its slot. sglang 0.5.18, which fixes the
bug its own way, keeps the same bound.

`SGLANG_SWA_EVICTION_INTERVAL` (sglang's own knob, default 128) is 16 here so
that a few eviction rounds fit in 200 steps of Triton-interpreted allocation;
it sets how often eviction runs, not whether.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.support import trees

PROBE = str(trees.REPO / "tests" / "patch" / "swa_probe.py")
INTERVAL = 16


@pytest.fixture(scope="module")
def run(sglang_tree):
    """run(version, patched) -> the probe's report for that tree."""
    done: dict = {}

    def go(version: str, patched: bool) -> dict:
        if (version, patched) not in done:
            proc = trees.run_python(
                [sglang_tree(version, patched=patched)],
                [PROBE],
                env={"TRITON_INTERPRET": "1", "SGLANG_SWA_EVICTION_INTERVAL": str(INTERVAL)},
                timeout=900,
            )
            assert proc.returncode == 0, proc.stderr[-4000:]
            done[version, patched] = json.loads(proc.stdout)
        return done[version, patched]

    return go


def swa_used(report: dict, step: dict) -> int:
    return report["swa_tokens"] - step["swa_available"]


def full_used(report: dict, step: dict) -> int:
    return report["full_tokens"] - step["full_available"]


def held_span(report: dict) -> int:
    """How far behind seqlen - 1 a request's oldest SWA slot can be with eviction:
    the eviction point is seqlen - 1 - max(window, page), floored to a page (so up
    to max(window, page) + page - 1 behind), and until the next eviction round
    the request grows by one interval of full acceptance."""
    page, step_tokens = report["page"], report["gamma"] + 1
    return max(report["window"], page) + page - 1 + report["eviction_interval"] * step_tokens


def bound_pages(report: dict) -> int:
    """The most SWA pages one request can hold with eviction: the prompt pages the
    radix cache keeps, plus the pages from its eviction point to the end of its
    reservation (2 x (gamma + 1) tokens past the committed ones)."""
    page, step_tokens = report["page"], report["gamma"] + 1
    protected = max(report["prompts"]) // page
    return protected + math.ceil((held_span(report) + 2 * step_tokens) / page)


def check_bounded(report: dict) -> None:
    steps = report["steps"]
    assert report["tree_cache"] == "UnifiedRadixCache"
    assert "stop" not in steps[-1], steps[-1]["stop"]
    assert len(steps) == 200
    # Far past what the pool holds without eviction.
    demand = sum(p + g for p, g in zip(report["prompts"], steps[-1]["generated"]))
    assert demand > 1.4 * report["swa_tokens"]
    limit = len(report["prompts"]) * bound_pages(report) * report["page"]
    assert max(swa_used(report, s) for s in steps) <= min(limit, report["swa_tokens"])
    # Slots come back: SWA use falls at some steps, while full KV is all kept.
    used = [swa_used(report, s) for s in steps]
    assert any(b < a for a, b in zip(used, used[1:]))
    full = [full_used(report, s) for s in steps]
    assert full == sorted(full) and full[-1] > full[0]
    # Never inside the window: every position attention still reads has its slot.
    assert all(all(s["window_intact"]) for s in steps)
    for s in steps[INTERVAL + 1 :]:  # once eviction has had a round
        for seqlen, evicted in zip(s["seqlen"], s["swa_evicted"]):
            assert seqlen - 1 - evicted <= held_span(report)


def test_unpatched_dspark_decode_never_evicts_and_runs_out_of_swa(run):
    report = run("0.5.17", False)
    steps = report["steps"]
    stop = steps[-1]
    assert "stop" in stop and stop["step"] < 200, "the unpatched run did not stop"
    assert all(s["swa_evicted"] == [0, 0] for s in steps)  # nothing ever freed
    assert all(s["decode_batch_idx"] == [0, 0] for s in steps)  # the eviction gate stays shut
    # SWA holds every token; the full pool, the same size per token, is mostly free.
    assert swa_used(report, stop) == report["swa_tokens"]
    assert full_used(report, stop) <= report["full_tokens"] // 4
    used = [swa_used(report, s) for s in steps]
    assert used == sorted(used)  # never a slot back
    assert stop["generated"][0] < report["swa_tokens"] // 2  # the ceiling: pool / requests


def test_patched_dspark_decode_keeps_swa_bounded(run):
    report = run("0.5.17", True)
    check_bounded(report)
    # The real eviction ran, at sglang's cadence: only on steps the interval selects.
    steps = report["steps"]
    moved = [b for a, b in zip(steps, steps[1:]) if b["swa_evicted"] != a["swa_evicted"]]
    assert len(moved) >= 5
    assert all(s["forward_iter"] % INTERVAL == 0 for s in moved)
    assert steps[-1]["decode_batch_idx"] == [200, 200]


def test_sglang_0_5_18_fix_keeps_the_same_bound(run):
    """Upstream's own fix (0.5.18, unpatched): the same bookkeeping, the same bound."""
    check_bounded(run("0.5.18", False))


def test_the_current_track_s_dspark_decode_reaches_the_eviction(sglang_tree):
    """sglang 0.5.23 (the current track), unpatched: read, not run. swa_probe.py
    cannot drive 0.5.23's scheduler-side bookkeeping: its ServerArgs is no longer a
    dataclass (the probe builds one field by field), `maybe_cache_unfinished_req` left
    mem_cache.common, and a request's SWA cursor moved to
    `req.kv.get_evicted_seqlen(ComponentType.SWA)`; a port is a new probe. What
    stands instead: 0.5.23's DSPARK decode preparation, the code 0011 patched on
    0.5.17, calls the scheduler's eviction before it reserves the next step, as
    0.5.18's fix does (which the probe runs above)."""
    import ast

    from sm12x.versions import load_versions

    tree = sglang_tree(load_versions("current")["SGLANG_VERSION"], patched=False)
    source = (tree / "sglang" / "srt" / "speculative" / "dflash_info_v2.py").read_text()
    module = ast.parse(source)
    cls = next(
        n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "DFlashDraftInputV2"
    )
    prepare = next(
        n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "prepare_for_decode"
    )
    calls = [
        n
        for n in ast.walk(prepare)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "maybe_evict_swa"
    ]
    assert calls, "DFlashDraftInputV2.prepare_for_decode no longer evicts"
    evict_line = calls[0].lineno
    reserve = [
        n.lineno
        for n in ast.walk(prepare)
        if isinstance(n, ast.Attribute)
        and n.attr
        in ("alloc_token_slots", "alloc_paged_token_slots_extend", "_ensure_prepare_length_buffers")
    ]
    assert reserve and evict_line < min(reserve), "eviction no longer precedes the reservation"
    # DSPARK decodes with that draft input (its spec-v2 factory builds it).
    common = (tree / "sglang" / "srt" / "speculative" / "draft_worker_common.py").read_text()
    assert "def make_draft_input_v2(" in common and "return DFlashDraftInputV2(" in common
