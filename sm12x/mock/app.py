"""A stand-in for an sglang server running DeepSeek-V4-Flash-0731 with DSPARK.

The HTTP surface is sglang's (`/health`, `/v1/models`, `/v1/chat/completions`
streamed and not, `/server_info`, `/get_server_info`, `/metrics`, and a
one-token `/v1/completions` for `sm12x healthcheck` through a router).

Chat completions are served by sglang's own `OpenAIServingChat.handle_request`
(sm12x.mock.serving), from the image's sglang release patched by
scripts/apply-patches, or unpatched (`patched=False`, `--sglang-patches none`):
request validation, the DeepSeek-V4 prompt encoder, the `deepseek-v4`
reasoning parser, the `deepseekv4` tool-call detector, response and SSE
building are sglang's. Behind it, the engine (sm12x.mock.engine)
replays the scripted model's text (model.py), tokenized with DeepSeek-V4's
tokenizer, as DSPARK delivers it: decode steps of 1 to gamma+1 tokens, and,
while other requests are in flight, several steps merged into one chunk of up
to 16 tokens, through sglang's own incremental detokenizer.

Faults (sm12x.mock.faults) reproduce what verify must catch. Those of the
model change its text; those of the serving layer rewrite sglang's response.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import random
import time
import uuid
from dataclasses import dataclass

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from sm12x import bounded
from sm12x.mock import corruption, engine, fullrank, model, tokenizer_v4, tokenizer_v41
from sm12x.mock import serving as sglang_serving
from sm12x.mock.faults import Faults
from sm12x.mock.fullrank import Layout, Ranks
from sm12x.mock.metrics import Finished, Metrics
from sm12x.mock.sps import Scheduler, SpsConfig
from sm12x.recipe.lines import DEFAULT_LINE, LINES, serves
from sm12x.versions import load_versions, tracks

MODEL_ID = "deepseek-ai/DeepSeek-V4-Flash-0731"


@dataclass
class State:
    faults: Faults
    accept_length: float = 3.4
    token_delay: float = 0.001
    api_key: str | None = None
    in_flight: int = 0
    requests: int = 0
    generated: int = 0


class _CountResponses:
    """sglang's HTTP middleware (utils/common.py): every response by endpoint and status."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.response(scope["path"], scope["method"], message["status"])
            await send(message)

        await self.app(scope, receive, counted)


def _error(message: str, status: int, kind: str = "BadRequestError") -> JSONResponse:
    return JSONResponse(
        {"object": "error", "message": message, "type": kind, "param": None, "code": status},
        status_code=status,
    )


# DSPARK's draft depth behind the stand-in: a decode step accepts 1..GAMMA+1
# tokens; under load the tokenizer manager merges steps into chunks of up to
# MERGED_MAX tokens.
GAMMA = 4
MERGED_MAX = 16
CONTEXT_LENGTH = 1048576  # what /v1/models says (max_model_len)


def serving_version() -> str:
    """The sglang release the stand-in serves: the image's pin (versions.env),
    unless SM12X_STANDIN_SGLANG names another cached release."""
    return os.environ.get("SM12X_STANDIN_SGLANG") or load_versions()["SGLANG_VERSION"]


def deliveries(n: int, rng: random.Random, merge: bool) -> list[list[int]]:
    """DSPARK decode steps of n tokens, one per chunk, or merged when `merge`."""
    steps, left = [], n
    while left:
        k = min(left, rng.randint(1, GAMMA + 1))
        steps.append(k)
        left -= k
    if not merge:
        return [[k] for k in steps]
    out: list[list[int]] = []
    current: list[int] = []
    for k in steps:
        if current and sum(current) + k > rng.randint(GAMMA + 1, MERGED_MAX):
            out.append(current)
            current = []
        current.append(k)
    return out + [current] if current else out


def resolve_version(line: str = DEFAULT_LINE, sglang_version: str | None = None) -> str:
    """The sglang release that serves `line`: the one asked for, else the image's
    pin, else the track whose sglang serves the line (V4.1: current), as its
    recipes name it. ValueError when the release cannot serve the line."""
    known = LINES[line]
    version = sglang_version or serving_version()
    if sglang_version is None and not serves(known, version):
        version = next(
            (v for v in (load_versions(t)["SGLANG_VERSION"] for t in tracks()) if serves(known, v)),
            version,
        )
    if not serves(known, version):
        raise ValueError(
            f"sglang {version} cannot serve {known.title} "
            f"(needs >= {known.min_sglang}): pass --sglang-version"
        )
    return version


def served_recipe(line: str, version: str, tp: int, dp: int) -> str | None:
    """The shipped recipe the mock stands in for: its line, layout and sglang
    release (the first by name). /server_info says it (sm12x_recipe), so that
    `sm12x bench --url` against the mock needs no --recipe."""
    from sm12x.recipe import load_all
    from sm12x.recipe.tracks import track_refusal
    from sm12x.versions import track_of_sglang

    track = track_of_sglang(version)
    for recipe in sorted(load_all(), key=lambda r: r.name):
        fits = (
            recipe.model.line == line
            and recipe.hardware.nodes == 1
            and recipe.flag_value("--tp-size") == tp
            and (recipe.flag_value("--dp-size") or 1) == dp
            and track is not None
            and track_refusal(recipe, track) is None
        )
        if fits:
            return recipe.name
    return None


def create_app(
    faults: Faults | None = None,
    *,
    accept_length: float = 3.4,
    token_delay: float = 0.001,
    api_key: str | None = None,
    sglang_version: str | None = None,
    patched: bool = True,
    sps: SpsConfig | None = None,
    line: str = DEFAULT_LINE,
    sglang_source: str = "auto",
    layout: Layout | None = None,
) -> Starlette:
    """sps: the server's DSpark scheduler as sglang's SPS profiler sees it
    (sps.py; None: one DP rank, no per-step records, /server_info as before).
    `line`: the model line served (sm12x.recipe.lines). V4.1-Flash needs an sglang
    that serves it (0.5.23): its encoder, parsers and the vision tower's image input.
    `sglang_source`: where sglang's serving code comes from (serving.locate).
    `layout`: the DP ranks chat requests are placed on (fullrank.py; default the
    DSpark scheduler's, else one rank)."""
    state = State(faults or Faults(), accept_length, token_delay, api_key)
    scheduler = Scheduler(sps or SpsConfig(gamma=GAMMA, tp=4, dp=1, ep=1))
    if layout is None and sps is not None:
        layout = Layout(sps.dp, sps.max_running_per_dp * sps.dp, sps.cuda_graph_max_bs)
    ranks = Ranks(layout or Layout())
    F = state.faults
    known = LINES[line]
    version = resolve_version(line, sglang_version)
    site = sglang_serving.locate(version, patched, sglang_source)
    serving = sglang_serving.load(site)
    if sps is not None:
        scheduler.plan(site)  # the served wheel's planner lays out every step
    P = serving.protocol
    tokenizer = tokenizer_v4.load() if line == DEFAULT_LINE else tokenizer_v41.load()
    eos = tokenizer.eos_token_id
    # What the model writes past its EOS under ignore_eos (plain words, no markup).
    FILLER = tokenizer.encode(" and the river runs on past the stone.", add_special_tokens=False)  # noqa: N806
    MODEL_ID = engine.model_id(line)  # noqa: N806 (the module's name, per line)
    recipe_name = served_recipe(line, version, scheduler.config.tp, scheduler.config.dp)

    async def pace() -> None:
        if state.token_delay:
            await asyncio.sleep(state.token_delay)

    # sglang's metrics (metrics.py), per DP rank where the requests were placed;
    # the layout's max running requests (DSPARK's default, 256, unless the flags
    # say otherwise) caps the running gauge, the rest queue.
    exported = Metrics(
        MODEL_ID,
        dp=ranks.layout.dp,
        gamma=sps.gamma if sps is not None else GAMMA,
        max_running=ranks.layout.max_running_requests,
        spec="no-spec" not in F,
    )
    args = engine.ServerArgsView(
        reasoning_parser=None if "no-reasoning-parser" in F else known.reasoning_parser,
        tool_call_parser=None if "no-tool-parser" in F else known.tool_call_parser,
        speculative_algorithm=None if "no-spec" in F else "DSPARK",
    )
    # rid -> the request's plan, made when sglang hands the request to the
    # engine (after its own validation: an invalid request never reaches it)
    pending: dict[str, tuple] = {}
    chat_handler = engine.serving_chat(
        serving,
        tokenizer,
        lambda obj: plan_for(obj, *pending.pop(obj.rid)),
        server_args=args,
        on_delivery=pace,
        on_finished=lambda **done: exported.finished(Finished(**done)),
        line=line,
    )

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
        cards = [P.ModelCard(id=MODEL_ID, root=MODEL_ID, max_model_len=CONTEXT_LENGTH).model_dump()]
        return JSONResponse({"object": "list", "data": cards})

    def server_info_body() -> dict:
        spec_on = "no-spec" not in F
        internal: dict = {"last_gen_throughput": 123.4, "memory_usage": {"weight": 71.2}}
        if spec_on and state.generated > 0:
            internal["avg_spec_accept_length"] = 1.1 if "low-accept" in F else state.accept_length
        body = {
            "model_path": MODEL_ID,
            "served_model_name": MODEL_ID,
            "tp_size": 4,
            "speculative_algorithm": "DSPARK" if spec_on else None,
            "speculative_num_draft_tokens": GAMMA + 1 if spec_on else None,
            "reasoning_parser": args.reasoning_parser,
            "tool_call_parser": args.tool_call_parser,
            "internal_states": [internal],
            "version": serving.version,
            "sm12x_patches": patched,
            **ranks.layout.server_args(),
            # Not sglang's: says this is the stand-in (bench picks the OpenAI backend),
            # and where its tokenizer is, a folder on this machine.
            "sm12x_mock": True,
            "tokenizer_path": str(tokenizer_v4.folder()),
        }
        if recipe_name is not None:
            body["sm12x_recipe"] = recipe_name
        if sps is not None:
            body.update(
                scheduler.server_args(),
                tokenizer_path=str(tokenizer_v4.folder()),
                speculative_num_draft_tokens=sps.gamma + 1,
            )
            body["internal_states"] = [
                scheduler.internal_state(rank, internal) for rank in range(sps.dp)
            ]
        return body

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
        text = exported.render(
            in_flight=state.in_flight, accept_length=value, per_rank=list(ranks.running)
        )
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    def plan_for(obj, body: dict, req, seed: int, number: int) -> engine.Plan:
        """What the scripted model writes for this request, as DSPARK delivers it,
        ended as sglang's scheduler ends it (`obj`: the GenerateReqInput sglang's
        serving layer built, its sampling parameters resolved)."""
        plain = {
            "messages": body["messages"],
            "tools": [t.model_dump() for t in req.tools or []],
            "tool_choice": req.tool_choice.model_dump()
            if isinstance(req.tool_choice, P.ToolChoice)
            else req.tool_choice,
        }
        thinking = bool((req.chat_template_kwargs or {}).get("thinking") is True)
        gen = model.generate(plain, thinking=thinking, image_blind="image-blind" in F)
        if (
            {"loop", "salad"} & F.active
            and state.in_flight >= F.min_concurrency
            and number % F.every == 0
        ):
            gen = model.corrupt(gen, "loop" if "loop" in F else "salad", seed)
        if corruption.FAULTS.keys() & F.active:
            gen = corruption.apply(
                gen,
                F.active,
                seed=seed,
                loaded=state.in_flight >= F.min_concurrency,
                nth=number % F.every == 0,
            )
        if fullrank.FAULT in F and ranks.fills(req.rid):
            gen = fullrank.corrupt(gen, seed)
        if "think-leak" in F:
            gen = model.leak_think(gen)
        ids = tokenizer.encode(
            gen.raw(broken_json="bad-tool-json" in F, line=line), add_special_tokens=False
        ) + [eos]
        ids, finish = ended(ids, obj)
        rng = random.Random(seed)
        return engine.Plan(ids, deliveries(len(ids), rng, merge=state.in_flight > 1), finish)

    def ended(ids: list[int], obj) -> tuple[list[int], dict]:
        """The output as sglang's scheduler finishes it: at the model's EOS, or at
        max_new_tokens (its default: what the context leaves). Under `ignore_eos`
        the token-based finish is skipped (Req._check_token_based_finish), so the
        request lives exactly max_new_tokens tokens: the model writes on past
        its EOS (here, the filler after the script's EOS)."""
        sampling = obj.sampling_params or {}
        limit = sampling.get("max_new_tokens")
        if limit is None:
            prompt = (
                obj.input_ids if obj.input_ids is not None else tokenizer.encode(obj.text or "")
            )
            limit = max(0, CONTEXT_LENGTH - len(prompt) - 1)
        if sampling.get("ignore_eos"):
            ids = ids + FILLER * ((limit - len(ids)) // len(FILLER) + 1)
        if len(ids) > limit:
            return ids[:limit], {"type": "length", "length": limit}
        return ids, {"type": "stop", "matched": eos}

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
        except (ValidationError, ValueError, TypeError) as exc:
            return _error(str(exc)[:500], 400)
        state.in_flight += 1
        req.rid = uuid.uuid4().hex
        ranks.admit(req.rid)
        pending[req.rid] = (body, req, model.seed_of(body) + number, number)
        try:
            response = await chat_handler.handle_request(req, request)
        except BaseException:
            state.in_flight -= 1
            ranks.release(req.rid)
            raise
        finally:
            if not req.stream:
                pending.pop(req.rid, None)
        if isinstance(response, StreamingResponse):
            return StreamingResponse(
                _faulty_stream(response.body_iterator, req.rid), media_type="text/event-stream"
            )
        state.in_flight -= 1
        ranks.release(req.rid)
        if isinstance(response, Response):  # an error sglang answered
            return response
        state.generated += 1
        data = response.model_dump(mode="json")
        if "no-usage" in F:
            data["usage"] = None
        if "wrong-finish-reason" in F:
            for choice in data["choices"]:
                if choice["finish_reason"] == "tool_calls":
                    choice["finish_reason"] = "stop"
        return JSONResponse(data)

    def _rewrite(event: str, first_args: set) -> str | None:
        """A serving-layer fault applied to one SSE event of sglang's stream."""
        if not event.startswith("data: {"):
            return None if (event.startswith("data: [DONE]") and "no-done" in F) else event
        chunk = json.loads(event[len("data: ") :])
        if chunk.get("usage") and not chunk.get("choices") and "no-usage" in F:
            return None
        for choice in chunk.get("choices") or []:
            if choice.get("finish_reason") == "tool_calls" and "wrong-finish-reason" in F:
                choice["finish_reason"] = "stop"
            calls = (choice.get("delta") or {}).get("tool_calls") or []
            for call in calls:
                function = call.get("function") or {}
                if "tool-id-change" in F and not call.get("id"):
                    call["id"] = f"call_{uuid.uuid4().hex[:24]}"
                if "truncated-tool-stream" in F and not function.get("name"):
                    if call.get("index") in first_args:
                        function["arguments"] = ""
                    first_args.add(call.get("index"))
        return "data: " + json.dumps(chunk, ensure_ascii=False) + "\n\n"

    async def _faulty_stream(events, rid: str):
        sent, first_args = 0, set[int]()
        try:
            async for event in events:
                event = event if isinstance(event, str) else event.decode()
                event = _rewrite(event, first_args)
                if event is None:
                    continue
                yield event
                sent += 1
                if "stall" in F and sent == 2:
                    await asyncio.sleep(F.stall_seconds)
        finally:
            pending.pop(rid, None)
            state.in_flight -= 1
            ranks.release(rid)
            state.generated += 1

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
        words = [" Paris", ".", " It", " is", " the", " capital", "."][: max(1, max_tokens)]
        state.generated += len(words)
        return JSONResponse(
            {
                "id": uuid.uuid4().hex,
                "object": "text_completion",
                "created": int(time.time()),
                "model": body.get("model") or MODEL_ID,
                "choices": [
                    {
                        "index": 0,
                        "text": "".join(words),
                        "logprobs": None,
                        "finish_reason": "length",
                    }
                ],
                "usage": {
                    "prompt_tokens": 5,
                    "completion_tokens": len(words),
                    "total_tokens": 5 + len(words),
                },
            }
        )

    routes = [
        Route("/health", health),
        Route("/health_generate", health),
        Route("/v1/models", models),
        Route("/server_info", server_info),
        Route("/get_server_info", get_server_info),
        Route("/metrics", metrics),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/generate", scheduler.generate, methods=["POST"]),
        Route("/flush_cache", scheduler.flush_cache, methods=["GET", "POST"]),
        Route("/abort_request", scheduler.abort_request, methods=["POST"]),
        Route("/set_internal_state", scheduler.set_internal_state, methods=["POST", "PUT"]),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(_CountResponses, metrics=exported)
    app.state.mock = state
    app.state.scheduler = scheduler
    # sglang's own rule for which routes need the key (utils/auth.py).
    app.add_middleware(Guard, state=state, auth=importlib.import_module("sglang.srt.utils.auth"))
    app.state.ranks = ranks
    return app


# The largest request body the stand-in reads (verify's largest, a picture
# task, is under 2 MiB): a bigger one is answered 413 before it is read whole.
MAX_BODY = 16 * 1024 * 1024
# How long a request body may take to arrive whole: a client trickling a byte
# a second holds no connection past it (408).
BODY_TIMEOUT_S = 20.0


class Guard:
    """Every request, before any route: the key by sglang's own decision
    (decide_request_auth: every route but /health* and /metrics needs it when
    one is set), and the body read with a cap (413 past MAX_BODY), then handed
    on whole."""

    def __init__(self, app, *, state: State, auth) -> None:
        self.app, self.state, self.auth = app, state, auth

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        decision = self.auth.decide_request_auth(
            method=scope["method"],
            path=scope["path"],
            authorization_header=headers.get("authorization"),
            api_key=self.state.api_key,
            admin_api_key=None,
            auth_level=self.auth.AuthLevel.NORMAL,
        )
        if not decision.allowed:
            status = decision.error_status_code
            body = {"error": "Unauthorized" if status == 401 else "Forbidden"}
            await JSONResponse(body, status_code=status)(scope, receive, send)
            return
        too_big = JSONResponse({"error": f"request body over {MAX_BODY} bytes"}, status_code=413)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY:
            await too_big(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        break
                    size += len(message.get("body", b""))
                    if size > MAX_BODY:
                        await too_big(scope, receive, send)
                        return
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            slow = {"error": f"the request body took more than {BODY_TIMEOUT_S:g} s to arrive"}
            await JSONResponse(slow, status_code=408)(scope, receive, send)
            return
        data = b"".join(chunks)
        try:
            bounded.check_depth(data)
        except bounded.TooBig as exc:
            deep = {"error": f"request body: JSON {exc}"}
            await JSONResponse(deep, status_code=400)(scope, receive, send)
            return
        whole = {"type": "http.request", "body": data, "more_body": False}
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return whole
            return await receive()

        await self.app(scope, replay, send)
