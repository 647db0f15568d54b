"""A test's own HTTP server on 127.0.0.1 that leaves nothing running behind it.

`http.server.ThreadingHTTPServer` makes its handler threads daemons, and
`server_close()` joins only non-daemon ones: a handler still sleeping when its
test ends wakes during a later test, finds the client gone and has socketserver
print a BrokenPipe traceback on whatever stderr is current then. With the CLI
run in process (tests/support/cli.py), that is the next command's captured
stderr, and a test asserting "no traceback" failed for a server two modules
away (seen in a fresh-clone .ci/run). Here `close()` waits for every handler,
within a bound, and a client hanging up is not an error worth a traceback: the
tests that use these servers hang up on purpose (deadlines, hostile answers).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# A handler's longest sleep in these tests is a few seconds; past this a handler
# is stuck, and the test says so instead of hanging the worker.
JOIN_S = 30.0


class LocalServer(ThreadingHTTPServer):
    daemon_threads = True  # never holds the interpreter at exit; close() joins them

    def __init__(self, handler: Callable[..., BaseHTTPRequestHandler], port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), handler)
        self._handlers: list[threading.Thread] = []
        self._guard = threading.Lock()
        self._serving: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> LocalServer:
        self._serving = threading.Thread(target=self.serve_forever, daemon=True)
        self._serving.start()
        return self

    def process_request(self, request, client_address) -> None:
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), daemon=True
        )
        with self._guard:
            self._handlers = [t for t in self._handlers if t.is_alive()]
            self._handlers.append(thread)
        thread.start()

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return  # the client hung up (BrokenPipe, reset): the test meant it to
        super().handle_error(request, client_address)

    def close(self) -> None:
        """Stop serving, close the socket, and wait for every handler to finish."""
        if self._serving is not None:
            self.shutdown()
        self.server_close()
        with self._guard:
            handlers = list(self._handlers)
        for thread in handlers:
            thread.join(JOIN_S)
        stuck = [t.name for t in handlers if t.is_alive()]
        assert not stuck, f"handler threads still running {JOIN_S:.0f} s after close: {stuck}"

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
