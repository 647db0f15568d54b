"""The pieces of verify's bounded HTTP that need no server: option types,
redaction, --only's plan, fail fast, the event-stream line reader."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import httpx
import pytest

from sm12x import fields
from sm12x.http import redact
from sm12x.http.transport import (
    BoundedAsyncTransport,
    FailFast,
    Limits,
    LineReader,
    NotUtf8,
    TooLarge,
    auth_hint,
    request_kind,
    tls,
)
from verify.runner import needed, plan


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "0", "-1", "abc", ""])
def test_seconds_refuses_what_would_turn_a_limit_off(text):
    with pytest.raises(argparse.ArgumentTypeError):
        fields.seconds(text)


def test_seconds_and_counts_accept_sane_values():
    assert fields.seconds("0.5") == 0.5 and fields.count("3") == 3
    assert fields.fraction("1") == 1.0 and fields.non_negative("0") == 0.0
    for bad in ("0", "-2", "1.5", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            fields.count(bad)


def test_limits_refuse_non_finite_values():
    for bad in (float("nan"), float("inf"), 0, -1):
        with pytest.raises(ValueError):
            Limits(timeout=bad)


def test_writable_file(tmp_path):
    assert fields.writable_file(tmp_path / "new" / "deeper" / "r.json") is None
    assert (tmp_path / "new" / "deeper").is_dir()
    assert "is a folder" in fields.writable_file(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "cannot write" in fields.writable_file(blocker / "r.json")
    assert "cannot write" in fields.writable_file(Path("/proc/sm12x-test/r.json"))


def test_redaction_of_urls_keys_and_bearer_tokens():
    url = "http://alice:pa%24%24word@gpu-box:30000"
    assert redact.url(url) == "http://***@gpu-box:30000"
    assert redact.url("http://gpu-box:30000/v1") == "http://gpu-box:30000/v1"
    r = redact.Redactor.for_endpoint(url, "sk-live-123456")
    text = r.text(
        f"GET {url}/health failed; key sk-live-123456; password pa$$word; "
        "Authorization: Bearer abc.def; other https://bob:x@host/p"
    )
    for secret in ("alice", "pa%24%24word", "pa$$word", "sk-live-123456", "abc.def", "bob:x"):
        assert secret not in text, text
    assert r({"a": ["sk-live-123456", 3, None], "sk-live-123456": "x"}) == {
        "a": ["***", 3, None],
        "***": "x",
    }


def test_only_pulls_in_what_a_check_needs():
    assert needed({"soak"}) == {"soak", "one-token", "models", "health"}
    run, pulled = plan({"soak"}, set())
    assert run == {"soak", "one-token", "models", "health"}
    assert pulled["health"] == "soak"
    assert plan(set(), {"soak"})[0] >= {"health", "spec"} and "soak" not in plan(set(), {"soak"})[0]
    with pytest.raises(ValueError, match="--only soak needs models, which --skip leaves out"):
        plan({"soak"}, {"models"})


def test_fail_fast_counts_each_kind_in_a_row():
    ff = FailFast(2)
    ff.missed("streamed", "a")
    assert ff.refuse("streamed") is None
    ff.missed("streamed", "b")
    assert "the last 2 streamed requests" in ff.refuse("streamed")
    assert ff.refuse("non-streamed") is None
    ff.finished("streamed")
    assert ff.refuse("streamed") is None
    assert FailFast(0).refuse("streamed") is None


def test_request_kind_reads_the_stream_flag():
    assert request_kind(httpx.Request("POST", "http://x/", json={"stream": True})) == "streamed"
    assert (
        request_kind(httpx.Request("POST", "http://x/", json={"stream": False})) == "non-streamed"
    )
    assert request_kind(httpx.Request("GET", "http://x/health")) == "non-streamed"


def test_line_reader_caps_lines_and_events_and_wants_utf8():
    limits = Limits(max_line=100, max_event=150)
    reader = LineReader(limits)
    assert reader.feed(b"data: 1\r\n\ndata: ") == ["data: 1", ""]
    assert reader.feed(b"2\n") == ["data: 2"]
    assert reader.end() == []
    with pytest.raises(TooLarge, match="a line over 100 bytes"):
        LineReader(limits).feed(b"x" * 101)
    events = LineReader(limits)
    events.feed(b"data: " + b"a" * 80 + b"\n")
    with pytest.raises(TooLarge, match="one event over 150 bytes"):
        events.feed(b"data: " + b"a" * 80 + b"\n")
    with pytest.raises(NotUtf8):
        LineReader(limits).feed(b"data: \xff\n")
    cut = LineReader(limits)
    cut.feed(b'data: {"a"')
    assert cut.end() == ['data: {"a"']


def test_auth_hint_names_the_setting():
    assert "SM12X_API_KEY" in auth_hint(401, False) and "--api-key" in auth_hint(403, False)
    assert "refused the API key" in auth_hint(401, True)
    assert auth_hint(404, False) is None


def test_a_request_to_a_silent_server_says_it_is_still_waiting(monkeypatch):
    """Issue 43: verify said nothing for the whole stall wait on a server that
    accepts and never answers. Each NOTE_EVERY_S of silence is one line to
    `waiting`, before the stall limit ends the request; a prompt answer none."""
    import socket
    import threading

    from sm12x.http import transport
    from verify.client import Endpoint

    monkeypatch.setattr(transport, "NOTE_EVERY_S", 0.2)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
    port = listener.getsockname()[1]
    lines: list[str] = []
    endpoint = Endpoint(base_url=f"http://127.0.0.1:{port}", timeout=10, stall_timeout=1.1)
    bounded = endpoint.transport(waiting=lines.append)
    try:
        with pytest.raises(transport.Stalled):
            endpoint.http(bounded).get("/health")
    finally:
        bounded.close()
        listener.close()
        for conn in held:
            conn.close()
    # About 1.1 / 0.2 of them (a loaded machine may drop one or two), each saying
    # how long so far and what ends it.
    assert 3 <= len(lines) <= 6, lines
    shape = re.compile(
        r"GET /health: still waiting, no byte for \d+ s \(it gives up at the 1\.1 s stall limit\)"
    )
    assert all(shape.fullmatch(line) for line in lines), lines


def test_one_tls_context_per_ca_bundle_verifying_as_httpx_s_own(monkeypatch, tmp_path):
    import ssl

    import certifi

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    shared = tls()
    assert tls() is shared
    own = httpx.create_ssl_context()  # what httpx makes for every client
    assert (shared.verify_mode, shared.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert shared.get_ca_certs() == own.get_ca_certs() != []
    # another bundle is another context, read from that bundle
    pem = Path(certifi.where()).read_text()
    first = pem[pem.index("-----BEGIN CERTIFICATE-----") :]
    first = first[: first.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")]
    (tmp_path / "one.pem").write_text(first + "\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "one.pem"))
    other = tls()
    assert other is not shared and len(other.get_ca_certs()) == 1
    assert other.get_ca_certs() == httpx.create_ssl_context().get_ca_certs()
    # the bounded transport's connections use it
    pool = BoundedAsyncTransport(Limits())._inner._pool  # type: ignore[attr-defined]
    assert pool._ssl_context is other
