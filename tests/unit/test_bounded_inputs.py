"""Issue 30: every input sm12x reads and every answer it parses is bounded, and
each refusal is one line; strict ports and addresses; encoded keys redacted;
node system folders refused as the model's hostPath."""

from __future__ import annotations

import base64
import json
import os
import socket
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import quote

import pytest

from sm12x.errors import UserError
from sm12x.http.redact import Redactor
from tests.support.cli import assert_one_clear_error, run_sm12x
from tests.support.local_http import LocalServer

RECIPE = "rtx-pro-6000-tp4"


# --- ports and addresses ---------------------------------------------------------


@pytest.mark.parametrize("port", ["30000.0", "+80", "0x50", "1e3", "-80"])
def test_a_port_is_digits_only(port):
    result = run_sm12x("launch", "--dry-run", "--recipe", RECIPE, env={"SM12X_PORT": port})
    assert_one_clear_error(result, "SM12X_PORT", "digits")


def test_a_bare_ipv6_head_address_is_refused_as_ambiguous():
    result = run_sm12x(
        "launch", "--dry-run", "--recipe", RECIPE, env={"SM12X_HEAD_ADDR": "::1:5000"}
    )
    assert_one_clear_error(result, "SM12X_HEAD_ADDR", "brackets")
    ok = run_sm12x("launch", "--dry-run", "--recipe", RECIPE, env={"SM12X_HEAD_ADDR": "[::1]:5000"})
    assert ok.returncode == 0, ok.stderr


# --- .env -------------------------------------------------------------------------


def _with_env_file(tmp_path, text: str | bytes):
    path = tmp_path / "bad.env"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return run_sm12x("launch", "--dry-run", "--recipe", RECIPE, env={"SM12X_ENV_FILE": str(path)})


def test_an_unterminated_env_line_is_an_error_with_its_line_number(tmp_path):
    result = _with_env_file(tmp_path, 'SM12X_PORT=30000\nSM12X_API_KEY="sk-secret-unterminated\n')
    line = assert_one_clear_error(result, "line 2", "NAME=value")
    assert "sk-secret" not in result.stdout + result.stderr, line


def test_a_huge_env_file_is_refused_unread(tmp_path):
    path = tmp_path / "huge.env"
    with path.open("wb") as handle:
        handle.truncate(1 << 30)  # 1 GiB, sparse: nothing is written, nothing may be read
    result = run_sm12x("launch", "--dry-run", "--recipe", RECIPE, env={"SM12X_ENV_FILE": str(path)})
    assert_one_clear_error(result, "more than the", "allowed")


def test_an_interpolation_bomb_is_refused_before_it_expands(tmp_path):
    lines = ["A0=" + "x" * 64]
    lines += [f"A{n}=${{A{n - 1}}}${{A{n - 1}}}" for n in range(1, 40)]
    result = _with_env_file(tmp_path, "\n".join(lines) + "\n")
    assert_one_clear_error(result, "would expand to more than", "line ")


def test_interpolation_still_works(tmp_path):
    result = _with_env_file(tmp_path, "BASE=31\nSM12X_PORT=${BASE}000\n")
    assert result.returncode == 0, result.stderr
    assert "--port 31000" in result.stdout


# --- the SPS sidecar ----------------------------------------------------------------


def test_a_hostile_sidecar_is_not_read(tmp_path):
    from sm12x.sps import tables as sps_tables

    deep = tmp_path / "deep.meta.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    fifo = tmp_path / "fifo.meta.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.meta.json"
    zero.symlink_to("/dev/zero")
    for path in (deep, fifo, zero):
        (tmp_path / path.name.replace(".meta.json", ".json")).write_text("{}")
        assert sps_tables.read_meta(path) is None, path  # and it returned: no hang


# --- sm12x healthcheck against a hostile server -------------------------------------


class Hostile:
    def __init__(self, behaviour: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if behaviour == "deep":
                    body = b"[" * 200_000 + b"]" * 200_000
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b"x" * 65536 if behaviour == "endless" else b" "
                try:
                    while True:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        if behaviour == "trickle":
                            time.sleep(0.2)
                except OSError:
                    return

        # The client hanging up on a hostile answer is the point: LocalServer
        # prints no traceback for it on the stderr the CLI's output is read from.
        self.httpd = LocalServer(Handler).start()
        self.url = self.httpd.url

    def close(self) -> None:
        self.httpd.close()


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize(
    ("behaviour", "needle"),
    [("deep", "levels deep"), ("endless", "over 1 MiB"), ("trickle", "deadline")],
)
def test_healthcheck_against_a_hostile_server_ends_with_one_line(behaviour, needle):
    timeout = 2.0
    started = time.monotonic()
    baseline = run_sm12x("healthcheck", "--url", _closed_port(), "--timeout", "5", env={})
    baseline_s = time.monotonic() - started
    assert baseline.returncode == 1
    server = Hostile(behaviour)
    try:
        started = time.monotonic()
        result = run_sm12x("healthcheck", "--url", server.url, "--timeout", f"{timeout}", env={})
        took = time.monotonic() - started
    finally:
        server.close()
    assert_one_clear_error(result, needle)
    # The whole run within --timeout: the deadline plus what starting costs now.
    assert took < timeout + 2 * baseline_s + 2.0, (took, baseline_s)


# --- tune: /server_info's types --------------------------------------------------------


def _info(**changes) -> dict:
    record = {
        "components": ["core", "step_cpu_time"],
        "mode": "compact",
        "simulate_acc_len": 1.0,
        "gamma": 7,
    }
    decode = {"bs": [1, 2, 4], "max_bs": 4}
    state = {"dspark_info_record": record, "cuda_graph_config": {"decode": decode}}
    info = {"speculative_algorithm": "DSPARK", "tp_size": 4, "internal_states": [state]}
    for key, value in changes.items():
        if key in record:
            record[key] = value
        elif key in decode:
            decode[key] = value
        elif key == "record":
            state["dspark_info_record"] = value
        else:
            info[key] = value
    return info


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"gamma": "x"}, "gamma"),
        ({"bs": ["a"]}, "bs[0]"),
        ({"bs": None, "max_bs": 1e999}, "max_bs"),
        ({"tp_size": "NaN"}, "tp_size"),
        ({"record": [1, 2]}, "dspark_info_record"),
    ],
)
def test_tune_names_the_bad_server_info_field(changes, field):
    from sm12x.tune import probe

    info = _info(**changes)
    with pytest.raises(UserError) as caught:
        probe.facts(info, "http://127.0.0.1:1")
    assert field in caught.value.message, caught.value.message
    assert "\n" not in caught.value.message


def test_tune_reads_a_well_typed_server_info():
    from sm12x.tune import probe

    facts = probe.facts(_info(), "http://127.0.0.1:1")
    assert (facts.gamma, facts.cuda_graph_max_bs, facts.parallel.tp) == (7, 4, 4)


# --- redaction of encoded keys ---------------------------------------------------------

KEY = "sk-test-0123456789abcdefXYZ"


@pytest.mark.parametrize(
    "text",
    [
        *(base64.b64encode(b"x" * n + KEY.encode() + b"tail").decode() for n in range(3)),
        base64.urlsafe_b64encode(b"user:" + KEY.encode()).decode(),
        KEY.encode().hex(),
        KEY.encode().hex().upper(),
        quote(KEY, safe=""),
        "the first half: " + KEY[: len(KEY) // 2],
        "the second half: " + KEY[len(KEY) // 2 :],
        json.dumps({"echo": KEY[:9]}),
    ],
)
def test_encoded_forms_and_halves_of_the_key_are_redacted(text):
    redacted = Redactor([KEY]).text(text)
    assert "***" in redacted, redacted
    for part in (KEY[:8], KEY[-8:], KEY.encode().hex()[:16]):
        assert part not in redacted, redacted
    assert base64.b64encode(KEY.encode()).decode()[4:16] not in redacted


def test_ordinary_text_is_left_alone():
    text = "a normal sentence with sk- and 0123 in it"
    assert Redactor([KEY]).text(text) == text


# --- --model-host-path ----------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/var/run/docker.sock",
        "/run/containerd/containerd.sock",
        "/etc/kubernetes",
        "/var/lib/docker",
        "/home",
        "//etc",
        "/srv/../etc",
        "/var/lib/kubelet/pods",
    ],
)
def test_a_node_system_path_is_refused_as_the_model_folder(path):
    result = run_sm12x("render", "--k8s", "all", "--model-host-path", path)
    assert_one_clear_error(result, "model")
