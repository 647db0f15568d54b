"""Every input bounded (issue 21): files read non-blocking and capped, JSON
depth measured before any parser recurses, whole runs under a deadline,
concurrency and report fields capped."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
import yaml

from sm12x import bounded
from sm12x.apikey import read_key_file
from sm12x.errors import UserError
from sm12x.recipe.load import MAX_BYTES, MAX_DEPTH, load_recipe
from tests.support import http_client
from tests.support.cli import raw_recipe, run_sm12x
from tests.support.local_http import LocalServer
from verify.cli import MAX_FIELD, capped


def _within(seconds: float, fn, *args):
    """fn(*args) in a thread; fails if it has not returned by then (a hang)."""
    out: dict = {}

    def target() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__}{args} did not return: it hangs"
    if "error" in out:
        raise out["error"]
    return out.get("value")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder", "big"])
def test_a_key_file_that_is_not_a_small_regular_file_is_refused_at_once(tmp_path, kind):
    path = {
        "fifo": tmp_path / "fifo",
        "dev-zero": "/dev/zero",
        "folder": tmp_path,
        "big": tmp_path / "big",
    }[kind]
    if kind == "fifo":
        os.mkfifo(path)
    if kind == "big":
        path.write_text("k" * 10_000)
    with pytest.raises(UserError, match="SM12X_API_KEY_FILE"):
        _within(30, read_key_file, str(path))


def test_a_key_file_is_read_and_checked(tmp_path):
    (tmp_path / "key").write_text("sk-file\n")
    assert read_key_file(str(tmp_path / "key")) == "sk-file"


def test_read_bytes_caps_what_it_reads(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 100)
    assert bounded.read_bytes(tmp_path / "f", 100) == b"x" * 100
    with pytest.raises(bounded.TooBig):
        bounded.read_bytes(tmp_path / "f", 99)


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("{}", 1),
        ('[[1], {"a": [2]}]', 3),
        ('{"a": "[[[[\\"[["}', 1),
        ('"\\\\"[[', 2),
        ("7", 0),
    ],
)
def test_nesting_skips_strings_and_escapes(text, depth):
    assert bounded.nesting(text) == depth


def test_the_depth_gauge_holds_its_state_across_chunks():
    gauge = bounded.DepthGauge(limit=3)
    for chunk in (b'{"a": "x\\', b'"[[[[[", "b": [', b"[1]]}"):
        gauge.feed(chunk)
    assert gauge.deepest == 3 and gauge.depth == 0
    with pytest.raises(bounded.TooBig):
        for _ in range(4):
            gauge.feed(b"[")


def test_deep_json_is_refused_without_recursion():
    deep = "[" * 200_000 + "]" * 200_000
    with pytest.raises(bounded.TooBig, match="nested 200000 levels deep"):
        bounded.loads(deep)
    assert bounded.loads('{"data": [{"id": "m"}]}') == {"data": [{"id": "m"}]}


def _write_recipe(tmp_path, name: str, text: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_a_recipe_past_its_size_cap_is_refused_before_it_is_parsed(tmp_path):
    text = yaml.safe_dump(raw_recipe("rtx-pro-6000-tp4")) + "#" * MAX_BYTES
    with pytest.raises(UserError, match="not a recipe file"):
        load_recipe(_write_recipe(tmp_path, "big", text))


@pytest.mark.parametrize("style", ["flow", "block"])
def test_a_recipe_nested_past_its_depth_cap_is_refused(tmp_path, style):
    if style == "flow":
        deep = "x: " + "[" * 100_000 + "]" * 100_000 + "\n"
    else:
        deep = (
            "".join(f"{'  ' * i}k{i}:\n" for i in range(MAX_DEPTH + 2))
            + "  " * (MAX_DEPTH + 2)
            + "v\n"
        )
    with pytest.raises(UserError, match=f"nested more than {MAX_DEPTH} levels deep"):
        _within(60, load_recipe, _write_recipe(tmp_path, "deep", deep))


def test_a_recipe_with_a_yaml_alias_is_refused(tmp_path):
    text = "a: &x [1, 2]\nb: *x\n"
    with pytest.raises(UserError, match="YAML alias"):
        load_recipe(_write_recipe(tmp_path, "alias", text))


def test_reports_cap_each_field():
    long = "x" * 100_000
    out = capped({"problem": long, "evidence": [long], long: 1})
    assert len(out["problem"]) < MAX_FIELD + 100 and "more characters not shown" in out["problem"]
    assert len(out["evidence"][0]) < MAX_FIELD + 100
    assert all(len(k) < MAX_FIELD + 100 for k in out)


# --- verify and bench: whole runs bounded ------------------------------------------------

MODEL = "sm12x-test"


class _JustUnderTheTimeout(BaseHTTPRequestHandler):
    """Answers every generation correctly, each one just under verify's --timeout:
    per request nothing is wrong, so only a deadline for the run ends it."""

    delay = 1.5

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/v1/models":
            self._send(
                200,
                json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode(),
            )
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        time.sleep(self.delay)
        reply = {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "OK"},
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        }
        if request.get("stream"):
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": "OK"},
                        "finish_reason": "stop",
                    }
                ],
            }
            body = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
            self._send(200, body, "text/event-stream")
        else:
            self._send(200, json.dumps(reply).encode())

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def slow_server():
    with LocalServer(_JustUnderTheTimeout) as server:
        yield server.url


def test_verify_deadline_ends_the_run_and_writes_the_reports(slow_server, tmp_path):
    # Baseline, this run: one request to this server.
    start = time.monotonic()
    http_client.post(f"{slow_server}/v1/chat/completions", json={}, timeout=30)
    one = time.monotonic() - start

    deadline = 4 * one
    report = tmp_path / "report.json"
    start = time.monotonic()
    result = run_sm12x(
        "verify",
        "--base-url",
        slow_server,
        "--timeout",
        str(2 * one + 1),
        "--deadline",
        f"{deadline:.2f}",
        "--soak-rounds",
        "1",
        "--soak-concurrency",
        "2",
        "--json",
        str(report),
        "--junit",
        str(tmp_path / "junit.xml"),
    )
    took = time.monotonic() - start
    assert result.returncode == 1, result.stdout + result.stderr
    data = json.loads(report.read_text())
    problems = [c.get("problem") or "" for c in data["checks"]]
    assert any("deadline" in p for p in problems), problems
    assert data["verify"]["deadline_s"] == pytest.approx(deadline, abs=0.01)
    # Without the deadline the checks send well over twenty requests in a row.
    assert took < deadline + 10 * one + 15, took


def test_verify_refuses_a_soak_beyond_its_cap():
    result = run_sm12x("verify", "--soak-concurrency", "100000", "--no-files")
    assert result.returncode == 2
    assert "--soak-concurrency 100000: at most 1024" in result.stderr
    assert "Traceback" not in result.stderr


def test_verify_refuses_a_broken_url_in_one_line():
    result = run_sm12x("verify", "--base-url", "http://[::1", "--no-files")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.strip()]
    assert "--base-url" in line and "not a URL" in line


def test_bench_s_own_requests_refuse_deep_json():
    """bench's /v1/models from a hostile server: one line, not a RecursionError."""
    from sm12x.bench import provenance

    class Deep(_JustUnderTheTimeout):
        def do_GET(self) -> None:  # noqa: N802
            self._send(200, b"[" * 100_000 + b"]" * 100_000)

    with LocalServer(Deep) as server:
        data, problem = provenance.get_json(f"{server.url}/v1/models", None, 10.0)
    assert data is None
    assert "nested more than 64 levels deep" in problem
