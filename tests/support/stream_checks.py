"""One check per streaming patch (0002-0008 for 0.5.17, 0023 for 0.5.23), each the
symptom its patch removes.

Each check streams an output of the census corpus (or a targeted input)
through sglang's real chat streaming path (stream_census.Runner) and returns
(passed, detail). tests/patch/test_streaming_patches.py runs them all on trees
patched up to each patch in turn: a check must fail on the tree without its
patch and pass on the tree with it.

    python -m tests.support.stream_checks --site DIR [--site DIR2 ...]
        ->  JSON {site: {check: [passed, detail]}}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support import stream_census as sc  # noqa: E402

CASES = {c.name: c for c in sc.cases()}


def _streams(runner, case, plans):
    """Outcomes of streaming `case` once per delivery plan."""
    ids = runner.tokens(case)

    async def go():
        return [
            await runner.respond(case, ids, plan(len(ids)) if callable(plan) else plan, True)
            for plan in plans
        ]

    return ids, asyncio.run(go())


def _splits(n):
    return [[[k], [n - k]] for k in range(1, n)]


def partial_json_value(runner):
    """0002: a chunk ending inside a JSON-typed value ("-" of -7) raises inside
    the detector; the stream then shows the markup."""
    errors = []
    handler = logging.Handler()
    handler.emit = lambda record: errors.append(record.getMessage())
    log = logging.getLogger("sglang.srt.function_call.deepseekv32_detector")
    log.addHandler(handler)
    try:
        case = CASES["chat/plain+search-numbers[params]"]
        outcomes = asyncio.run(_all_splits(runner, case, runner.tokens(case)))
    finally:
        log.removeHandler(handler)
    symptoms = {"markup-in-content", "name-or-id-missing", "exception"}
    bad = [o for o in outcomes if symptoms & set(sc.classify(case, o))]
    raised = [e for e in errors if "parse_streaming_increment" in e]
    return not raised and not bad, (
        f"{len(raised)} detector errors, {len(bad)} streams with "
        f"markup in content or a nameless call"
    )


async def _all_splits(runner, case, ids):
    return [await runner.respond(case, ids, plan, True) for plan in _splits(len(ids))]


def failure_keeps_markup_out(runner):
    """0003: a failure inside the streaming detector (forced once, mid-call)
    must not put the buffered markup in content nor lose the call's name."""
    detector = sys.modules["sglang.srt.function_call.deepseekv32_detector"].DeepSeekV32Detector
    original = detector._parse_parameters_from_xml
    state = {"left": 1}

    def flaky(self, content, allow_partial=False):
        if allow_partial and state["left"] and "city" in content:
            state["left"] -= 1
            raise RuntimeError("forced parse failure")
        return original(self, content, allow_partial)

    detector._parse_parameters_from_xml = flaky
    try:
        case = CASES["chat/plain+weather"]
        _, (outcome,) = _streams(runner, case, [lambda n: [[1]] * n])
    finally:
        detector._parse_parameters_from_xml = original
    failures = [f for f in sc.classify(case, outcome) if f != "separator-in-content"]
    return not state[
        "left"
    ] and not failures, f"forced={not state['left']} {failures} content={outcome.content[:80]!r}"


def preamble(runner):
    """0004: prose before a call, in the same chunk as the block's opener, is sent."""
    case = CASES["chat/plain+weather"]
    outcomes = asyncio.run(_all_splits(runner, case, runner.tokens(case)))
    cut = [o.content for o in outcomes if o.content.rstrip("\n") != case.before]
    return not cut, f"{len(cut)}/{len(outcomes)} split points lose prose, e.g. {cut[:1]}"


def end_releases_held_text(runner):
    """0005: a reply ending in "<" (it might have opened a call) keeps it."""
    case = CASES["chat/prose:trailing-angle"]
    _, outcomes = _streams(runner, case, [lambda n: [[1]] * n, lambda n: [[n]]])
    wrong = [o.content for o in outcomes if o.content != case.content]
    return not wrong, f"content {wrong[:1]!r}, expected {case.content!r}"


def block_whitespace(runner):
    """0006: the blank line before the block and the newlines between invokes
    do not stream as content."""
    bad = []
    for name in ("chat/plain+weather", "think/unicode+2calls", "chat/none+3calls"):
        case = CASES[name]
        _, outcomes = _streams(
            runner,
            case,
            [lambda n: [[1]] * n, lambda n: [[4]] * (n // 4) + ([[n % 4]] if n % 4 else [])],
        )
        bad += [(name, o.content[-20:]) for o in outcomes if o.content != case.content]
    return not bad, f"{len(bad)} streams with extra content, e.g. {bad[:1]}"


def text_after_block(runner):
    """0007: text after the tool-call block is content, streamed and not."""
    bad = []
    for name in ("chat/plain+weather+after", "think/none+2calls+after"):
        case = CASES[name]
        ids = runner.tokens(case)

        async def go(case=case, ids=ids):
            return [
                await runner.respond(case, ids, [[len(ids)]], False),
                await runner.respond(case, ids, [[1]] * len(ids), True),
            ]

        bad += [(name, o.content) for o in asyncio.run(go()) if o.content != case.content]
    return not bad, f"{bad[:2]}"


def string_values_verbatim(runner):
    """0008: a string argument ending in a newline keeps it, streamed and not."""
    case = CASES["chat/plain+write-code[params]"]
    ids = runner.tokens(case)

    async def go():
        return [
            await runner.respond(case, ids, [[len(ids)]], False),
            await runner.respond(
                case,
                ids,
                [[3]] * (len(ids) // 3) + ([[len(ids) % 3]] if len(ids) % 3 else []),
                True,
            ),
        ]

    got = [
        json.loads(o.calls[0]["arguments"])["content"] if o.calls else None
        for o in asyncio.run(go())
    ]
    want = case.calls[0].arguments["content"]
    return all(g == want for g in got), f"ends {[g[-12:] if g else g for g in got]!r}"


def recipe_block_newlines(runner):
    """0023 (0.5.23, deepseek-recipe's parse): prose ending in "<" before a call
    keeps no newline of the blank line before the block, streamed at every split
    point and one token a chunk, and not streamed; newlines inside or ending a
    reply without calls still arrive (what the patch holds, it sends)."""
    ends_newline = sc.Case("chat/prose:ends-newline", False, None, "Done:\n\n- one\n- two\n")
    bad = []
    for case in (
        CASES["chat/trailing-angle+weather"],
        CASES["think/trailing-angle+weather"],
        CASES["chat/prose:multiline"],
        ends_newline,
    ):
        ids = runner.tokens(case)

        async def go(case=case, ids=ids):
            plans = [[[len(ids)]], [[1]] * len(ids), *_splits(len(ids))]
            return [
                await runner.respond(case, ids, plan, stream=i > 0) for i, plan in enumerate(plans)
            ]

        bad += [
            (case.name, o.content[-16:])
            for o in asyncio.run(go())
            if o.content != case.content or o.error
        ]
    return not bad, f"{len(bad)} responses with other content, e.g. {bad[:2]!r}"


CHECKS = {
    "0002-dsml-stream-partial-json-value": partial_json_value,
    "0003-dsml-stream-failure-keeps-markup-out": failure_keeps_markup_out,
    "0004-dsml-stream-preamble": preamble,
    "0005-tool-stream-end-releases-held-text": end_releases_held_text,
    "0006-dsml-stream-block-whitespace": block_whitespace,
    "0007-dsml-text-after-block": text_after_block,
    "0008-dsml-string-values-verbatim": string_values_verbatim,
    "0023-dsv4-recipe-block-newlines": recipe_block_newlines,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--site",
        required=True,
        type=Path,
        action="append",
        help="a tree to check (repeatable: one after the other, in this process)",
    )
    parser.add_argument(
        "--check", action="append", choices=list(CHECKS), help="run only these (default: all)"
    )
    args = parser.parse_args(argv)
    out = {}
    for site in args.site:
        runner = sc.Runner(site, replace=True)
        results = {}
        for name in args.check or CHECKS:
            try:
                results[name] = list(CHECKS[name](runner))
            except Exception as exc:  # noqa: BLE001 (a crash is a failed check, with its reason)
                results[name] = [False, f"{type(exc).__name__}: {exc}"]
        out[str(site)] = results
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
