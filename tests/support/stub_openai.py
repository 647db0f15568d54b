"""A stand-in OpenAI-style server for the image's HEALTHCHECK (standard library only).

Run inside the image as its main process (`python3 stub_openai.py [--no-tokens]`)
on 127.0.0.1:30000, where `sm12x healthcheck` probes by default. With
--no-tokens /v1/completions answers with zero generated tokens: /health would
still be green, and the healthcheck must call the container unhealthy.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NO_TOKENS = "--no-tokens" in sys.argv


class Handler(BaseHTTPRequestHandler):
    def _send(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send({"object": "list", "data": [{"id": "stub", "object": "model"}]})
        elif self.path == "/health":
            self._send({})
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path != "/v1/completions":
            self.send_error(404)
            return
        tokens = 0 if NO_TOKENS else 1
        self._send(
            {
                "choices": [{"index": 0, "text": "" if NO_TOKENS else " Paris"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": tokens},
            }
        )

    def log_message(self, *args) -> None:
        pass


if __name__ == "__main__":
    print(f"stub server on 127.0.0.1:30000 (tokens: {not NO_TOKENS})", flush=True)
    ThreadingHTTPServer(("127.0.0.1", 30000), Handler).serve_forever()
