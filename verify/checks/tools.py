"""Tool calls, non-streamed and streamed, against JSON Schemas.

Non-streamed `index` fields are not compared: OpenAI's non-streamed tool calls
have none, and sglang 0.5.16 fills it with the tool's position in `tools`
(parallel calls to one tool all say 0). Streamed calls are merged by index.
"""

from __future__ import annotations

import json

import jsonschema
import openai

from verify import scenarios
from verify.client import explain, stream_chunks
from verify.context import Context
from verify.result import Evidence
from verify.stream import Merged, merge

PARSER_FIX = "launch sglang with --tool-call-parser deepseekv4 (the recipes do)"
STREAM_FIX = (
    "serve with the sm12x image: its sglang patches fix the streaming tool parser "
    "(docs/streaming.md); or stream without DSPARK"
)
DSML = "｜DSML｜"
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def _canonical(name: str, arguments: dict) -> str:
    return json.dumps([name, arguments], sort_keys=True, ensure_ascii=False)


def validate(ev: Evidence, name: str | None, arguments: str | None, where: str) -> dict:
    if name not in scenarios.SCHEMAS:
        ev.fail(
            f"{where}: call to unknown tool {name!r}",
            "the parser mangled the name, or the model invented a tool",
            "check --tool-call-parser deepseekv4 and the sglang version",
        )
    try:
        value = json.loads(arguments or "")
    except json.JSONDecodeError as exc:
        ev.fail(
            f"{where}: arguments of {name} are not JSON ({exc.msg} at {exc.pos}): "
            f"{(arguments or '')[:160]!r}",
            "malformed tool-call JSON: the model wrote broken arguments (seen with DSPARK "
            "draft depth 5) or the stream lost fragments",
            "run the soak; lower --speculative-dspark-block-size (recipes use 4)",
        )
    if not isinstance(value, dict):
        ev.fail(
            f"{where}: arguments of {name} are {type(value).__name__}, not an object",
            "malformed tool-call arguments",
            "check the tool parser",
        )
    try:
        jsonschema.validate(value, scenarios.SCHEMAS[name])
    except jsonschema.ValidationError as exc:
        ev.fail(
            f"{where}: arguments of {name} break its schema: {exc.message} "
            f"(at {'/'.join(map(str, exc.absolute_path)) or 'top level'}): "
            f"{json.dumps(value)[:160]}",
            "the model wrote wrong or incomplete arguments, or the parser dropped some "
            "(a JSON body cut short parses as no parameters)",
            "run the soak to see how often; check the sglang version's deepseekv4 parser",
        )
    return value


def _no_calls_failure(ev: Evidence, content: str | None, where: str):
    if content and DSML in content:
        ev.fail(
            f"{where}: raw DSML tool-call markup in content, no tool_calls",
            "the server has no tool-call parser",
            PARSER_FIX,
        )
    ev.fail(
        f"{where}: no tool_calls in the response (content {(content or '')[:100]!r})",
        "is `--tool-call-parser deepseekv4` set? Without it the model's calls are not "
        "parsed; or the model chose not to call",
        PARSER_FIX,
    )


def request(ctx: Context, messages, tools, tool_choice=None, what="tool request", **extra):
    body = ctx.payload(messages, tools=tools, max_tokens=2048, **extra)
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    try:
        return ctx.client.chat.completions.create(**body).choices[0]
    except Exception as exc:  # noqa: BLE001
        raise explain(exc, what) from None


def stream(
    ctx: Context, messages, tools, tool_choice=None, what="streamed tool request", **extra
) -> Merged:
    body = ctx.payload(messages, tools=tools, max_tokens=2048, **extra)
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    try:
        chunks = stream_chunks(ctx.client, **body)
    except Exception as exc:  # noqa: BLE001
        raise explain(exc, what) from None
    return merge(chunks)


def calls_of(ev: Evidence, choice, where: str, expect: str | None = None) -> list[tuple[str, dict]]:
    message = choice.message
    if not message.tool_calls:
        _no_calls_failure(ev, message.content, where)
    if choice.finish_reason != "tool_calls":
        ev.fail(
            f"{where}: finish_reason {choice.finish_reason!r} with tool calls (expected "
            "'tool_calls')",
            "the server does not mark tool-call turns; agents that wait for "
            "finish_reason == 'tool_calls' never run the tools",
            "check the sglang version (0.5.16 sets it) and any proxy in between",
        )
    if message.content and message.content.strip():
        ev.saw(f"{where}: content beside the calls: {message.content[:80]!r}")
    out, ids = [], set()
    for n, call in enumerate(message.tool_calls):
        if call.type != "function" or not call.id:
            ev.fail(
                f"{where}: call {n} has type {call.type!r} / id {call.id!r}",
                "incomplete tool call objects",
                "check the sglang version",
            )
        if call.id in ids:
            ev.fail(
                f"{where}: two calls share id {call.id!r}",
                "ids not unique: tool results cannot be matched to calls",
                "check the sglang version",
            )
        ids.add(call.id)
        args = validate(ev, call.function.name, call.function.arguments, f"{where} call {n}")
        out.append((call.function.name, args))
    if expect and any(name != expect for name, _ in out):
        ev.fail(
            f"{where}: called {[n for n, _ in out]}, expected {expect}",
            "tool_choice not honoured",
            "check the sglang version",
        )
    ev.saw(
        f"{where}: {len(out)} call(s) {[n for n, _ in out]}, finish_reason tool_calls, "
        "arguments valid"
    )
    return out


def streamed_calls_of(ev: Evidence, m: Merged, where: str) -> list[tuple[str, dict]]:
    if m.errors:
        ev.fail(
            f"{where}: error event in the stream: {str(m.errors[0])[:200]}",
            "the server failed mid-stream",
            "read the server log",
        )
    if not m.calls:
        _no_calls_failure(ev, m.content, where)
    if m.finish_reason != "tool_calls":
        ev.fail(
            f"{where}: streamed finish_reason {m.finish_reason!r} with tool calls "
            "(expected 'tool_calls')",
            "the stream does not mark the tool-call turn (or was cut before its end)",
            "check the sglang version and any proxy in between",
        )
    out: list[tuple[str, dict]] = []
    for index in sorted(m.calls):
        call = m.calls[index]
        if len(set(call.ids)) > 1:
            ev.fail(
                f"{where}: the id of call {index} changed within the stream: {call.ids}",
                "fragments of one call carry different ids; clients merging by id split "
                "the call in two",
                "check the sglang version and any proxy re-serialising the stream",
            )
        if not call.id:
            ev.fail(
                f"{where}: streamed call {index} never carried an id",
                "tool results cannot be matched",
                "check the sglang version",
            )
        if not call.names:
            ev.fail(
                f"{where}: streamed call {index} arrived without a name "
                f"(arguments {call.arguments[:80]!r})",
                "a call without a name: the streaming tool parser lost the call's first "
                "fragment (sglang 0.5.16/0.5.17 under DSPARK's multi-token chunks)",
                STREAM_FIX,
            )
        if len(call.names) > 1:
            ev.fail(
                f"{where}: call {index} named {len(call.names)} times: {call.names}",
                "the name should come once, in the call's first fragment",
                "check the sglang version",
            )
        name = call.names[0]  # exactly one, checked above
        args = validate(ev, name, call.arguments, f"{where} streamed call {index}")
        out.append((name, args))
    if DSML in m.content:
        ev.fail(
            f"{where}: DSML markup in streamed content: {m.content[:120]!r}",
            "markup in content: the streaming tool parser lost track of the tool-call "
            "markup (sglang 0.5.16/0.5.17 under DSPARK's multi-token chunks)",
            STREAM_FIX,
        )
    ev.saw(
        f"{where}: {len(out)} streamed call(s) over "
        f"{sum(c.fragments for c in m.calls.values())} fragments, ids stable, args valid"
    )
    return out


def same_prose(ev: Evidence, plain: str | None, streamed: str, where: str) -> None:
    """The text a tool-call turn writes before its calls, streamed and not.

    Whitespace at the ends is not compared (sglang's non-streamed path strips
    the blank line before the calls). A streamed text that is a strict prefix
    of the non-streamed one, or empty, is the streaming parser dropping what
    shared a chunk with the call's opening markup; any other difference is
    noted, not failed (two generations may word it differently)."""
    plain, got = (plain or "").strip(), (streamed or "").strip()
    if got == plain:
        if plain:
            ev.saw(f"{where}: text before the calls streamed whole ({len(plain)} chars)")
        return
    if plain.startswith(got):
        lost = "all of it" if not got else f"its last {len(plain) - len(got)} chars"
        ev.fail(
            f"{where}: text before a tool call lost in the stream ({lost}): streamed "
            f"{got[-60:]!r}, non-streamed {plain[-60:]!r}",
            "text before a tool call lost: the streaming tool parser drops prose that "
            "arrives in the same chunk as the call's markup (sglang 0.5.16/0.5.17 under "
            "DSPARK's multi-token chunks)",
            STREAM_FIX,
        )
    ev.saw(
        f"{where}: streamed text before the calls differs from the non-streamed one: "
        f"{got[:60]!r} vs {plain[:60]!r}"
    )


def _same(ev: Evidence, plain, streamed, where: str) -> None:
    a = sorted(_canonical(n, args) for n, args in plain)
    b = sorted(_canonical(n, args) for n, args in streamed)
    if a != b:
        ev.fail(
            f"{where}: streamed calls differ from non-streamed: {b[:2]} vs {a[:2]}",
            "the streaming parser lost or changed argument fragments (truncated streamed "
            "tool calls)",
            "check the sglang version's deepseekv4 streaming parser; run the soak",
        )


CASES = [
    ("weather", scenarios.WEATHER),
    ("flights: nested, enum, array", scenarios.FLIGHTS),
    ("write_file: long code argument", scenarios.WRITE),
]


def tools(ctx: Context, ev: Evidence) -> None:
    for label, prompt in CASES:
        choice = request(ctx, scenarios.user(prompt), scenarios.tools(), what=label)
        calls_of(ev, choice, label)


def tools_stream(ctx: Context, ev: Evidence) -> None:
    for label, prompt in CASES:
        choice = request(ctx, scenarios.user(prompt), scenarios.tools(), what=label)
        plain = calls_of(ev, choice, label)
        m = stream(ctx, scenarios.user(prompt), scenarios.tools(), what=label)
        streamed = streamed_calls_of(ev, m, label)
        same_prose(ev, choice.message.content, m.content, label)
        _same(ev, plain, streamed, label)
    ev.saw("streamed arguments merged by index equal the non-streamed ones (as objects)")


def parallel(ctx: Context, ev: Evidence) -> None:
    msgs = scenarios.user(scenarios.PARALLEL)
    choice = request(ctx, msgs, [scenarios.GET_WEATHER], what="parallel")
    plain = calls_of(ev, choice, "parallel")
    if len(plain) < 2:
        ev.fail(
            f"asked for two parallel calls, got {len(plain)}",
            "the parser keeps only the first invoke, or the model made one call",
            "check the sglang version's deepseekv4 parser",
        )
    m = stream(ctx, msgs, [scenarios.GET_WEATHER], what="parallel streamed")
    streamed = streamed_calls_of(ev, m, "parallel streamed")
    same_prose(ev, choice.message.content, m.content, "parallel")
    if len(m.calls) < 2:
        ev.fail(
            f"streamed: {len(m.calls)} distinct index(es) for two calls",
            "parallel calls streamed under one index merge into invalid arguments",
            "check the sglang version",
        )
    _same(ev, plain, streamed, "parallel")


def tool_choice(ctx: Context, ev: Evidence) -> None:
    weather = scenarios.user(scenarios.WEATHER)
    named = scenarios.user(scenarios.NAMED)
    offered = scenarios.tools()
    calls_of(ev, request(ctx, weather, offered, "auto", what="auto"), "auto")
    streamed_calls_of(ev, stream(ctx, weather, offered, "auto", what="auto"), "auto streamed")
    calls_of(ev, request(ctx, named, offered, "required", what="required"), "required")
    streamed_calls_of(ev, stream(ctx, named, offered, "required"), "required streamed")
    calls_of(ev, request(ctx, named, offered, NAMED, what="named"), "named", expect="get_weather")
    names = [
        n for n, _ in streamed_calls_of(ev, stream(ctx, named, offered, NAMED), "named streamed")
    ]
    if any(n != "get_weather" for n in names):
        ev.fail(
            f"named streamed: called {names}, expected get_weather",
            "tool_choice ignored",
            "check the sglang version",
        )
    choice = request(ctx, weather, offered, "none", what="none")
    m = stream(ctx, weather, offered, "none", what="none streamed")
    if choice.message.tool_calls or m.calls:
        ev.fail(
            "tool_choice 'none' still produced tool calls",
            "tool_choice not honoured",
            "check the sglang version",
        )
    ev.saw(f"none: no calls, content {(choice.message.content or '')[:60]!r}")
    # A named tool that does not exist is a 400, and the server stays up.
    try:
        ctx.client.chat.completions.create(
            **ctx.payload(
                named,
                tools=offered,
                tool_choice={"type": "function", "function": {"name": "no_such_tool"}},
            )
        )
        ev.fail(
            "tool_choice naming an unknown tool was accepted (expected HTTP 400)",
            "the server does not validate tool_choice",
            "check the sglang version",
        )
    except openai.BadRequestError:
        ev.saw("unknown named tool -> HTTP 400")
    except Exception as exc:  # noqa: BLE001
        raise explain(exc, "unknown named tool") from None
    health = ctx.http.get("/health")
    if health.status_code != 200:
        ev.fail(
            f"/health HTTP {health.status_code} after a rejected request",
            "a bad request took the server down",
            "read the server log",
        )


def multi_turn(ctx: Context, ev: Evidence) -> None:
    choice = request(ctx, scenarios.multi_turn(), scenarios.tools(), what="multi-turn")
    content = choice.message.content or ""
    ev.saw(
        f"answer after the tool result: {content[:120]!r}, finish_reason {choice.finish_reason!r}"
    )
    if choice.message.tool_calls:
        ev.fail(
            "called a tool again although the result was given",
            "the role: tool message did not reach the model (template or tool_call_id handling)",
            "check the chat template / sglang version",
        )
    if choice.finish_reason != "stop":
        ev.fail(
            f"finish_reason {choice.finish_reason!r} (expected 'stop')",
            "the answer did not end normally",
            "read the content above",
        )
    if "17.5" not in content and "light rain" not in content.lower():
        ev.fail(
            "the answer does not use the tool result (17.5 / light rain)",
            "the role: tool message did not reach the model",
            "check the chat template and how tool messages are rendered",
        )


def not_needed(ctx: Context, ev: Evidence) -> None:
    msgs = scenarios.user(scenarios.NOT_NEEDED)
    choice = request(ctx, msgs, scenarios.tools(), what="not needed")
    m = stream(ctx, msgs, scenarios.tools(), what="not needed streamed")
    ev.saw(
        f"content {choice.message.content!r}, finish_reason {choice.finish_reason!r}; "
        f"streamed {m.content!r}, {len(m.calls)} tool deltas"
    )
    if choice.message.tool_calls or m.calls:
        ev.fail(
            "a tool was called for 2 + 3",
            "the model over-calls tools (or a parser invents calls)",
            "check the sglang version and the chat template",
        )
    if choice.finish_reason != "stop" or m.finish_reason != "stop":
        ev.fail(
            f"finish_reason {choice.finish_reason!r}/{m.finish_reason!r} (expected 'stop')",
            "tool-call finish reason set without calls",
            "check the sglang version",
        )
    if DSML in (choice.message.content or "") + m.content:
        ev.fail("DSML markup in content", "the tool parser is off", PARSER_FIX)
    if "5" not in (choice.message.content or ""):
        ev.fail(
            f"expected 5, got {choice.message.content!r}",
            "the model answered wrongly",
            "look at the output; check the model and quantisation",
        )
