"""tool_choice "required" or a named function under DSPARK: the scheduler's real check.

Both produce a grammar (a structural tag from the deepseekv4 detector), and
sglang 0.5.16's scheduler aborts grammar-constrained requests when the
speculative algorithm is of the DFLASH family, which DSPARK is
(`validate_dflash_request` in `Scheduler.handle_generate_request`): sm12x's
own verify `tool-choice` check would fail on a 0.5.16 image. 0.5.17 dropped
that rejection (its DSpark worker applies the grammar inside verify), which is
one reason the image moved to it.

tool_choice_probe.py drives sglang's real code from the recipe's ServerArgs and
the OpenAI request to `Scheduler.handle_generate_request`, in a subprocess per
version (see its docstring for the one part that stands in: the Scheduler's
GPU-bound construction).
"""

from __future__ import annotations

import json

import pytest

from tests.support import trees

PROBE = str(trees.REPO / "tests" / "patch" / "tool_choice_probe.py")
REJECTION = "DFLASH speculative decoding does not support grammar-constrained decoding yet."


@pytest.fixture(scope="module")
def admitted(sglang_tree):
    """sglang version -> the probe's report, on the patched trees (what an image serves)."""
    made = {}

    def run(version: str) -> dict:
        if version not in made:
            proc = trees.run_python([sglang_tree(version)], [PROBE], timeout=900)
            assert proc.returncode == 0, proc.stderr[-3000:]
            made[version] = json.loads(proc.stdout.strip().splitlines()[-1])
        return made[version]

    return run


def test_the_image_s_sglang_accepts_it(admitted, pins):
    report = admitted(pins["SGLANG_VERSION"])["DSPARK"]
    assert all(report[choice]["accepted"] for choice in ("required", "named")), report


@pytest.mark.parametrize("choice", ["required", "named"])
def test_0_5_17_accepts_a_grammar_constrained_tool_choice_under_dspark(admitted, choice):
    report = admitted("0.5.17")["DSPARK"]
    assert report["speculative_algorithm"] == "DSPARK" and report["is_dflash_family"]
    case = report[choice]
    # The request carries the grammar the detector built ...
    assert case["constraint"] == "structural_tag" and case["grammar_keys"] == ["structural_tag"]
    # ... and the scheduler hands it to the grammar manager instead of aborting it.
    assert case["accepted"] and case["reached_grammar_manager"] == 1 and case["aborted"] == []
    # The DSpark worker advances that grammar inside verify (0.5.17's spec_info).
    assert report["supports_grammar_overlap"] is True


@pytest.mark.parametrize("choice", ["required", "named"])
def test_0_5_16_rejects_it_with_the_message_users_saw(admitted, choice):
    case = admitted("0.5.16")["DSPARK"][choice]
    assert case["grammar_keys"] == ["structural_tag"]
    assert not case["accepted"] and case["reached_grammar_manager"] == 0
    assert case["aborted"] == [REJECTION]


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17"])
def test_the_rejection_is_the_dspark_grammar_check_and_nothing_else(admitted, version):
    """Controls: without a grammar (tool_choice auto) DSPARK admits the request,
    and without speculative decoding the same grammar is admitted, on both."""
    report = admitted(version)
    auto = report["DSPARK"]["auto"]
    assert auto["grammar_keys"] == [] and auto["accepted"]
    for choice in ("required", "named", "auto"):
        case = report["NONE"][choice]
        assert report["NONE"]["is_dflash_family"] is False
        assert case["accepted"] and case["aborted"] == [], (choice, case)


@pytest.fixture(scope="module")
def dflash_check(sglang_tree):
    """sglang version -> the DFLASH-family admission check on each tool_choice."""
    made = {}

    def run(version: str) -> dict:
        if version not in made:
            proc = trees.run_python([sglang_tree(version)], [PROBE, "--dflash-check"], timeout=900)
            assert proc.returncode == 0, proc.stderr[-3000:]
            made[version] = json.loads(proc.stdout.strip().splitlines()[-1])
        return made[version]

    return run


def test_the_current_track_admits_it_under_dspark(dflash_check):
    """sglang 0.5.23 (the current track, no patch): the scheduler's DFLASH-family
    check lets a grammar through, and DSPARK advances grammars inside verify. The
    whole request path (test_the_image_s_sglang_accepts_it) cannot run there: it
    reads scheduler state (tree cache, KV-event publisher, output streamer) the
    probe's stand-in does not build; the check is the function that aborted on
    0.5.16, called as the scheduler calls it."""
    from sm12x.versions import load_versions

    report = dflash_check(load_versions("current")["SGLANG_VERSION"])
    assert report["is_dflash_family"] and report["supports_grammar_overlap"] is True
    for choice in ("required", "named"):
        case = report[choice]
        assert case["grammar_keys"] == ["structural_tag"], case
        assert case["rejection"] is None, case


def test_the_same_check_on_0_5_16_rejects_it(dflash_check):
    """The control: the check itself is what aborted tool_choice on 0.5.16."""
    report = dflash_check("0.5.16")
    for choice in ("required", "named"):
        assert report[choice]["rejection"] == REJECTION, report[choice]
    assert report["auto"]["rejection"] is None
