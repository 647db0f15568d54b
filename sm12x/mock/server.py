"""Run the mock sglang server in a background thread (tests, benchmarks); as a
process it is `sm12x mock-server` (sm12x.mock.command)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from sm12x.mock.app import Faults, create_app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MockServer:
    """A mock sglang on 127.0.0.1 in a background thread; a context manager.

    >>> with MockServer(faults="loop") as server:
    ...     server.base_url  # http://127.0.0.1:PORT
    """

    def __init__(
        self,
        faults: str | Faults | None = None,
        *,
        port: int = 0,
        accept_length: float = 3.4,
        token_delay: float = 0.001,
        api_key: str | None = None,
        sglang_version: str | None = None,
        patched: bool = True,
        sps=None,
        line: str = "v4-flash-0731",
        sglang_source: str = "auto",
        layout=None,
        **fault_options,
    ):
        if not isinstance(faults, Faults):
            faults = Faults.parse(faults, **fault_options)
        self.app = create_app(
            faults,
            accept_length=accept_length,
            token_delay=token_delay,
            api_key=api_key,
            sglang_version=sglang_version,
            patched=patched,
            sps=sps,
            line=line,
            sglang_source=sglang_source,
            layout=layout,
        )
        self.port = port or free_port()
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def state(self):
        return self.app.state.mock

    def start(self) -> MockServer:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the mock sglang server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._server.force_exit = True
        self._thread.join(timeout=5)

    def __enter__(self) -> MockServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
