"""Chat completions, non-streamed and streamed, and the raw event stream."""

from __future__ import annotations

from verify import scenarios
from verify.client import explain, read_stream, stream_chunks
from verify.context import Context
from verify.result import Evidence
from verify.stream import merge

NO_USAGE_FIX = (
    "sglang always reports usage; a proxy in front may drop it. Query the server "
    "directly to tell which"
)


def _check_usage(ev: Evidence, usage: dict | None, where: str) -> None:
    if not usage:
        ev.fail(
            f"no usage in {where}", "the server or a proxy in front of it drops usage", NO_USAGE_FIX
        )
    prompt, completion, total = (
        usage.get("prompt_tokens"),
        usage.get("completion_tokens"),
        usage.get("total_tokens"),
    )
    if prompt is None or completion is None or total is None or prompt + completion != total:
        ev.fail(
            f"usage does not add up in {where}: {prompt} + {completion} != {total}",
            "a broken usage count (server or proxy)",
            NO_USAGE_FIX,
        )
    ev.saw(f"usage in {where}: {prompt} + {completion} = {total}")


def chat(ctx: Context, ev: Evidence) -> None:
    """Non-streamed: role, id, created, one finish_reason, usage sums."""
    try:
        response = ctx.client.chat.completions.create(
            **ctx.payload(scenarios.user(scenarios.SHORT))
        )
    except Exception as exc:  # noqa: BLE001
        raise explain(exc, "chat completion") from None
    data = response.model_dump()
    ev.saw(f"id={response.id!r} created={response.created} choices={len(response.choices)}")
    if not response.id or not response.created:
        ev.fail(
            "response without id or created", "not an OpenAI-compatible server", "check --base-url"
        )
    if len(response.choices) != 1:
        ev.fail(f"{len(response.choices)} choices for n=1", "server ignored n", "check sglang")
    choice = response.choices[0]
    ev.saw(
        f"role={choice.message.role!r} finish_reason={choice.finish_reason!r} "
        f"content={choice.message.content!r}"
    )
    if choice.message.role != "assistant":
        ev.fail(
            f"role {choice.message.role!r}, expected 'assistant'",
            "not an OpenAI chat server",
            "check --base-url",
        )
    if choice.finish_reason != "stop":
        ev.fail(
            f"finish_reason {choice.finish_reason!r} for a one-word answer (expected 'stop')",
            "the answer ran to max_tokens (a loop) or was aborted",
            "read the content above; run the soak for degeneration",
        )
    if not (choice.message.content or "").strip():
        ev.fail(
            "empty content",
            "the model produced nothing, or everything went to reasoning",
            "check --reasoning-parser and the chat template",
        )
    _check_usage(ev, data.get("usage"), "the response")


def chat_stream(ctx: Context, ev: Evidence) -> None:
    """Streamed through the SDK: role first only, one finish_reason, same text as
    non-streamed at temperature 0."""
    payload = ctx.payload(scenarios.user(scenarios.SHORT))
    try:
        reference = ctx.client.chat.completions.create(**payload).choices[0].message.content or ""
        chunks = stream_chunks(ctx.client, **payload)
    except Exception as exc:  # noqa: BLE001
        raise explain(exc, "streamed chat completion") from None
    m = merge(chunks)
    ev.saw(f"{m.chunks} chunks, roles at chunks {m.roles}, finish_reasons {m.finish_reasons}")
    if m.errors:
        ev.fail(
            f"error event in the stream: {m.errors[0]}",
            "the server failed mid-stream",
            "read the server log",
        )
    if not m.roles or m.roles[0][1] != "assistant" or m.roles[0][0] != 0:
        ev.fail(
            f"the first delta does not carry role 'assistant' (roles seen: {m.roles})",
            "not sglang's OpenAI stream format",
            "check --base-url and any proxy",
        )
    if len({r for _, r in m.roles}) > 1 or any(r != "assistant" for _, r in m.roles):
        ev.fail(
            f"role changes within the stream: {m.roles}",
            "a proxy rewriting deltas",
            "query the server directly",
        )
    if len(m.response_ids) != 1:
        ev.fail(
            f"chunk ids differ within one stream: {sorted(m.response_ids)[:3]}",
            "a proxy mixing streams",
            "query the server directly",
        )
    for index, values in m.finish_reasons.items():
        if len(values) != 1:
            ev.fail(
                f"choice {index} has {len(values)} finish_reasons: {values}",
                "a stream that repeats its end",
                "check the sglang version",
            )
    if 0 not in m.finish_reasons:
        ev.fail(
            "no finish_reason in the stream",
            "the stream was cut before its end",
            "read the server log for this request",
        )
    streamed = m.content
    ev.saw(f"streamed {streamed!r} / non-streamed {reference!r}")
    # Streamed content keeps a trailing newline the non-streamed path strips:
    # compare with trailing whitespace removed, and say when that mattered.
    if streamed.rstrip() != reference.rstrip():
        ev.fail(
            "streamed text differs from non-streamed at temperature 0",
            "the streaming path re-assembles text differently (a parser dropping or "
            "duplicating text between chunks), or the server is not deterministic at "
            "temperature 0",
            "compare the two texts above; try --tool-call-parser/--reasoning-parser off "
            "to see which parser changes the stream",
        )
    if streamed != reference:
        ev.saw(
            "texts equal once trailing whitespace is removed (streamed content keeps a "
            "trailing newline the non-streamed path strips)"
        )


def raw_stream(ctx: Context, ev: Evidence) -> None:
    """The bytes the SDK hides: only `data:` lines, ending with `data: [DONE]`,
    and stream_options.include_usage giving one final usage chunk."""
    payload = ctx.payload(
        scenarios.user(scenarios.SHORT), stream=True, stream_options={"include_usage": True}
    )
    try:
        raw = read_stream(ctx.http, payload, limits=ctx.endpoint.limits)
    except Exception as exc:  # noqa: BLE001
        raise explain(exc, "raw streamed request") from None
    ev.saw(
        f"HTTP {raw.status}, {len(raw.lines)} lines, {len(raw.events)} data events, "
        f"[DONE] {'seen' if raw.done else 'missing'}"
    )
    if raw.bad_lines:
        ev.fail(
            f"lines that are not server-sent events: {raw.bad_lines[:2]}",
            "a proxy or server writing non-SSE output",
            "query the server directly",
        )
    if not raw.done:
        ev.fail(
            "the stream ended without 'data: [DONE]'",
            "the server closed the stream early (a crash mid-stream) or a proxy drops the "
            "terminator; clients that wait for [DONE] hang or retry",
            "read the server log for this request; try without the proxy",
        )
    if raw.after_done:
        ev.fail(
            f"data after [DONE]: {raw.after_done[:2]}",
            "a proxy merging streams",
            "query the server directly",
        )
    m = merge(raw.events)
    usage_chunks = m.usage
    if not usage_chunks:
        ev.fail(
            "stream_options.include_usage asked, no usage chunk came",
            "the server or a proxy ignores stream_options",
            NO_USAGE_FIX,
        )
    number, usage, n_choices = usage_chunks[-1]
    if number != len(raw.events) - 1 or n_choices != 0:
        ev.fail(
            f"usage chunk is not the final chunk with choices == [] (chunk {number} of "
            f"{len(raw.events)}, {n_choices} choices)",
            "usage sent the wrong way for include_usage",
            "check the sglang version",
        )
    if len(usage_chunks) > 1:
        ev.fail(
            f"{len(usage_chunks)} chunks carry usage; only the final one should",
            "continuous usage stats on by default",
            "check stream_options handling",
        )
    _check_usage(ev, usage, "the final stream chunk")
