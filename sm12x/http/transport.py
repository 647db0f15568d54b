"""Bounded HTTP: every request verify and bench make ends, in bounded memory,
whatever the server does.

httpx's own timeouts are per operation: a server that sends one byte a second
never trips a 20 s read timeout, and nothing caps what it sends. This httpx
transport adds, per request:

- a whole-request deadline (`Limits.timeout`, wall clock from sending the
  request to the last byte of the response, headers and slow trickles
  included), enforced with `asyncio.timeout_at` so it interrupts a read in
  progress instead of waiting for it;
- a stall limit (`Limits.stall`): no byte for that long ends the request;
- a cap on the response body (`Limits.max_body`, counted on the wire: responses
  are asked for, and read, without content encoding, so a gzip bomb cannot
  grow past it);
- fail fast (`FailFast`): once two requests of one kind (streamed, or not) in a
  row did not finish, later requests of that kind fail at once, saying so,
  instead of each waiting out its own limit.

`LineReader` splits an event stream into lines with a cap on one line and on
one event. Errors are httpx exceptions (so `except httpx.HTTPError` handlers
keep working) whose text says what happened in the user's terms.

The async transport is the implementation (the soak uses it directly); the
sync one runs it on an event loop in a private thread, so the openai SDK and
plain httpx.Client calls get the same bounds. Cancellation is structured
(`asyncio.timeout_at`, never nested `asyncio.wait_for`: on Python 3.11 an inner
wait_for can swallow the outer cancellation and a read loop never ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import httpx

from sm12x import bounded

MiB = 1024 * 1024
STREAMED, PLAIN = "streamed", "non-streamed"


@dataclass(frozen=True)
class Limits:
    timeout: float = 120.0  # one whole request, wall clock
    stall: float = 30.0  # no byte for this long
    connect: float = 5.0
    max_body: int = 8 * MiB  # one response body, as sent
    max_line: int = 1 * MiB  # one line of an event stream
    max_event: int = 1 * MiB  # one event of an event stream (its data lines together)
    fail_fast_after: int = 2  # unfinished requests of a kind in a row before the rest fail
    # The whole run's deadline (`verify --deadline`), a time.monotonic() value:
    # no request outlives it, however many each check sends.
    run_deadline: float | None = None

    def __post_init__(self) -> None:
        for name in ("timeout", "stall", "connect"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(
                    f"Limits.{name} must be a finite number of seconds above 0, not {value!r}"
                )

    def httpx_timeout(self) -> httpx.Timeout:
        # httpx's per-operation limits; the whole-request deadline is the transport's.
        return httpx.Timeout(self.stall, connect=self.connect)


# --- errors ------------------------------------------------------------------------


class Unfinished(httpx.TimeoutException):
    """The request did not finish: stalled, or past its whole-request deadline."""


class Stalled(Unfinished):
    pass


class DeadlineExceeded(Unfinished):
    pass


class RunDeadline(DeadlineExceeded):
    """The whole run's deadline (`--deadline`) passed: no more requests."""


class TooLarge(httpx.TransportError):
    """The server sent more than a cap allows (body, one line, one event)."""


class NotUtf8(httpx.DecodingError):
    pass


class KnownStuck(httpx.TransportError):
    """Not sent: earlier requests of this kind did not finish (FailFast)."""


def _mib(n: int) -> str:
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n} bytes"


# --- fail fast -----------------------------------------------------------------------


class FailFast:
    """Counts requests of each kind that did not finish, in a row. Once `after`
    have not, later requests of that kind are refused at once; one that
    finishes resets the count. Used from one event loop only."""

    def __init__(self, after: int = 2) -> None:
        self.after = after
        self.misses: dict[str, list[str]] = {}

    def refuse(self, kind: str) -> str | None:
        misses = self.misses.get(kind) or []
        if self.after and len(misses) >= self.after:
            return (
                f"not sent: the last {len(misses)} {kind} requests to this server did not "
                f"finish ({'; '.join(misses[-self.after :])}), so this one would wait as long"
            )
        return None

    def missed(self, kind: str, what: str) -> None:
        self.misses.setdefault(kind, []).append(what)

    def finished(self, kind: str) -> None:
        self.misses.pop(kind, None)


def request_kind(request: httpx.Request) -> str:
    """Streamed when the JSON body asks for `"stream": true` (OpenAI's protocol)."""
    if "json" not in request.headers.get("content-type", ""):
        return PLAIN
    try:
        body = json.loads(request.content)
    except (ValueError, UnicodeDecodeError):
        return PLAIN
    return STREAMED if isinstance(body, dict) and body.get("stream") is True else PLAIN


def _what(request: httpx.Request) -> str:
    return f"{request.method} {request.url.path}"


# --- the async transport -----------------------------------------------------------------


# How often a request that gets no byte says it is still waiting (`waiting`).
NOTE_EVERY_S = 10.0


@contextlib.asynccontextmanager
async def _noting(waiting: Callable[[str], None] | None, what: str, limits: Limits):
    """While the block waits for the server, call `waiting` every NOTE_EVERY_S
    seconds with one line saying how long and what limit ends it."""
    if waiting is None:
        yield
        return
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def note() -> None:
        while True:
            await asyncio.sleep(NOTE_EVERY_S)
            waiting(
                f"{what}: still waiting, no byte for {loop.time() - started:.0f} s "
                f"(it gives up at the {limits.stall:g} s stall limit)"
            )

    task = asyncio.create_task(note())
    try:
        yield
    finally:
        task.cancel()


def tls() -> ssl.SSLContext:
    """The verifying TLS context httpx makes for a client by default (the CA bundle
    of SSL_CERT_FILE, else SSL_CERT_DIR, else certifi's), made once per bundle.

    httpx makes a new one for every client, reading the whole bundle (about 25 ms
    of CPU on a loaded 2-core machine), and the waits of verify, qualify and the
    test suite make a client per poll. A context is safe to share between clients
    and threads; one made for a bundle path does not see that file change later."""
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = None if cafile else os.environ.get("SSL_CERT_DIR") or None
    return _tls(cafile, capath)


@functools.lru_cache(maxsize=4)
def _tls(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    if cafile is None and capath is None:
        import certifi  # httpx's own dependency

        cafile = certifi.where()
    return ssl.create_default_context(cafile=cafile, capath=capath)


class BoundedAsyncTransport(httpx.AsyncBaseTransport):
    def __init__(
        self,
        bounds: Limits,
        fail_fast: FailFast | None = None,
        inner: httpx.AsyncBaseTransport | None = None,
        waiting: Callable[[str], None] | None = None,
        **transport_options,
    ) -> None:
        self.limits = bounds
        self.fail_fast = fail_fast if fail_fast is not None else FailFast(bounds.fail_fast_after)
        if inner is None:
            transport_options.setdefault("verify", tls())
            inner = httpx.AsyncHTTPTransport(**transport_options)
        self._inner = inner
        # Called with a line while a request waits for its server (see _noting).
        self.waiting = waiting

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # The body is ours (small JSON): read it so it can be sent from any loop.
        if not isinstance(request.stream, httpx.ByteStream):
            if isinstance(request.stream, httpx.AsyncByteStream):
                await request.aread()
            else:
                request.read()
        kind = request_kind(request)
        refused = self.fail_fast.refuse(kind)
        if refused:
            raise KnownStuck(refused, request=request)
        request.headers["Accept-Encoding"] = "identity"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.timeout
        run_end = self.limits.run_deadline
        if run_end is not None:
            # asyncio's default loop clock is time.monotonic().
            if loop.time() >= run_end:
                raise RunDeadline(
                    f"{_what(request)}: not sent, the run's deadline (--deadline) has passed",
                    request=request,
                )
            deadline = min(deadline, run_end)
        try:
            async with (
                asyncio.timeout_at(deadline),
                _noting(self.waiting, _what(request), self.limits),
            ):
                response = await self._inner.handle_async_request(request)
        except TimeoutError:
            if run_end is not None and deadline == run_end:
                raise RunDeadline(
                    f"{_what(request)}: cut off by the run's deadline (--deadline)", request=request
                ) from None
            error: Unfinished = DeadlineExceeded(
                f"{_what(request)}: no answer within {self.limits.timeout:g} s (the "
                "whole-request limit)",
                request=request,
            )
            self.fail_fast.missed(kind, f"{_what(request)}: no answer in {self.limits.timeout:g} s")
            raise error from None
        except httpx.TimeoutException as exc:
            if isinstance(exc, httpx.ConnectTimeout):
                raise
            self.fail_fast.missed(kind, f"{_what(request)}: no byte for {self.limits.stall:g} s")
            raise Stalled(
                f"{_what(request)}: no byte from the server for {self.limits.stall:g} s "
                "(the stall limit)",
                request=request,
            ) from exc
        headers = [(k, v) for k, v in response.headers.raw if k.lower() != b"content-encoding"]
        return httpx.Response(
            response.status_code,
            headers=headers,
            stream=_BoundedBody(self, request, response, kind, deadline),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedBody(httpx.AsyncByteStream):
    def __init__(
        self,
        transport: BoundedAsyncTransport,
        request: httpx.Request,
        response: httpx.Response,
        kind: str,
        deadline: float,
    ) -> None:
        self.t, self.request, self.response = transport, request, response
        self.kind, self.deadline = kind, deadline

    async def __aiter__(self) -> AsyncIterator[bytes]:
        limits, loop = self.t.limits, asyncio.get_running_loop()
        what = _what(self.request)
        chunks = self.response.stream.__aiter__()  # type: ignore[union-attr]  # an async client's
        received = 0
        # JSON nested to exhaust the parser's recursion (a hostile server) is
        # cut off here, before any parser (openai's, httpx's .json()) sees it.
        kind = self.response.headers.get("content-type", "")
        gauge = bounded.DepthGauge() if "json" in kind or "event-stream" in kind else None
        while True:
            until = min(self.deadline, loop.time() + limits.stall)
            try:
                async with asyncio.timeout_at(until), _noting(self.t.waiting, what, limits):
                    chunk = await chunks.__anext__()
            except StopAsyncIteration:
                self.t.fail_fast.finished(self.kind)
                return
            except (TimeoutError, httpx.ReadTimeout):
                run_end = limits.run_deadline
                if run_end is not None and self.deadline == run_end and loop.time() >= run_end:
                    raise RunDeadline(
                        f"{what}: cut off by the run's deadline (--deadline; "
                        f"{received} bytes came)",
                        request=self.request,
                    ) from None
                if loop.time() >= self.deadline - 0.001:
                    self.t.fail_fast.missed(
                        self.kind, f"{what}: not finished in {limits.timeout:g} s"
                    )
                    raise DeadlineExceeded(
                        f"{what}: not finished within {limits.timeout:g} s (the whole-request "
                        f"limit; {received} bytes came)",
                        request=self.request,
                    ) from None
                self.t.fail_fast.missed(self.kind, f"{what}: no byte for {limits.stall:g} s")
                raise Stalled(
                    f"{what}: no byte from the server for {limits.stall:g} s (the "
                    f"stall limit; {received} bytes came before)",
                    request=self.request,
                ) from None
            received += len(chunk)
            if received > limits.max_body:
                raise TooLarge(
                    f"{what}: the response body is over {_mib(limits.max_body)} "
                    "(the cap on one response)",
                    request=self.request,
                )
            if gauge is not None:
                try:
                    gauge.feed(chunk)
                except bounded.TooBig as exc:
                    raise TooLarge(
                        f"{what}: the JSON in the response is {exc} (no reply of sglang's is)",
                        request=self.request,
                    ) from None
            yield chunk

    async def aclose(self) -> None:
        await self.response.aclose()


# --- the sync transport: the async one on a private loop ----------------------------------


class _Loop:
    """An event loop running in a daemon thread; call() runs a coroutine there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="bounded-http", daemon=True
        )
        self.thread.start()

    def call(self, coro):
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            # The coroutine bounds itself (timeout_at); no wait here can outlive it.
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C in the caller's thread: stop the request too
            raise

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


async def _next(chunks: AsyncIterator[bytes]) -> bytes | None:
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        return None


class _SyncBody(httpx.SyncByteStream):
    def __init__(self, loop: _Loop, body: httpx.AsyncByteStream) -> None:
        self.loop, self.body = loop, body
        self.chunks: AsyncIterator[bytes] | None = None

    def __iter__(self) -> Iterator[bytes]:
        self.chunks = self.body.__aiter__()
        while True:
            chunk = self.loop.call(_next(self.chunks))
            if chunk is None:
                return
            yield chunk

    def close(self) -> None:
        async def close() -> None:
            if self.chunks is not None:
                await self.chunks.aclose()  # type: ignore[attr-defined]
            await self.body.aclose()

        if not self.loop.loop.is_closed():
            self.loop.call(close())


class BoundedTransport(httpx.BaseTransport):
    """The bounded transport for sync clients (httpx.Client, the openai SDK)."""

    def __init__(
        self,
        bounds: Limits,
        fail_fast: FailFast | None = None,
        waiting: Callable[[str], None] | None = None,
        **transport_options,
    ) -> None:
        self.limits = bounds
        self._loop = _Loop()
        self._async = BoundedAsyncTransport(bounds, fail_fast, waiting=waiting, **transport_options)
        self.fail_fast = self._async.fail_fast
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()  # small JSON bodies: sendable from the loop thread as bytes
        response = self._loop.call(self._async.handle_async_request(request))
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_SyncBody(self._loop, response.stream),
            extensions=response.extensions,
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.call(self._async.aclose())
        finally:
            self._loop.close()


def client(bounds: Limits, fail_fast: FailFast | None = None, **client_options) -> httpx.Client:
    """An httpx.Client whose every request is bounded."""
    return httpx.Client(
        transport=BoundedTransport(bounds, fail_fast),
        timeout=bounds.httpx_timeout(),
        **client_options,
    )


# How long an idle pooled connection is reused. Under uvicorn's own keep-alive
# (5 s, which sglang's server and the stand-in serve through), not equal to it:
# at 5 s, httpx's default, a connection the server is closing that very moment
# is sent the next request and breaks with an empty ReadError. README's plain
# `sm12x verify` lost 3-4 of its 192 soak requests so against the stand-in on a
# loaded 2-core machine (4 runs of 4) and none at 1 s (3 of 3).
POOL_KEEPALIVE_S = 1.0


def pool(connections: int) -> httpx.Limits:
    """A pool of `connections` kept-alive connections, each dropped before the
    server would drop it."""
    return httpx.Limits(
        max_connections=connections,
        max_keepalive_connections=connections,
        keepalive_expiry=POOL_KEEPALIVE_S,
    )


def async_client(
    bounds: Limits, fail_fast: FailFast | None = None, **client_options
) -> httpx.AsyncClient:
    """An httpx.AsyncClient whose every request is bounded (client_options may
    carry httpx's connection-pool `limits`)."""
    pool = client_options.pop("limits", None)
    options = {"limits": pool} if pool is not None else {}
    return httpx.AsyncClient(
        transport=BoundedAsyncTransport(bounds, fail_fast, **options),
        timeout=bounds.httpx_timeout(),
        **client_options,
    )


# --- event streams ------------------------------------------------------------------------


class LineReader:
    """Bytes in, decoded lines out, with a cap on one line and on one event
    (the data lines between two blank lines). Lines are strict UTF-8."""

    def __init__(self, limits: Limits, what: str = "the event stream") -> None:
        self.limits, self.what = limits, what
        self.pending = bytearray()
        self.event_bytes = 0

    def feed(self, chunk: bytes) -> list[str]:
        self.pending += chunk
        *whole, rest = self.pending.split(b"\n")
        if len(rest) > self.limits.max_line:
            raise TooLarge(
                f"{self.what}: a line over {_mib(self.limits.max_line)} without a "
                "newline (the cap on one line)"
            )
        self.pending = bytearray(rest)
        return [self._line(raw) for raw in whole]

    def end(self) -> list[str]:
        """The unterminated last line, if any (an event cut short)."""
        rest, self.pending = bytes(self.pending), bytearray()
        return [self._line(rest)] if rest.strip() else []

    def _line(self, raw: bytes | bytearray) -> str:
        raw = raw.rstrip(b"\r")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NotUtf8(
                f"{self.what}: bytes that are not UTF-8 ({exc.reason} at byte "
                f"{exc.start} of a line)"
            ) from None
        if not line.strip():
            self.event_bytes = 0
        else:
            self.event_bytes += len(raw)
            if self.event_bytes > self.limits.max_event:
                raise TooLarge(
                    f"{self.what}: one event over {_mib(self.limits.max_event)} (data "
                    "lines without the blank line that ends an event)"
                )
        return line


def iter_lines(response: httpx.Response, limits: Limits) -> Iterator[str]:
    reader = LineReader(limits)
    for chunk in response.iter_raw():
        yield from reader.feed(chunk)
    yield from reader.end()


async def aiter_lines(response: httpx.Response, limits: Limits) -> AsyncIterator[str]:
    reader = LineReader(limits)
    async for chunk in response.aiter_raw():
        for line in reader.feed(chunk):
            yield line
    for line in reader.end():
        yield line


# --- reading a whole body, for callers that want (status, bytes) --------------------------


def auth_hint(status: int, had_key: bool) -> str | None:
    """What a 401/403 means here, naming the setting to change."""
    if status not in (401, 403):
        return None
    if had_key:
        return (
            f"HTTP {status}: the server refused the API key given (authentication): check "
            "SM12X_API_KEY / --api-key against the server's --api-key"
        )
    return (
        f"HTTP {status}: the server wants an API key (authentication): set SM12X_API_KEY "
        "or pass --api-key"
    )
