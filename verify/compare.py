"""`--compare-url URL`: the same temperature-0 prompts to a second endpoint.

The second endpoint is the same recipe booted without speculative decoding
(`sm12x launch --no-spec`). Speculative decoding is lossless in exact
arithmetic, so at temperature 0 the two should write the same text; in
floating point they do not quite: the target model's logits come from a
verify pass over gamma+1 rows instead of one, so a near-tie between the two
best tokens can resolve the other way, and from there the greedy paths part
(fluently). A wrong verify row is different: wrong tokens early and often.

Both endpoints get the soak's prompts (chat, thinking, tool calls and the
exact tasks), one round at the soak's concurrency, streamed as the soak
streams them, at temperature 0, both at the same time (corruption shows under
load). Reported:

- the fraction of outputs that are identical;
- where each differing pair first parts (character and token), with the text
  around the earliest one;
- token agreement: per pair, the share of tokens written before the paths
  part (common prefix / longer output), averaged. "Tokens" are words,
  numbers, punctuation marks and runs of white space, not the model's BPE
  tokens (verify has no tokenizer).

It fails when the agreement is below `--compare-min-agreement` (calibrated on
the stand-in, docs/verify.md), or when an exact task is right on the
reference and wrong on the speculative server (ground truth, whatever the
agreement).
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
from dataclasses import dataclass, replace

import httpx

from sm12x.http import transport
from sm12x.http.transport import Limits, aiter_lines, async_client
from verify import exact, scenarios
from verify.client import Endpoint
from verify.context import Context
from verify.result import Evidence
from verify.stream import Merged, merge

MIN_AGREEMENT = 0.8
_TOKEN = re.compile(r"\w+|[^\w\s]|\s+")
MIX = scenarios.SOAK_MIX + exact.SOAK_MIX


@dataclass
class Output:
    kind: str
    text: str = ""
    error: str | None = None
    wrong: exact.Mismatch | None = None  # the exact task's mismatch, if any


@dataclass(frozen=True)
class Pair:
    """One prompt's two outputs, compared."""

    case: int
    kind: str
    identical: bool
    char: int | None  # first differing character
    token: int | None  # first differing token
    agreement: float  # common-prefix tokens / tokens of the longer output
    expected: str = ""  # reference text around the divergence
    received: str = ""  # speculative text around the divergence


def visible(merged: Merged) -> str:
    """Everything the model wrote, as one text: reasoning, content, calls
    (arguments as canonical JSON where they parse). White space at either end
    of a channel does not count: sglang's streaming tool parser passes the
    blank lines before a call on as content or not, by where chunks split."""
    parts = [merged.reasoning.strip(), merged.content.strip()]
    for index in sorted(merged.calls):
        call = merged.calls[index]
        arguments = call.arguments
        try:
            arguments = json.dumps(json.loads(arguments), sort_keys=True, ensure_ascii=False)
        except json.JSONDecodeError:
            pass
        parts.append(f"[call {call.name} {arguments}]")
    return "\n".join(p for p in parts if p)


def compare_texts(case: int, kind: str, reference: str, target: str) -> Pair:
    if reference == target:
        return Pair(case, kind, True, None, None, 1.0)
    a, b = _TOKEN.findall(reference), _TOKEN.findall(target)
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    char = exact.first_difference(reference, target)
    assert char is not None  # the texts differ
    start = max(0, char - exact.CONTEXT)
    return Pair(
        case,
        kind,
        False,
        char,
        same,
        same / max(len(a), len(b)),
        reference[start : char + exact.CONTEXT],
        target[start : char + exact.CONTEXT],
    )


async def _one(
    client: httpx.AsyncClient, model: str | None, case: int, limit: float, max_tokens: int
) -> Output:
    kind, extra = MIX[case % len(MIX)]
    out = Output(kind)
    body = {"model": model, "max_tokens": max_tokens, **extra, "temperature": 0, "stream": True}
    events: list[dict] = []

    async def read() -> None:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:120]}")
            async for line in aiter_lines(response, client_limits(max_tokens)):
                data = line[5:].strip() if line.startswith("data:") else ""
                if data and data != "[DONE]":
                    events.append(json.loads(data))

    try:
        # The transport bounds each request too; asyncio.timeout, not wait_for:
        # nested in 3.11, wait_for can lose a cancellation.
        async with asyncio.timeout(limit):
            await read()
    except TimeoutError:
        out.error = f"not finished within {limit:.0f} s"
        return out
    except (httpx.HTTPError, RuntimeError, ValueError, OSError) as exc:
        out.error = f"{type(exc).__name__}: {str(exc)[:120]}"
        return out
    merged = merge(events)
    if merged.errors:
        out.error = f"error event: {str(merged.errors[0])[:120]}"
        return out
    out.text = visible(merged)
    out.wrong = exact.score(kind, merged)
    return out


async def collect(
    endpoint: Endpoint, model: str | None, cases: int, max_tokens: int
) -> list[Output]:
    """The outputs of the first `cases` prompts of the mix, all in flight at once."""
    pool = transport.pool(cases)
    bounds = replace(
        endpoint.limits, max_body=client_limits(max_tokens).max_body, fail_fast_after=0
    )
    async with async_client(
        bounds, base_url=endpoint.base_url, headers=endpoint.headers, limits=pool
    ) as client:
        return list(
            await asyncio.gather(
                *(_one(client, model, case, endpoint.timeout, max_tokens) for case in range(cases))
            )
        )


def client_limits(max_tokens: int) -> Limits:
    """Per-stream caps, as the soak's: 1 KiB a token (verify/soak.py)."""
    return Limits(max_body=1024 * max_tokens + 64 * 1024)


def served_model(endpoint: Endpoint) -> str | None:
    try:
        with transport.client(endpoint.limits, headers=endpoint.headers) as http:
            response = http.get(endpoint.base_url + "/v1/models")
            data = response.json().get("data") or []
        return data[0]["id"] if data else None
    except (httpx.HTTPError, ValueError, KeyError, IndexError, AttributeError, TypeError):
        return None


def compare(ctx: Context, ev: Evidence) -> None:
    opts = ctx.options
    ref_ep = opts.compare_endpoint
    assert ref_ep is not None  # the runner runs this check only with --compare-url
    ref_model = served_model(ref_ep) or ctx.model
    cases = max(opts.soak_concurrency, len(MIX))

    async def both():
        return await asyncio.gather(
            collect(ctx.endpoint, ctx.model, cases, opts.soak_max_tokens),
            collect(ref_ep, ref_model, cases, opts.soak_max_tokens),
        )

    target, reference = asyncio.run(both())
    ev.saw(
        f"{cases} prompts at temperature 0 to {ctx.endpoint.base_url} (speculative) and "
        f"{ref_ep.base_url} (reference, model {ref_model!r}), all in flight at once"
    )
    failed = [
        (side, o)
        for side, outs in (("speculative", target), ("reference", reference))
        for o in outs
        if o.error
    ]
    if failed:
        side, first = failed[0]
        ev.fail(
            f"{len(failed)} comparison request(s) failed; first on the {side} server "
            f"({first.kind}): {first.error}",
            "a server dropped, rejected or stalled a request, so the outputs cannot be compared",
            "run verify against each server alone first; it names the problem",
        )
    pairs = [
        compare_texts(i, t.kind, r.text, t.text) for i, (t, r) in enumerate(zip(target, reference))
    ]
    identical = sum(p.identical for p in pairs) / len(pairs)
    agreement = statistics.fmean(p.agreement for p in pairs)
    differing = [p for p in pairs if not p.identical]
    by_kind = {}
    for kind in dict.fromkeys(p.kind for p in pairs):
        mine = [p for p in pairs if p.kind == kind]
        by_kind[kind] = {
            "pairs": len(mine),
            "identical": sum(p.identical for p in mine),
            "agreement": statistics.fmean(p.agreement for p in mine),
        }
    ev.metrics.update(
        {
            "pairs": len(pairs),
            "identical_fraction": identical,
            "token_agreement": agreement,
            "min_agreement": opts.compare_min_agreement,
            "by_kind": by_kind,
        }
    )
    ev.saw(
        f"identical {sum(p.identical for p in pairs)}/{len(pairs)} ({identical:.3f}); "
        f"token agreement {agreement:.3f} (floor {opts.compare_min_agreement:.2f})"
    )
    if differing:
        earliest = min(differing, key=lambda p: p.char or 0)
        chars = [p.char or 0 for p in differing]
        ev.metrics["first_divergence"] = {
            "median_char": statistics.median(chars),
            "min_char": earliest.char,
            "min_token": earliest.token,
            "case": earliest.case,
            "kind": earliest.kind,
            "reference": earliest.expected,
            "speculative": earliest.received,
        }
        ev.saw(
            f"{len(differing)} differ; first divergence at char {earliest.char} (token "
            f"{earliest.token}) in case {earliest.case} ({earliest.kind}): reference "
            f"{earliest.expected!r}, speculative {earliest.received!r}; median divergence "
            f"char {statistics.median(chars):.0f}"
        )
    truth = [
        (t, r)
        for t, r in zip(target, reference)
        if t.wrong and not r.wrong and t.kind in exact.TASKS
    ]
    ref_wrong = [r for r in reference if r.wrong]
    if ref_wrong:
        ev.saw(
            f"note: the reference got {len(ref_wrong)} exact task(s) wrong too "
            f"({ref_wrong[0].kind}: {ref_wrong[0].wrong})"
        )
    if truth:
        t, _ = truth[0]
        ev.fail(
            f"{len(truth)} exact task(s) right without speculative decoding and wrong with "
            f"it; first {t.kind}: {t.wrong}",
            "speculative decoding changes answers that have one right answer: wrong "
            "tokens from the draft/verify path (a stale or wrong DSPARK verify row), not "
            "numerics",
            FIX,
        )
    if agreement < opts.compare_min_agreement:
        ev.fail(
            f"token agreement {agreement:.3f} below {opts.compare_min_agreement:.2f} "
            f"({sum(p.identical for p in pairs)}/{len(pairs)} identical)",
            "the speculative server's outputs part from the reference early and often, "
            "more than near-tie numerics explain: wrong tokens under speculative decoding",
            FIX,
        )


FIX = (
    "read the divergence above; check the image's patch is applied and the recipe's "
    "--speculative-dspark-block-size (4); run the soak to see which answers break"
)
