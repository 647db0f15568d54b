"""A stand-in for an sglang server running DeepSeek-V4-Flash-0731 with DSPARK.

The HTTP surface is sglang's (`/health`, `/v1/models`, `/v1/chat/completions`
streamed and not, `/server_info`, `/get_server_info`, `/metrics`, and a
one-token `/v1/completions` for `sm12x healthcheck` through a router), and the
responses are built the way sglang 0.5.16's `serving_chat.py` builds them:
scripted raw model text (model.py) goes through sglang's real
`ReasoningParser("deepseek-v4")` and `FunctionCallParser(tools, "deepseekv4")`,
non-streamed in one piece and streamed step by step (each step one to a few
tokens, as speculative decoding delivers them), and is serialised with
sglang's own protocol models and SSE helper.

Faults (`Faults`) reproduce what verify must catch; see FAULTS.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import uuid
from dataclasses import dataclass, field

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.fake_sglang import corruption, model
from tests.support.fake_sglang.sglang_parsers import load

MODEL_ID = "deepseek-ai/DeepSeek-V4-Flash-0731"

FAULTS = {
    "healthy": "no fault",
    "loop": "under concurrency, some outputs end in a repetition loop (depth-5 style)",
    "salad": "under concurrency, some outputs turn into word salad (depth-5 style)",
    "think-leak": "with thinking on, a second </think> leaks reasoning and the tag into content",
    "no-reasoning-parser": "served without --reasoning-parser: reasoning stays in content",
    "no-tool-parser": "served without --tool-call-parser: raw DSML markup in content",
    "bad-tool-json": "the model writes tool arguments as JSON with its closing brace lost",
    "truncated-tool-stream": "streamed tool-call arguments stop after their first fragment",
    "tool-id-change": "streamed tool-call fragments carry a new id each time",
    "wrong-finish-reason": "tool calls end with finish_reason 'stop' instead of 'tool_calls'",
    "no-usage": "no usage in responses, stream_options.include_usage ignored",
    "no-done": "streams end without the final 'data: [DONE]'",
    "stall": "streams stall after a few chunks (no bytes, connection left open)",
    "http-500": "chat completions answer HTTP 500",
    "hang": "every request is accepted and never answered",
    "no-spec": "speculative decoding off: no acceptance length, the gauge reads 0",
    "low-accept": "speculative decoding on but accepting almost nothing (1.1)",
    "router-info": "answers server info like sglang-router: router fields, no /server_info or /metrics",
}
FAULTS.update(corruption.FAULTS)  # wrong tokens in fluent text (corruption.py)


@dataclass
class Faults:
    active: set[str] = field(default_factory=set)
    # loop/salad: corrupt every `every`-th request while at least
    # `min_concurrency` requests are in flight (single requests stay clean).
    every: int = 8
    min_concurrency: int = 4
    stall_seconds: float = 3600.0
    die_after: int = 0  # exit the process after this many chat requests (0: never)

    def __contains__(self, name: str) -> bool:
        return name in self.active

    @classmethod
    def parse(cls, spec: str | list[str] | None, **kw) -> "Faults":
        names: set[str] = set()
        for part in [spec] if isinstance(spec, str) or spec is None else spec:
            for name in (part or "").split(","):
                name = name.strip()
                if name and name != "healthy":
                    if name not in FAULTS:
                        raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
                    names.add(name)
        return cls(active=names, **kw)


@dataclass
class State:
    faults: Faults
    accept_length: float = 3.4
    token_delay: float = 0.001
    api_key: str | None = None
    in_flight: int = 0
    requests: int = 0
    generated: int = 0


def _error(message: str, status: int, kind: str = "BadRequestError") -> JSONResponse:
    return JSONResponse({"object": "error", "message": message, "type": kind, "param": None,
                         "code": status}, status_code=status)


def create_app(faults: Faults | None = None, *, accept_length: float = 3.4,
               token_delay: float = 0.001, api_key: str | None = None) -> Starlette:
    sg = load()
    P = sg.protocol
    state = State(faults or Faults(), accept_length, token_delay, api_key)
    F = state.faults

    async def hang_if_asked() -> None:
        if "hang" in F:
            await asyncio.sleep(3600)

    def authorised(request: Request) -> bool:
        if not state.api_key:
            return True
        return request.headers.get("authorization") == f"Bearer {state.api_key}"

    async def health(request: Request) -> Response:
        await hang_if_asked()
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        await hang_if_asked()
        if not authorised(request):
            return _error("Unauthorized", 401, "AuthenticationError")
        cards = [P.ModelCard(id=MODEL_ID, root=MODEL_ID, max_model_len=1048576).model_dump()]
        return JSONResponse({"object": "list", "data": cards})

    def server_info_body() -> dict:
        spec_on = "no-spec" not in F
        internal: dict = {"last_gen_throughput": 123.4, "memory_usage": {"weight": 71.2}}
        if spec_on and state.generated > 0:
            internal["avg_spec_accept_length"] = 1.1 if "low-accept" in F else state.accept_length
        return {
            "model_path": MODEL_ID, "served_model_name": MODEL_ID, "tp_size": 4,
            "speculative_algorithm": "DSPARK" if spec_on else None,
            "speculative_num_draft_tokens": 5 if spec_on else None,
            "reasoning_parser": None if "no-reasoning-parser" in F else "deepseek-v4",
            "tool_call_parser": None if "no-tool-parser" in F else "deepseekv4",
            "internal_states": [internal], "version": sg.version,
        }

    async def server_info(request: Request) -> Response:
        await hang_if_asked()
        if "router-info" in F:
            return _error("Not Found", 404, "NotFoundError")
        return JSONResponse(server_info_body())

    async def get_server_info(request: Request) -> Response:
        await hang_if_asked()
        if "router-info" in F:  # what sglang-router answers: its own fields
            return JSONResponse({"router_manager": {"workers": 2}, "workers_count": 2})
        return JSONResponse(server_info_body())

    async def metrics(request: Request) -> Response:
        await hang_if_asked()
        if "router-info" in F:
            return PlainTextResponse("Not Found", status_code=404)
        value = 0.0
        if "no-spec" not in F and state.generated > 0:
            value = 1.1 if "low-accept" in F else state.accept_length
        label = f'model_name="{MODEL_ID}",engine_type="unified"'
        text = (
            "# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding.\n"
            "# TYPE sglang:spec_accept_length gauge\n"
            f"sglang:spec_accept_length{{{label}}} {value}\n"
            "# HELP sglang:num_running_reqs The number of running requests.\n"
            "# TYPE sglang:num_running_reqs gauge\n"
            f"sglang:num_running_reqs{{{label}}} {float(state.in_flight)}\n"
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def chat(request: Request) -> Response:
        await hang_if_asked()
        if not authorised(request):
            return _error("Unauthorized", 401, "AuthenticationError")
        state.requests += 1
        number = state.requests  # this request's; state.requests moves on at every await
        if F.die_after and state.requests > F.die_after:
            os._exit(3)  # the server dies mid-run
        if "http-500" in F:
            return _error("Internal server error", 500, "InternalServerError")
        try:
            body = await request.json()
            req = P.ChatCompletionRequest(**body)
        except (ValidationError, ValueError) as exc:
            return _error(str(exc)[:500], 400)
        if req.tools and isinstance(req.tool_choice, P.ToolChoice):
            names = {t.function.name for t in req.tools}
            if req.tool_choice.function.name not in names:
                return _error(f"Tool '{req.tool_choice.function.name}' not found in tools", 400)
        thinking = bool((req.chat_template_kwargs or {}).get("thinking") is True)
        plain = {
            "messages": [m if isinstance(m, dict) else m.model_dump() for m in body["messages"]],
            "tools": [t.model_dump() for t in req.tools or []],
            "tool_choice": req.tool_choice.model_dump() if isinstance(req.tool_choice, P.ToolChoice)
            else req.tool_choice,
        }
        seed = model.seed_of(plain) + state.requests
        gen = model.generate(plain, thinking=thinking)
        state.in_flight += 1
        try:
            if ({"loop", "salad"} & F.active and state.in_flight >= F.min_concurrency
                    and state.requests % F.every == 0):
                gen = model.corrupt(gen, "loop" if "loop" in F else "salad", seed)
            if corruption.FAULTS.keys() & F.active:
                gen = corruption.apply(gen, F.active, seed=seed,
                                       loaded=state.in_flight >= F.min_concurrency,
                                       nth=number % F.every == 0)
            if "think-leak" in F:
                gen = model.leak_think(gen)
            tokens = model.tokenize(gen.raw(broken_json="bad-tool-json" in F), seed)
            limit = body.get("max_completion_tokens") or body.get("max_tokens")
            finish = "stop"
            if limit is not None and len(tokens) > limit:
                tokens, finish = tokens[:limit], "length"
            prompt_tokens = sum(len(model.tokenize(model.message_text(m)))
                                for m in plain["messages"])
            ctx = _Ctx(req, thinking, tokens, finish, prompt_tokens, seed)
            if req.stream:
                stream = _stream(ctx)
                return StreamingResponse(_counted(stream), media_type="text/event-stream")
            return _complete(ctx)
        finally:
            if not req.stream:
                state.in_flight -= 1
                state.generated += 1

    async def _counted(stream):
        try:
            async for piece in stream:
                yield piece
        finally:
            state.in_flight -= 1
            state.generated += 1

    @dataclass
    class _Ctx:
        req: object
        thinking: bool
        tokens: list[str]
        finish: str
        prompt_tokens: int
        seed: int
        rid: str = field(default_factory=lambda: uuid.uuid4().hex)

    def reasoning_parser(ctx: _Ctx, stream: bool):
        if "no-reasoning-parser" in F or not ctx.req.separate_reasoning:
            return None
        return sg.ReasoningParser("deepseek-v4",
                                  stream_reasoning=ctx.req.stream_reasoning if stream else False,
                                  force_reasoning=ctx.thinking, request=ctx.req)

    def tool_parser(ctx: _Ctx):
        req = ctx.req
        if "no-tool-parser" in F or not req.tools or req.tool_choice == "none":
            return None
        return sg.FunctionCallParser(req.tools, "deepseekv4")

    def usage(ctx: _Ctx):
        return P.UsageInfo(prompt_tokens=ctx.prompt_tokens, completion_tokens=len(ctx.tokens),
                           total_tokens=ctx.prompt_tokens + len(ctx.tokens))

    def _complete(ctx: _Ctx) -> Response:
        text = "".join(ctx.tokens)
        reasoning = None
        rp = reasoning_parser(ctx, stream=False)
        if rp is not None:
            reasoning, text = rp.parse_non_stream(text)
        finish = ctx.finish
        tool_calls = None
        fcp = tool_parser(ctx)
        if fcp is not None and fcp.has_tool_call(text):
            text, items = fcp.parse_non_stream(text)
            if items:
                tool_calls = [
                    P.ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", index=item.tool_index,
                               function=P.FunctionResponse(name=item.name, arguments=item.parameters))
                    for item in items
                ]
                if finish == "stop" and "wrong-finish-reason" not in F:
                    finish = "tool_calls"
        response = P.ChatCompletionResponse(
            id=ctx.rid, created=int(time.time()), model=ctx.req.model,
            choices=[P.ChatCompletionResponseChoice(
                index=0,
                message=P.ChatMessage(role="assistant", content=text or "", tool_calls=tool_calls,
                                      reasoning_content=reasoning or None),
                finish_reason=finish, matched_stop=None)],
            usage=usage(ctx),
        )
        data = response.model_dump(mode="json")
        if "no-usage" in F:
            data["usage"] = None
        return JSONResponse(data)

    def chunk(ctx: _Ctx, delta, finish_reason=None) -> str:
        body = P.ChatCompletionStreamResponse(
            id=ctx.rid, created=int(time.time()), model=ctx.req.model,
            choices=[P.ChatCompletionResponseStreamChoice(index=0, delta=delta,
                                                          finish_reason=finish_reason)])
        return f"data: {body.model_dump_json()}\n\n"

    def sse(ctx: _Ctx, **kw) -> str:
        return sg.build_sse_content(chunk_id=ctx.rid, created=int(time.time()),
                                    model=ctx.req.model, index=0, **kw)

    def unstreamed_args(fcp) -> str:
        """What sglang flushes at the end when the detector knows more arguments
        than it streamed (serving_chat's end-of-stream check)."""
        det = fcp.detector
        done = getattr(det, "prev_tool_call_arr", None)
        sent = getattr(det, "streamed_args_for_tool", None)
        if not done or not sent or len(done) > len(sent):
            return ""
        last = len(done) - 1
        expected = done[last].get("arguments", {})
        if not isinstance(expected, str):
            expected = json.dumps(expected, ensure_ascii=False)
        return expected[len(sent[last]):] if expected.startswith(sent[last]) else ""

    async def _stream(ctx: _Ctx):
        rng = random.Random(ctx.seed)
        rp = reasoning_parser(ctx, stream=True)
        fcp = tool_parser(ctx)
        include_usage = bool(ctx.req.stream_options and ctx.req.stream_options.include_usage)
        has_calls = False
        ids: dict[int, str] = {}
        truncated: set[int] = set()
        sent_chunks = 0
        yield sse(ctx, role="assistant", content="")
        sent_chunks = 1
        # Steps of 1-4 tokens: speculative decoding hands back several at once.
        steps, i = [], 0
        while i < len(ctx.tokens):
            n = rng.randint(1, 4)
            steps.append("".join(ctx.tokens[i:i + n]))
            i += n
        for number, delta in enumerate(steps):
            last = number == len(steps) - 1
            out: list[str] = []
            if rp is not None:
                reasoning_text, delta = rp.parse_stream_chunk(delta)
                if last:
                    end_r, end_n = rp.parse_stream_end()
                    reasoning_text = (reasoning_text or "") + (end_r or "")
                    delta = (delta or "") + (end_n or "")
                if reasoning_text:
                    out.append(sse(ctx, reasoning_content=reasoning_text))
            if fcp is not None:
                normal, calls = fcp.parse_stream_chunk(delta or "")
                if normal:
                    out.append(chunk(ctx, P.DeltaMessage(content=normal)))
                for item in calls:
                    has_calls = True
                    call_id = None
                    if item.name:
                        call_id = ids[item.tool_index] = f"call_{uuid.uuid4().hex[:24]}"
                    elif "tool-id-change" in F:
                        call_id = f"call_{uuid.uuid4().hex[:24]}"
                    if "truncated-tool-stream" in F and not item.name:
                        if item.tool_index in truncated:
                            continue
                        truncated.add(item.tool_index)
                    out.append(chunk(ctx, P.DeltaMessage(tool_calls=[P.ToolCall(
                        id=call_id, index=item.tool_index,
                        function=P.FunctionResponse(name=item.name, arguments=item.parameters))])))
                if last and "truncated-tool-stream" not in F:
                    rest = unstreamed_args(fcp)
                    if rest:
                        index = len(fcp.detector.prev_tool_call_arr) - 1
                        out.append(chunk(ctx, P.DeltaMessage(tool_calls=[P.ToolCall(
                            index=index, function=P.FunctionResponse(arguments=rest))])))
            elif delta:
                out.append(sse(ctx, content=delta))
            for piece in out:
                yield piece
                sent_chunks += 1
                if "stall" in F and sent_chunks == 2:
                    await asyncio.sleep(F.stall_seconds)
            if state.token_delay:
                await asyncio.sleep(state.token_delay)
        finish = ctx.finish
        if has_calls and finish == "stop" and "wrong-finish-reason" not in F:
            finish = "tool_calls"
        yield sse(ctx, finish_reason=finish)
        if include_usage and "no-usage" not in F:
            body = P.ChatCompletionStreamResponse(id=ctx.rid, created=int(time.time()),
                                                  model=ctx.req.model, choices=[], usage=usage(ctx))
            yield f"data: {body.model_dump_json()}\n\n"
        if "no-done" not in F:
            yield "data: [DONE]\n\n"

    async def completions(request: Request) -> Response:
        """Just enough of /v1/completions for `sm12x healthcheck` (one token)."""
        await hang_if_asked()
        if not authorised(request):
            return _error("Unauthorized", 401, "AuthenticationError")
        if "http-500" in F:
            return _error("Internal server error", 500, "InternalServerError")
        try:
            body = await request.json()
            max_tokens = int(body.get("max_tokens") or 16)
        except (ValueError, TypeError):
            return _error("invalid JSON body", 400)
        words = [" Paris", ".", " It", " is", " the", " capital", "."][:max(1, max_tokens)]
        state.generated += len(words)
        return JSONResponse({
            "id": uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()),
            "model": body.get("model") or MODEL_ID,
            "choices": [{"index": 0, "text": "".join(words), "logprobs": None,
                         "finish_reason": "length"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": len(words),
                      "total_tokens": 5 + len(words)},
        })

    routes = [
        Route("/health", health), Route("/health_generate", health),
        Route("/v1/models", models),
        Route("/server_info", server_info), Route("/get_server_info", get_server_info),
        Route("/metrics", metrics),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.fake = state
    return app
