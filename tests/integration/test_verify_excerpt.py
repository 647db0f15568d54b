"""README's verify excerpt is what the commands it names print.

The README names the mock server's command (`sm12x mock-server`) and verify's;
this runs both as written (on a free port instead of 30001) and compares the
table rows the excerpt shows: each verdict, and each row's text, except what
the README says varies from run to run (how many soak requests fail, which
detectors fire, the seconds column)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time

import httpx

from sm12x.mock.server import free_port
from tests.support import http_client
from tests.support.cli import ROOT

README = (ROOT / "README.md").read_text()
VARIES = re.compile(r"^\d+/\d+ soak requests failed \(pass\^\d+ [\d.]+\): .*?(?= cause: )")


def excerpt() -> tuple[str, str, str, int, list[str]]:
    """(the server command, the verify command, the text block, how many passing
    rows it says it cut, the skipped rows it says it cut) from README."""
    start = README.index("What a run looks like when the server has the depth-5 problem")
    section = README[start : README.index("| check fails |", start)]
    spans = [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", section)]
    server = next(s for s in spans if s.startswith("sm12x mock-server "))
    verify = next(s for s in spans if s.startswith("sm12x verify "))
    block = re.search(r"```text\n(.*?)```", section, re.DOTALL)[1]
    prose = " ".join(section.split())
    cut = int(re.search(r"The (\d+) passing rows", prose)[1])
    skipped = re.findall(r"the skipped `([\w-]+)` row", prose)
    return server, verify, block, cut, skipped


def rows(table: str) -> dict[str, tuple[str, str]]:
    """check -> (verdict, its text with wrapped lines joined); the seconds column dropped."""
    found: dict[str, list] = {}
    last = None
    for line in table.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        name, verdict, text = cells[0], cells[1], cells[2]
        if name:
            last = name
            found[name] = [verdict, text]
        elif last is not None:
            found[last][1] = f"{found[last][1]} {text}".strip()
    return {name: (verdict, text) for name, (verdict, text) in found.items()}


def comparable(name: str, text: str) -> str:
    return VARIES.sub("N", text) if name == "soak" else text


def test_the_excerpt_is_what_its_commands_print(tmp_path):
    server_cmd, verify_cmd, block, cut_rows, cut_skipped = excerpt()
    port = str(free_port())
    server_words = [port if w == "30001" else w for w in shlex.split(server_cmd)]
    verify_words = [w.replace(":30001", f":{port}") for w in shlex.split(verify_cmd)]
    assert server_words[:2] == ["sm12x", "mock-server"], server_words
    assert verify_words[:2] == ["sm12x", "verify"]
    server = subprocess.Popen(
        [sys.executable, "-m", "sm12x.cli", *server_words[1:]],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.stderr.read()
            try:
                if http_client.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the stand-in did not come up in 60 s"
            time.sleep(0.2)
        env = {**os.environ, "COLUMNS": "100", "SM12X_ENV_FILE": os.devnull}
        done = subprocess.run(
            [sys.executable, "-m", "sm12x.cli", *verify_words[1:], "--no-files"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        server.kill()
        server.wait(timeout=30)
    assert done.returncode == 1, done.stdout + done.stderr
    shown, ran = rows(block), rows(done.stdout)
    assert shown and set(shown) <= set(ran)
    for name, (verdict, text) in shown.items():
        assert ran[name][0] == verdict, (name, ran[name])
        assert comparable(name, ran[name][1]) == comparable(name, text), name
    # The rows the README cuts all passed, as it says.
    cut = [name for name in ran if name not in shown]
    assert len([n for n in cut if ran[n][0] == "pass"]) == cut_rows, cut
    assert {n: ran[n] for n in cut if ran[n][0] != "pass"}.keys() == set(cut_skipped)
    assert all(ran[n][0] == "skip" for n in cut_skipped), {n: ran[n] for n in cut_skipped}
    summary = block.strip().splitlines()[-1]
    assert summary in done.stdout.splitlines()
