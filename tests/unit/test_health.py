"""`sm12x healthcheck` asks a server for one real token."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import pytest

from sm12x.launch.health import default_url
from sm12x.settings import load
from tests.support.cli import assert_one_clear_error, run_sm12x
from tests.support.local_http import LocalServer


class FakeServer:
    """Just enough of sglang's OpenAI API: /v1/models and /v1/completions."""

    def __init__(self, completion_status=200, completion=None, key=None):
        self.requests: list[tuple[str, dict | None, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self):
                return key is None or self.headers.get("Authorization") == f"Bearer {key}"

            def do_GET(self):
                outer.requests.append((self.path, None, self.headers.get("Authorization")))
                if not self._authorized():
                    return self._reply(401, {"error": "bad key"})
                self._reply(200, {"data": [{"id": "deepseek-ai/DeepSeek-V4-Flash-0731"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body, self.headers.get("Authorization")))
                if not self._authorized():
                    return self._reply(401, {"error": "bad key"})
                default = {"choices": [{"text": " Paris"}], "usage": {"completion_tokens": 1}}
                self._reply(completion_status, completion if completion is not None else default)

        self.httpd = LocalServer(Handler).start()
        self.port = self.httpd.server_address[1]

    def close(self):
        self.httpd.close()


@pytest.fixture
def server_factory():
    servers = []

    def make(**kwargs):
        servers.append(FakeServer(**kwargs))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def test_one_token_is_healthy(server_factory):
    server = server_factory(key="k")
    result = run_sm12x("healthcheck", env={"SM12X_PORT": str(server.port), "SM12X_API_KEY": "k"})
    assert result.returncode == 0, result.stderr
    assert "ok: deepseek-ai/DeepSeek-V4-Flash-0731 generated 1 token(s)" in result.stdout
    (path, body, auth) = server.requests[-1]
    assert path == "/v1/completions" and auth == "Bearer k"
    assert body["max_tokens"] == 1 and body["model"] == "deepseek-ai/DeepSeek-V4-Flash-0731"


def test_a_failing_generation_is_unhealthy_even_when_models_answers(server_factory):
    server = server_factory(completion_status=500, completion={"error": "scheduler died"})
    result = run_sm12x("healthcheck", env={"SM12X_PORT": str(server.port)})
    assert_one_clear_error(result, "/v1/completions: HTTP 500", "scheduler died")


def test_no_token_is_unhealthy(server_factory):
    server = server_factory(
        completion={"choices": [{"text": ""}], "usage": {"completion_tokens": 0}}
    )
    result = run_sm12x("healthcheck", "--url", f"http://127.0.0.1:{server.port}")
    assert_one_clear_error(result, "generated no token")


def test_a_wrong_key_is_unhealthy(server_factory):
    server = server_factory(key="right")
    result = run_sm12x(
        "healthcheck", env={"SM12X_PORT": str(server.port), "SM12X_API_KEY": "wrong"}
    )
    assert_one_clear_error(result, "HTTP 401")


def test_nothing_listening_is_unhealthy():
    import socket

    # A port that was free a moment ago: nothing listens there.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run_sm12x("healthcheck", "--url", f"http://127.0.0.1:{port}", "--timeout", "2")
    assert_one_clear_error(result, f"http://127.0.0.1:{port}/v1/models")


@pytest.mark.parametrize(
    "env, url",
    [
        ({}, "http://127.0.0.1:30000"),
        ({"SM12X_HOST": "0.0.0.0"}, "http://127.0.0.1:30000"),
        ({"SM12X_HOST": "192.168.1.5", "SM12X_PORT": "8000"}, "http://192.168.1.5:8000"),
        # Host networking on a bare host: sglang binds SM12X_BIND itself.
        ({"SM12X_BIND": "192.168.1.7"}, "http://192.168.1.7:30000"),
        # A bridged container: sglang binds 0.0.0.0 inside, SM12X_BIND is the host's.
        ({"SM12X_HOST": "0.0.0.0", "SM12X_BIND": "192.168.1.7"}, "http://127.0.0.1:30000"),
    ],
)
def test_default_url_follows_where_the_server_binds(env, url):
    assert default_url(load(environ=env).settings) == url


def test_the_router_healthcheck_asks_the_router():
    env = {"SM12X_ROUTER_BIND": "0.0.0.0", "SM12X_ROUTER_PORT": "8001", "SM12X_PORT": "30001"}
    assert default_url(load(environ=env).settings, router=True) == "http://127.0.0.1:8001"
