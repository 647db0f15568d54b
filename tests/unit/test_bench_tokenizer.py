"""bench decides its tokenizer before it runs, in bounded time (issue 29: against
the mock, sglang's benchmark waited 108 s on the Hugging Face Hub for the served
model's id, silently, then raised OSError). Every refusal is one line that
names --tokenizer."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from sm12x.bench import main as bench
from sm12x.errors import UserError
from tests.support.calibrate import slowdown

HF_ID = "deepseek-ai/DeepSeek-V4-Flash-0731"


@pytest.fixture
def no_hub_cache(tmp_path, monkeypatch):
    # An empty Hugging Face cache: nothing is cached, as on a fresh CPU host.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


def tokenizer_folder(tmp_path):
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    return str(folder)


def test_the_model_dir_comes_first(tmp_path):
    folder = tokenizer_folder(tmp_path)
    path, note = bench.default_tokenizer(False, folder, ".env", {"model_path": "/model"}, HF_ID)
    assert path == folder and "SM12X_MODEL_DIR" in note


def test_the_server_s_own_folder_when_it_is_here(tmp_path):
    # The mock reports its tokenizer's folder, which is on this machine.
    folder = tokenizer_folder(tmp_path)
    path, note = bench.default_tokenizer(False, None, "default", {"tokenizer_path": folder}, HF_ID)
    assert path == folder and "on this machine" in note


def test_inside_the_image_the_server_s_own():
    assert bench.default_tokenizer(True, None, "default", {}, HF_ID)[0] is None


def test_an_offline_hub_id_is_refused_at_once(no_hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(UserError) as caught:
        bench.default_tokenizer(False, None, "default", {"model_path": "/model"}, HF_ID)
    elapsed = time.monotonic() - started
    message = caught.value.message
    assert HF_ID in message and "HF_HUB_OFFLINE" in message
    assert "--tokenizer DIR" in message and "SM12X_MODEL_DIR" in message
    assert elapsed < 5 * slowdown(), elapsed


def test_a_hub_that_never_answers_is_given_up_on_within_the_probe(no_hub_cache, monkeypatch):
    """A Hub that accepts and says nothing (a firewall, a proxy): refused after
    HUB_PROBE_S, not transformers' minutes of retries."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setattr(bench, "HUB_PROBE_S", 1.0)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    # Baseline: the same refusal with the Hub ruled out, measured now.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(UserError):
        bench.default_tokenizer(False, None, "default", {}, HF_ID)
    baseline = time.monotonic() - started
    monkeypatch.delenv("HF_HUB_OFFLINE")
    try:
        started = time.monotonic()
        with pytest.raises(UserError) as caught:
            bench.default_tokenizer(False, None, "default", {"model_path": "/model"}, HF_ID)
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        for conn in held:
            conn.close()
        silent.close()
    message = caught.value.message
    assert "did not answer within 1 s" in message and "--tokenizer DIR" in message
    assert 0.9 <= elapsed <= baseline + bench.HUB_PROBE_S + 2 * slowdown(), (elapsed, baseline)


def test_a_path_that_is_not_here_is_refused_naming_the_flag():
    with pytest.raises(UserError) as caught:
        bench.default_tokenizer(False, None, "default", {"model_path": "/model"}, "/model")
    assert "/model" in caught.value.message and "--tokenizer DIR" in caught.value.message


def test_a_given_folder_without_a_tokenizer_is_refused(tmp_path):
    with pytest.raises(UserError, match="no tokenizer.json"):
        bench.given_tokenizer(str(tmp_path))
    folder = tokenizer_folder(tmp_path)
    assert bench.given_tokenizer(folder)[0] == folder


def test_a_given_hub_id_offline_is_refused_naming_the_flag(no_hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as caught:
        bench.given_tokenizer(HF_ID)
    assert caught.value.message.startswith(f"--tokenizer {HF_ID}: ")
    assert "--tokenizer DIR" in caught.value.message


def test_the_served_id_is_read_from_v1_models():
    assert bench.served_id({"object": "list", "data": [{"id": HF_ID}]}) == HF_ID
    assert bench.served_id({"data": []}) is None
    assert bench.served_id(None) is None
