"""verify knows the model line: against the stand-in serving DeepSeek-V4.1-Flash
(sglang 0.5.23's V4.1 path: its encoder, parsers and image input) with the V4.1
recipe, every check passes, the image check included; an image the model never
sees fails it, and only it; the 0731 line refuses images as sglang does."""

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from sm12x.mock.server import free_port
from sm12x.versions import load_versions
from tests.integration.conftest import SMALL_SOAK, check, verdicts
from tests.support import http_client

V41 = "rtx-pro-6000-tp8-v41"
ROOT = Path(__file__).resolve().parents[2]
CURRENT = load_versions("current")["SGLANG_VERSION"]


@pytest.fixture
def v41():
    """The mock server serving V4.1 on the current track's sglang, in a process of its
    own, which puts that release's own transformers/tokenizers/deepseek-recipe pins
    first on its path (sm12x.mock.wheels.pythonpath), as the image has them."""
    procs = []

    def start(*faults: str):
        port = free_port()
        args = [
            "--line",
            "v4.1-flash",
            "--sglang-version",
            CURRENT,
            *(a for f in faults for a in ("--fault", f)),
        ]
        proc = subprocess.Popen(
            [sys.executable, "-m", "sm12x.mock", "--port", str(port), *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if http_client.get(url + "/health", timeout=1).status_code == 200:
                    return SimpleNamespace(base_url=url)
            except httpx.HTTPError:
                time.sleep(0.2)
        proc.kill()
        raise RuntimeError(f"the V4.1 stand-in did not start: {proc.stderr.read()[-2000:]}")

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_the_v41_stand_in_passes_every_check_with_the_v41_recipe(v41, verify, monkeypatch):
    monkeypatch.setenv("SM12X_RECIPE", V41)
    server = v41()
    code, report = verify("--base-url", server.base_url, *SMALL_SOAK)
    assert code == 0, [c for c in report["checks"] if c["verdict"] != "pass"]
    assert set(verdicts(report).values()) == {"pass"}
    assert check(report, "image")["metrics"]["images"] == 3
    assert report["verify"]["model_line"] == "v4.1-flash" and report["verify"]["vision"] is True
    assert report["verify"]["accept_floor"] == 1.5
    assert check(report, "models")["metrics"]["model"] == "deepseek-ai/DeepSeek-V4.1-Flash"
    # V4.1's own markup went through sglang's V4.1 parser: tool calls came back whole
    assert check(report, "tools-stream")["verdict"] == "pass"


def test_an_image_the_model_never_sees_fails_the_image_check_only(v41, verify, monkeypatch):
    monkeypatch.setenv("SM12X_RECIPE", V41)
    server = v41("image-blind")
    code, report = verify("--base-url", server.base_url, *SMALL_SOAK)
    assert code == 1
    failed = {n for n, v in verdicts(report).items() if v != "pass"}
    assert failed == {"image"}, report
    image = check(report, "image")
    assert "counted 1 red circles, the picture has 3" in image["problem"]
    assert "vision tower" in image["cause"] and "model.vision: true" in image["fix"]


def test_the_0731_recipe_against_a_v41_server_names_the_model(v41, verify, monkeypatch):
    monkeypatch.setenv("SM12X_RECIPE", "rtx-pro-6000-tp4")
    server = v41()
    code, report = verify("--base-url", server.base_url, "--only", "models")
    assert code == 1
    models = check(report, "models")
    assert "the recipe serves 'deepseek-ai/DeepSeek-V4-Flash-0731'" in models["problem"]


def test_v4_flash_0731_refuses_images_as_sglang_does(fake, verify):
    server = fake()
    code, report = verify("--base-url", server.base_url, "--vision", "--only", "image")
    assert code == 1
    image = check(report, "image")
    assert "refused an image input" in image["problem"], image
