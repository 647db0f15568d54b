"""Reasoning: with thinking on it is present, comes before content and never
leaks into it; with thinking off it is absent. Streamed and not."""

from __future__ import annotations

from verify import scenarios
from verify.client import explain, stream_chunks
from verify.context import Context
from verify.result import Evidence
from verify.stream import merge, reasoning_of

THINK_TAGS = ("</think>", "<think>")
PARSER_FIX = "launch sglang with --reasoning-parser deepseek-v4 (the recipes do)"


def _thinking(on: bool) -> dict:
    return {"chat_template_kwargs": {"thinking": on}}


def _both(ctx: Context, on: bool, what: str):
    body = ctx.payload(scenarios.user(scenarios.THINK), max_tokens=2048)
    try:
        response = ctx.client.chat.completions.create(**body, extra_body=_thinking(on))
        chunks = stream_chunks(ctx.client, **body, extra_body=_thinking(on))
    except Exception as exc:  # noqa: BLE001
        raise explain(exc, what) from None
    return response.choices[0], merge(chunks)


def _leak(ev: Evidence, content: str, where: str) -> None:
    for tag in THINK_TAGS:
        if tag in content:
            ev.fail(
                f"{tag} inside the {where} content: reasoning leaked into content",
                "the reasoning parser is off, or the model closed its reasoning twice "
                "(seen with DSPARK draft depth 5 under load)",
                f"{PARSER_FIX}; if it is set, lower --speculative-dspark-block-size (the "
                "recipes use 4) and run the soak",
            )


def thinking_on(ctx: Context, ev: Evidence) -> None:
    choice, m = _both(ctx, True, "chat with thinking on")
    message = choice.message.model_dump()
    reasoning, field = reasoning_of(message)
    content = message.get("content") or ""
    ev.saw(
        f"non-streamed: {field or 'no reasoning field'} {len(reasoning or '')} chars, "
        f"content {content[:80]!r}, finish_reason {choice.finish_reason!r}"
    )
    ev.saw(
        f"streamed: reasoning {len(m.reasoning)} chars via {sorted(m.reasoning_fields)}, "
        f"content {m.content[:80]!r}, first content delta #{m.first('content')}, "
        f"last reasoning delta #{m.last('reasoning')}"
    )
    _leak(ev, content, "non-streamed")
    _leak(ev, m.content, "streamed")
    if not reasoning:
        ev.fail(
            "thinking on, but the non-streamed response has no reasoning_content/reasoning",
            "the reasoning parser is off (reasoning then sits in content) or the template "
            "ignores chat_template_kwargs.thinking",
            PARSER_FIX,
        )
    if not m.reasoning:
        ev.fail(
            "thinking on, but the stream carried no reasoning deltas",
            "the streaming reasoning parser is off or broken",
            PARSER_FIX,
        )
    if choice.finish_reason == "length" and not content.strip():
        ev.fail(
            "reasoning used up all of max_tokens, content empty",
            "the model kept thinking (a reasoning loop, or max_tokens too small)",
            "raise max_tokens in clients; run the soak to look for loops",
        )
    if not content.strip() or not m.content.strip():
        ev.fail(
            "thinking on, but no content after the reasoning",
            "everything went into reasoning: `</think>` was never parsed",
            PARSER_FIX,
        )
    if (
        m.first("content") is not None
        and m.last("reasoning") is not None
        and m.first("content") < m.last("reasoning")
    ):
        ev.fail(
            "streamed reasoning continues after content started",
            "the parser re-entered reasoning mid-answer (a second <think>)",
            "run the soak; lower the DSPARK draft depth if it recurs",
        )
    if reasoning.strip() != m.reasoning.strip():
        ev.saw("note: streamed and non-streamed reasoning differ (allowed: sampling)")


def thinking_off(ctx: Context, ev: Evidence) -> None:
    choice, m = _both(ctx, False, "chat with thinking off")
    message = choice.message.model_dump()
    reasoning, field = reasoning_of(message)
    content = message.get("content") or ""
    ev.saw(f"non-streamed: reasoning {len(reasoning or '')} chars, content {content[:80]!r}")
    ev.saw(f"streamed: reasoning {len(m.reasoning)} chars, content {m.content[:80]!r}")
    _leak(ev, content, "non-streamed")
    _leak(ev, m.content, "streamed")
    if reasoning or m.reasoning:
        ev.fail(
            "thinking off, but reasoning came back",
            "thinking forced on server-wide (SGLANG_ENABLE_THINKING=1 or a template "
            "default) or the parser treats all output as reasoning",
            "expected if the recipe turns thinking on for every request; otherwise check "
            "the chat template and SGLANG_ENABLE_THINKING",
        )
    if not content.strip():
        ev.fail("thinking off, content empty", "output went to reasoning or nowhere", PARSER_FIX)
