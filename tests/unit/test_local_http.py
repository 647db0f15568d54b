"""tests/support/local_http.py: a test's server leaves no handler running past close()."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler

from tests.support.local_http import LocalServer


class _Late(BaseHTTPRequestHandler):
    """Answers after the client has given up: the write hits a closed socket."""

    def do_GET(self) -> None:  # noqa: N802
        time.sleep(0.5)
        body = b"x" * 1_000_000  # more than the socket buffers: the write must fail
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_close_waits_for_a_late_handler_and_a_hang_up_prints_nothing(capfd):
    before = set(threading.enumerate())
    with LocalServer(_Late) as server:
        with socket.create_connection(("127.0.0.1", server.server_address[1]), 10) as sock:
            sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
            # Hang up at once, with the handler still asleep (an RST on its write).
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
        time.sleep(0.1)
    left = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    assert left == [], left
    err = capfd.readouterr().err
    assert "Traceback" not in err, err


def test_a_handler_s_own_bug_is_still_printed(capfd):
    class Broken(_Late):
        def do_GET(self) -> None:  # noqa: N802
            raise ValueError("the handler's own bug")

    with LocalServer(Broken) as server:
        with socket.create_connection(("127.0.0.1", server.server_address[1]), 10) as sock:
            sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
            sock.recv(1)
    assert "ValueError: the handler's own bug" in capfd.readouterr().err
