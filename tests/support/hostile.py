"""Hostile HTTP servers on loopback: one small real server per behaviour.

Each speaks just enough HTTP/1.1 (asyncio streams, every response
`Connection: close`) to be a plausible OpenAI-compatible endpoint (GET /health,
GET /v1/models, POST /v1/chat/completions streamed and not) and misbehaves on
the paths its *target* names:

    all     every request
    chat    non-streamed chat completions
    stream  streamed chat completions
    gen     both kinds of chat completion
    bench   every request but GET /v1/models (bench's own calls after the first)

Behaviours (BEHAVIOURS): never answers, one byte a second, an endless body,
a 2 GiB body (generated as it is sent, never held), an endless event stream,
an event line that never ends, invalid JSON, invalid UTF-8, a `{}` reply, a
connection reset mid-response, and 401.

    server = HostileServer("endless-body", target="chat").start()
    ... server.url ...
    server.stop()

`python -m tests.support.hostile BEHAVIOUR [--target T] [--port P]` runs one
in the foreground.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import threading
import time

MODEL = "hostile-model"
TARGETS = ("all", "chat", "stream", "gen", "bench")
GIB = 1024**3


def _completion() -> dict:
    return {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "OK"}}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    event = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _good_stream() -> list[bytes]:
    usage = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
    return [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "OK"}),
        _chunk({}, "stop"),
        b"data: " + json.dumps(usage).encode() + b"\n\n",
        b"data: [DONE]\n\n",
    ]


class Request:
    def __init__(self, method: str, path: str, headers: dict, body: bytes) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    @property
    def chat(self) -> bool:
        return self.method == "POST" and self.path.rstrip("/").endswith("/chat/completions")

    @property
    def streamed(self) -> bool:
        return self.chat and isinstance(self.json, dict) and self.json.get("stream") is True


def _head(status: int, content_type: str, length: int | None = None, reason: str = "OK") -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {content_type}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _whole(
    status: int, body: bytes, content_type: str = "application/json", reason: str = "OK"
) -> bytes:
    return _head(status, content_type, len(body), reason) + body


class HostileServer:
    def __init__(
        self, behaviour: str, target: str = "all", host: str = "127.0.0.1", port: int = 0
    ) -> None:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r}; known: {', '.join(BEHAVIOURS)}")
        if target not in TARGETS:
            raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
        self.behaviour, self.target, self.host, self.port = behaviour, target, host, port
        self.requests: list[tuple[str, str]] = []
        self.sent = 0  # body bytes written by the hostile behaviours
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- lifecycle ----------------------------------------------------------------

    def start(self) -> HostileServer:
        self._thread = threading.Thread(
            target=self._run, name=f"hostile-{self.behaviour}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the hostile server did not start")
        return self

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
        server.close()
        for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
            task.cancel()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- one connection -------------------------------------------------------------

    async def _read(self, reader: asyncio.StreamReader) -> Request | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
        headers = {}
        for line in lines[1:]:
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        body = await reader.readexactly(length) if length else b""
        return Request(method, path.split("?")[0], headers, body)

    def _hostile_here(self, request: Request) -> bool:
        return {
            "all": True,
            "chat": request.chat and not request.streamed,
            "stream": request.streamed,
            "gen": request.chat,
            "bench": not (request.method == "GET" and request.path == "/v1/models"),
        }[self.target]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await self._read(reader)
            if request is None:
                return
            self.requests.append((request.method, request.path))
            if self._hostile_here(request):
                await BEHAVIOURS[self.behaviour](self, request, reader, writer)
            else:
                await self._normal(request, writer)
        except (ConnectionError, asyncio.CancelledError, OSError):
            pass
        finally:
            if not writer.transport.is_closing():
                writer.close()

    async def _normal(self, request: Request, writer: asyncio.StreamWriter) -> None:
        if request.method == "GET" and request.path == "/health":
            writer.write(_whole(200, b"", "text/plain"))
        elif request.method == "GET" and request.path == "/v1/models":
            writer.write(
                _whole(
                    200,
                    json.dumps(
                        {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
                    ).encode(),
                )
            )
        elif request.streamed:
            writer.write(_head(200, "text/event-stream"))
            for event in _good_stream():
                writer.write(event)
        elif request.chat:
            writer.write(_whole(200, json.dumps(_completion()).encode()))
        else:
            writer.write(_whole(404, b'{"detail": "Not Found"}', reason="Not Found"))
        await writer.drain()

    async def pour(
        self, writer: asyncio.StreamWriter, chunk: bytes, limit: int | None = None
    ) -> None:
        """Write chunk after chunk, as fast as the client reads, until limit bytes."""
        sent = 0
        while limit is None or sent < limit:
            piece = chunk if limit is None else chunk[: limit - sent]
            writer.write(piece)
            sent += len(piece)
            self.sent += len(piece)
            await writer.drain()


# --- the behaviours --------------------------------------------------------------------


async def never_answers(server, request, reader, writer) -> None:
    await reader.read()  # hold the connection until the client gives up


async def one_byte_per_second(server, request, reader, writer) -> None:
    body = (
        (b"data: " + json.dumps(_completion()).encode() + b"\n\n")
        if request.streamed
        else json.dumps(_completion()).encode()
    )
    reply = _whole(200, body, "text/event-stream" if request.streamed else "application/json")
    for i in range(len(reply)):
        writer.write(reply[i : i + 1])
        await writer.drain()
        await asyncio.sleep(1.0)


_OPEN = b'{"id": "chatcmpl-hostile", "filler": "'  # a JSON string that never closes


async def endless_body(server, request, reader, writer) -> None:
    writer.write(_head(200, "application/json") + _OPEN)
    await server.pour(writer, b"x" * 65536)


async def two_gib_body(server, request, reader, writer) -> None:
    # Sent as it is generated: the server never holds more than one chunk.
    writer.write(_head(200, "application/json", 2 * GIB) + _OPEN)
    await server.pour(writer, b"x" * 65536, limit=2 * GIB - len(_OPEN))


async def endless_events(server, request, reader, writer) -> None:
    if not request.streamed:
        return await server._normal(request, writer)
    writer.write(_head(200, "text/event-stream") + _chunk({"role": "assistant", "content": ""}))
    await server.pour(writer, _chunk({"content": "la "}) * 200)


async def line_without_newline(server, request, reader, writer) -> None:
    if request.streamed:
        writer.write(_head(200, "text/event-stream") + b'data: {"id": "chatcmpl-hostile", "x": "')
    else:
        writer.write(_head(200, "application/json") + b'{"id": "chatcmpl-hostile", "x": "')
    await server.pour(writer, b"y" * 65536)


async def invalid_json(server, request, reader, writer) -> None:
    if request.streamed:
        writer.write(
            _head(200, "text/event-stream") + b'data: {"id": "chatcmpl-hostile", '
            b'"choices": [{\n\n' + b"data: [DONE]\n\n"
        )
    else:
        writer.write(_whole(200, b'{"id": "chatcmpl-hostile", "choices": [{"message": '))
    await writer.drain()


async def invalid_utf8(server, request, reader, writer) -> None:
    bad = b"\xff\xfe\xc3\x28"
    if request.streamed:
        event = _chunk({"role": "assistant", "content": "OK"}).replace(b"OK", bad)
        writer.write(_head(200, "text/event-stream") + event + b"data: [DONE]\n\n")
    elif request.chat or request.path == "/v1/models":
        writer.write(_whole(200, json.dumps(_completion()).encode().replace(b"OK", bad)))
    else:
        writer.write(_whole(200, bad, "text/plain"))
    await writer.drain()


async def empty_object(server, request, reader, writer) -> None:
    if request.streamed:
        writer.write(_head(200, "text/event-stream") + b"data: {}\n\n" * 3 + b"data: [DONE]\n\n")
    else:
        writer.write(_whole(200, b"{}"))
    await writer.drain()


async def reset_mid_response(server, request, reader, writer) -> None:
    if request.streamed:
        writer.write(_head(200, "text/event-stream") + b"".join(_good_stream()[:2]))
    else:
        body = json.dumps(_completion()).encode()
        writer.write(_head(200, "application/json", len(body)) + body[: len(body) // 2])
    await writer.drain()
    await asyncio.sleep(0.05)
    sock = writer.get_extra_info("socket")
    if sock is not None:  # linger 0: close() sends RST, not FIN
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def unauthorized(server, request, reader, writer) -> None:
    writer.write(
        _whole(
            401,
            b'{"error": {"message": "Invalid API key", "type": "authentication_error"}}',
            reason="Unauthorized",
        )
    )
    await writer.drain()


BEHAVIOURS = {
    "never-answers": never_answers,
    "one-byte-per-second": one_byte_per_second,
    "endless-body": endless_body,
    "2gib-body": two_gib_body,
    "endless-events": endless_events,
    "line-without-newline": line_without_newline,
    "invalid-json": invalid_json,
    "invalid-utf8": invalid_utf8,
    "empty-object": empty_object,
    "reset-mid-response": reset_mid_response,
    "unauthorized": unauthorized,
}


def main() -> None:
    parser = argparse.ArgumentParser(description="Run one hostile server in the foreground.")
    parser.add_argument("behaviour", choices=sorted(BEHAVIOURS))
    parser.add_argument("--target", choices=TARGETS, default="all")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = HostileServer(args.behaviour, args.target, port=args.port).start()
    print(server.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
