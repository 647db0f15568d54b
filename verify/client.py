"""Talking to the endpoint: the openai client for typed requests, httpx for the
raw event stream, every request bounded (sm12x/http/transport.py).

Both go through one BoundedTransport per run, so every request has a
whole-request deadline (`timeout`, wall clock), a stall limit (`stall_timeout`,
no byte for that long) and a cap on what the server may send; and once two
streamed (or two non-streamed) requests in a row did not finish, later ones of
that kind fail at once instead of each waiting out its limits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import openai

from sm12x.http import redact
from sm12x.http.transport import (
    BoundedTransport,
    DeadlineExceeded,
    KnownStuck,
    Limits,
    NotUtf8,
    Stalled,
    TooLarge,
    iter_lines,
)
from verify.result import CheckFailure

DEFAULT_BASE_URL = "http://127.0.0.1:30000"
STALL_CAUSE = (
    "the server accepted the request and then stopped sending: a stalled or hung "
    "generation (a wedged scheduler, NCCL hang, or a dead worker behind a router)"
)
STALL_FIX = "check the server log and GPU state (nvidia-smi); restart the server if it is wedged"
REPLY_SHAPE_CAUSE = (
    "most likely the reply lacks what an OpenAI-compatible reply has (choices, "
    "message, usage) or carries a value of the wrong type (a `{}` reply): not "
    "sglang's API, or a proxy rewriting it (if the reply is sound, this is a "
    "verify bug: report it with report.json)"
)
REPLY_SHAPE_FIX = (
    "query the endpoint by hand (curl /v1/chat/completions) and compare with the "
    "OpenAI API; check --base-url"
)


@dataclass(frozen=True)
class Endpoint:
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 120.0  # one whole request
    stall_timeout: float = 30.0  # no byte for this long
    connect_timeout: float = 5.0
    run_deadline: float | None = None  # time.monotonic() when the whole run must end

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def limits(self) -> Limits:
        return Limits(
            timeout=self.timeout,
            stall=self.stall_timeout,
            connect=self.connect_timeout,
            run_deadline=self.run_deadline,
        )

    @property
    def display_url(self) -> str:
        """The URL without credentials, for reports and the terminal."""
        return redact.url(self.base_url)

    def httpx_timeout(self) -> httpx.Timeout:
        return self.limits.httpx_timeout()

    def transport(self, waiting: Callable[[str], None] | None = None) -> BoundedTransport:
        """waiting: called with a line every 10 s a request gets no byte."""
        return BoundedTransport(self.limits, waiting=waiting)

    def http(self, transport: BoundedTransport | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url,
            headers=self.headers,
            timeout=self.httpx_timeout(),
            transport=transport or self.transport(),
        )

    def openai(self, transport: BoundedTransport | None = None) -> openai.OpenAI:
        http = httpx.Client(timeout=self.httpx_timeout(), transport=transport or self.transport())
        return openai.OpenAI(
            base_url=self.base_url.rstrip("/") + "/v1",
            api_key=self.api_key or "EMPTY",
            # openai 3 types these against httpx2; it drives an httpx client the
            # same way (and the image's sglang pins openai 2, which is httpx's).
            timeout=self.httpx_timeout(),  # type: ignore[arg-type]
            max_retries=0,
            http_client=http,  # type: ignore[arg-type]
        )


class Deadline:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self.start = time.monotonic()

    def check(self, what: str) -> None:
        if time.monotonic() - self.start > self.seconds:
            raise CheckFailure(
                f"{what} still running after {self.seconds:.0f} s (the whole-request limit)",
                "the server keeps the request open without finishing it (a stuck "
                "generation, or output that never reaches a stop)",
                "look at the server log for this request; raise --timeout if the output is "
                "really that long",
            )


def explain(exc: BaseException, what: str = "request") -> CheckFailure:
    """An error from httpx/openai (or the bounded transport) as a failure that
    names the cause."""
    if isinstance(exc, CheckFailure):
        return exc
    if isinstance(exc, openai.APIStatusError):
        return _status_failure(exc.status_code, _body_text(exc), what)
    if isinstance(exc, httpx.HTTPStatusError):
        return _status_failure(exc.response.status_code, _response_text(exc.response), what)
    inner = exc
    while isinstance(inner, openai.OpenAIError) and inner.__cause__ is not None:
        inner = inner.__cause__
    if isinstance(inner, KnownStuck):
        return CheckFailure(
            _join(what, inner),
            STALL_CAUSE + "; earlier checks waited out its limits, so this one was not sent",
            STALL_FIX,
        )
    if isinstance(inner, DeadlineExceeded):
        return CheckFailure(
            _join(what, inner),
            "the server keeps the request open without finishing it (a stuck generation, "
            "output that never reaches a stop, or a server trickling bytes)",
            "look at the server log for this request; raise --timeout if the output is "
            "really that long",
        )
    if isinstance(inner, TooLarge):
        return CheckFailure(
            _join(what, inner),
            "the server sent far more than any answer to this request can be: "
            "a runaway stream that ignores max_tokens, or not an LLM server",
            "check --base-url points at sglang; read the server log",
        )
    if isinstance(inner, (NotUtf8, UnicodeDecodeError)):
        return CheckFailure(
            f"{what}: the reply is not UTF-8 text ({inner})",
            "OpenAI-compatible replies are UTF-8 JSON: a broken server or a "
            "proxy rewriting the bytes",
            "query the server directly (curl)",
        )
    if isinstance(inner, json.JSONDecodeError) or isinstance(
        exc, openai.APIResponseValidationError
    ):
        return CheckFailure(
            f"{what}: the reply is not valid JSON ({inner})",
            "the server (or a proxy) sent a cut or garbled body",
            "query the server directly (curl) and read its log",
        )
    if isinstance(exc, openai.APITimeoutError) or isinstance(inner, httpx.TimeoutException):
        if isinstance(inner, httpx.ConnectTimeout):
            return CheckFailure(
                f"{what}: connecting timed out",
                "nothing answers at that address (host down, firewall, wrong port)",
                "check --base-url and that the server is up",
            )
        detail = (
            str(inner)
            if isinstance(inner, Stalled)
            else f"no byte from the server for the stall limit ({type(inner).__name__})"
        )
        return CheckFailure(_join(what, detail), STALL_CAUSE, STALL_FIX)
    if (
        isinstance(inner, (httpx.ConnectError, ConnectionRefusedError))
        or isinstance(exc, openai.APIConnectionError)
        and not isinstance(inner, (httpx.RemoteProtocolError, httpx.ReadError))
    ):
        return CheckFailure(
            f"{what}: cannot connect ({str(inner) or type(inner).__name__})",
            "the server is not running or not listening there (it may have died mid-run)",
            "check --base-url, the server process/container and its log",
        )
    if isinstance(inner, (httpx.RemoteProtocolError, httpx.ReadError)):
        return CheckFailure(
            f"{what}: the connection broke mid-response ({str(inner) or type(inner).__name__})",
            "the server closed the connection early: a crash or a killed worker",
            "check the server log for a traceback or an OOM kill",
        )
    if isinstance(exc, (TypeError, AttributeError, KeyError, IndexError)):
        return CheckFailure(
            f"{what}: the reply cannot be read: {type(exc).__name__}: {exc}",
            REPLY_SHAPE_CAUSE,
            REPLY_SHAPE_FIX,
        )
    return CheckFailure(f"{what}: {type(exc).__name__}: {exc}")


def _join(what: str, detail: object) -> str:
    """ "what: detail", without saying what twice (transport errors name the request)."""
    text = str(detail)
    return text if text.startswith(what) else f"{what}: {text}"


def _response_text(response: httpx.Response) -> str:
    try:
        return response.text[:300]
    except (httpx.ResponseNotRead, httpx.StreamError):
        return ""


def _body_text(exc: openai.APIStatusError) -> str:
    try:
        return json.dumps(exc.body)[:300] if exc.body is not None else str(exc)[:300]
    except (TypeError, ValueError):
        return str(exc)[:300]


def _status_failure(status: int, body: str, what: str) -> CheckFailure:
    if status in (401, 403):
        return CheckFailure(
            f"{what}: HTTP {status} {body}",
            "authentication: the server wants an API key, or refused the one given",
            "set SM12X_API_KEY (in .env or the environment) or pass --api-key, "
            "with the server's key",
        )
    if status == 404:
        return CheckFailure(
            f"{what}: HTTP 404 {body}",
            "not an OpenAI-compatible endpoint at that URL (wrong port or path)",
            "point --base-url at the server root, e.g. http://HOST:30000",
        )
    if status >= 500:
        return CheckFailure(
            f"{what}: HTTP {status} {body}",
            "the server failed while generating (an exception in sglang or a dead scheduler)",
            "read the server log around this request for the traceback",
        )
    return CheckFailure(
        f"{what}: HTTP {status} {body}",
        "the server rejected a standard request: an older sglang, or a parser "
        "flag it does not know",
        "check the sglang version and the launch flags against the recipe",
    )


@dataclass
class RawStream:
    """A chat stream read line by line, as the bytes arrived."""

    status: int = 0
    lines: list[str] = field(default_factory=list)  # every non-empty line
    events: list[dict] = field(default_factory=list)  # parsed `data:` JSON payloads
    done: bool = False  # saw `data: [DONE]`
    after_done: list[str] = field(default_factory=list)  # lines after [DONE]
    bad_lines: list[str] = field(default_factory=list)  # neither data: nor SSE comment/field
    start: float = 0.0
    times: list[float] = field(default_factory=list)  # arrival time of each event

    @property
    def ttft(self) -> float | None:
        for event, at in zip(self.events, self.times):
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if (
                    delta.get("content")
                    or delta.get("reasoning_content")
                    or delta.get("reasoning")
                    or delta.get("tool_calls")
                ):
                    return at - self.start
        return None


_SSE_FIELDS = ("event:", "id:", "retry:", ":")


def max_events(payload: dict) -> int:
    """The most events a stream asked for max_tokens can honestly carry: one per
    token (DSPARK sends several tokens per event), plus role, finish and usage
    events; twice that and more is a runaway stream."""
    return 2 * int(payload.get("max_tokens") or 2048) + 64


def _too_many(count: int) -> CheckFailure:
    return CheckFailure(
        f"the stream sent over {count} events, more than max_tokens allows",
        "a runaway stream: the server ignores max_tokens or repeats events",
        "read the server log for this request; check the sglang version",
    )


def stream_chunks(client: openai.OpenAI, **body) -> list[dict]:
    """A streamed chat completion through the SDK, as dicts, with at most
    max_events(body) events (the transport bounds time and bytes)."""
    limit = max_events(body)
    chunks = []
    with client.chat.completions.create(**body, stream=True) as stream:
        for chunk in stream:
            chunks.append(chunk.model_dump())
            if len(chunks) > limit:
                raise _too_many(limit)
    return chunks


def read_stream(
    client: httpx.Client,
    payload: dict,
    deadline: Deadline | None = None,
    path: str = "/v1/chat/completions",
    limits: Limits | None = None,
) -> RawStream:
    """POST a streamed chat request and read the raw server-sent events: lines
    and events capped, bytes decoded as strict UTF-8 (the transport bounds time
    and the whole body)."""
    out = RawStream(start=time.monotonic())
    limit = max_events(payload)
    with client.stream("POST", path, json=payload) as response:
        out.status = response.status_code
        if response.status_code != 200:
            response.read()
            response.raise_for_status()
        for line in iter_lines(response, limits or Limits()):
            if deadline is not None:
                deadline.check("the stream")
            if not line.strip():
                continue
            out.lines.append(line)
            if out.done:
                out.after_done.append(line)
                continue
            if line.startswith("data:"):
                data = line[5:].strip()
                if data == "[DONE]":
                    out.done = True
                    continue
                try:
                    out.events.append(json.loads(data))
                    out.times.append(time.monotonic())
                except json.JSONDecodeError:
                    out.bad_lines.append(line)
                if len(out.events) > limit:
                    raise _too_many(limit)
            elif not line.startswith(_SSE_FIELDS):
                out.bad_lines.append(line)
    return out
