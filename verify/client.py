"""Talking to the endpoint: the openai client for typed requests, httpx for the
raw event stream, every request bounded in time.

Two limits bound every request: `stall_timeout` (no byte for that long: the
socket read times out) and `timeout` (the whole request, checked between
reads). So a request ends after at most timeout + stall_timeout whatever the
server does: never answers, stalls mid-stream or trickles forever.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import httpx
import openai

from verify.result import CheckFailure

DEFAULT_BASE_URL = "http://127.0.0.1:30000"


@dataclass(frozen=True)
class Endpoint:
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = None
    timeout: float = 120.0        # one whole request
    stall_timeout: float = 30.0   # no byte for this long
    connect_timeout: float = 5.0

    @staticmethod
    def api_key_from_env() -> str | None:
        return os.environ.get("SM12X_API_KEY") or os.environ.get("OPENAI_API_KEY")

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def httpx_timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, connect=self.connect_timeout, read=self.stall_timeout)

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=self.headers,
                            timeout=self.httpx_timeout())

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url.rstrip("/") + "/v1",
                             api_key=self.api_key or "EMPTY", timeout=self.httpx_timeout(),
                             max_retries=0)


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
    """An error from httpx/openai as a failure that names the cause."""
    if isinstance(exc, CheckFailure):
        return exc
    if isinstance(exc, openai.APIStatusError):
        return _status_failure(exc.status_code, _body_text(exc), what)
    if isinstance(exc, httpx.HTTPStatusError):
        return _status_failure(exc.response.status_code, exc.response.text[:300], what)
    inner = exc.__cause__ if isinstance(exc, openai.APIConnectionError) and exc.__cause__ else exc
    if isinstance(exc, openai.APITimeoutError) or isinstance(inner, httpx.TimeoutException):
        if isinstance(inner, httpx.ConnectTimeout):
            return CheckFailure(f"{what}: connecting timed out",
                                "nothing answers at that address (host down, firewall, wrong port)",
                                "check --base-url and that the server is up")
        return CheckFailure(
            f"{what}: no byte from the server for the stall limit ({type(inner).__name__})",
            "the server accepted the request and then stopped sending: a stalled or hung "
            "generation (a wedged scheduler, NCCL hang, or a dead worker behind a router)",
            "check the server log and GPU state (nvidia-smi); restart the server if it is wedged",
        )
    if isinstance(inner, (httpx.ConnectError, ConnectionRefusedError)) or isinstance(
            exc, openai.APIConnectionError):
        return CheckFailure(f"{what}: cannot connect ({inner})",
                            "the server is not running or not listening there (it may have died "
                            "mid-run)",
                            "check --base-url, the server process/container and its log")
    if isinstance(inner, (httpx.RemoteProtocolError, httpx.ReadError)):
        return CheckFailure(f"{what}: the connection broke mid-response ({inner})",
                            "the server closed the connection early: a crash or a killed worker",
                            "check the server log for a traceback or an OOM kill")
    return CheckFailure(f"{what}: {type(exc).__name__}: {exc}")


def _body_text(exc: openai.APIStatusError) -> str:
    try:
        return json.dumps(exc.body)[:300] if exc.body is not None else str(exc)[:300]
    except (TypeError, ValueError):
        return str(exc)[:300]


def _status_failure(status: int, body: str, what: str) -> CheckFailure:
    if status in (401, 403):
        return CheckFailure(f"{what}: HTTP {status} {body}", "the server wants an API key",
                            "set SM12X_API_KEY (or OPENAI_API_KEY), or pass --api-key")
    if status == 404:
        return CheckFailure(f"{what}: HTTP 404 {body}",
                            "not an OpenAI-compatible endpoint at that URL (wrong port or path)",
                            "point --base-url at the server root, e.g. http://HOST:30000")
    if status >= 500:
        return CheckFailure(f"{what}: HTTP {status} {body}",
                            "the server failed while generating (an exception in sglang or a "
                            "dead scheduler)",
                            "read the server log around this request for the traceback")
    return CheckFailure(f"{what}: HTTP {status} {body}",
                        "the server rejected a standard request: an older sglang, or a parser "
                        "flag it does not know",
                        "check the sglang version and the launch flags against the recipe")


@dataclass
class RawStream:
    """A chat stream read line by line, as the bytes arrived."""

    status: int = 0
    lines: list[str] = field(default_factory=list)      # every non-empty line
    events: list[dict] = field(default_factory=list)    # parsed `data:` JSON payloads
    done: bool = False                                   # saw `data: [DONE]`
    after_done: list[str] = field(default_factory=list)  # lines after [DONE]
    bad_lines: list[str] = field(default_factory=list)   # neither data: nor SSE comment/field
    start: float = 0.0
    times: list[float] = field(default_factory=list)     # arrival time of each event

    @property
    def ttft(self) -> float | None:
        for event, at in zip(self.events, self.times):
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content") or delta.get("reasoning_content") or \
                        delta.get("reasoning") or delta.get("tool_calls"):
                    return at - self.start
        return None


_SSE_FIELDS = ("event:", "id:", "retry:", ":")


def read_stream(client: httpx.Client, payload: dict, deadline: Deadline,
                path: str = "/v1/chat/completions") -> RawStream:
    """POST a streamed chat request and read the raw server-sent events."""
    out = RawStream(start=time.monotonic())
    with client.stream("POST", path, json=payload) as response:
        out.status = response.status_code
        if response.status_code != 200:
            response.read()
            response.raise_for_status()
        for line in response.iter_lines():
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
            elif not line.startswith(_SSE_FIELDS):
                out.bad_lines.append(line)
    return out
