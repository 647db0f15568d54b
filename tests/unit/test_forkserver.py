"""sm12x.mock.forkserver: a run served by a zygote's child is the run, or is not served.

tests/support/forkserver_demo.py is the program: its zygote's import reads
DEMO_READ. Each test gets its own folder and owner (a `sleep` it kills), so
its zygotes are its own.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sm12x.mock import forkserver
from tests.support import forkservers

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parents[1]


@pytest.fixture
def folder(tmp_path):
    home = tmp_path / "zygotes"
    home.mkdir()
    owner = subprocess.Popen(["sleep", "600"])
    (home / "owner").write_text(str(owner.pid))
    yield home
    owner.kill()  # its zygotes see it gone within POLL_S (the last test here)
    owner.wait()


def env_of(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != forkserver.ENV}
    return {**env, forkserver.ENV: str(home), "DEMO_READ": "a", "PYTHONPATH": str(ROOT), **extra}


def demo(env: dict[str, str], *args: str, stdin: str = "", cwd: Path = ROOT):
    return subprocess.run(
        [sys.executable, "-m", "tests.support.forkserver_demo", *args],
        input=stdin, capture_output=True, text=True, env=env, cwd=cwd, timeout=60, check=False,
    )  # fmt: skip


def ready(home: Path, **extra: str) -> None:
    """Wait for the demo's zygote (started by a second run) to listen."""
    deadline = time.monotonic() + 60
    while True:
        base, key = forkserver.keys(home, _spec(), env_of(home, **extra))
        if (home / f"{key}.sock").exists():
            return
        assert time.monotonic() < deadline, log(home)
        time.sleep(0.1)


def warm(home: Path, **extra: str) -> list[subprocess.CompletedProcess]:
    """Two runs: the kind's zygote starts at its second, then listens."""
    runs = [demo(env_of(home, **extra)) for _ in range(2)]
    ready(home, **extra)
    return runs


def _spec():
    from tests.support.forkserver_demo import SPEC

    return SPEC


def log(home: Path) -> str:
    path = home / "forkserver.log"
    return path.read_text() if path.exists() else ""


def test_a_served_run_is_the_run_it_stands_for(folder, tmp_path):
    first = demo(env_of(folder), "--exit", "3", stdin="one")
    assert "started a zygote" not in log(folder)  # not for a run seen once
    warm(folder)
    assert "started a zygote" in log(folder)
    served = demo(env_of(folder, DEMO_FREE="x"), "--exit", "3", "w", stdin="two", cwd=tmp_path)
    assert "not served" not in log(folder)
    for done in (first, served):
        assert done.returncode == 3
        # what the zygote's import printed, the run prints
        assert done.stderr.startswith("the import says this"), done.stderr
    said = json.loads(served.stdout)
    assert said["argv"] == ["--exit", "3", "w"]
    assert (said["cwd"], said["stdin"], said["read"], said["free"]) == (
        str(tmp_path),
        "two",
        "a",
        "x",
    )
    assert json.loads(first.stdout)["pid"] != said["pid"]


def test_the_run_that_starts_a_zygote_waits_and_is_served_by_it(folder):
    """The second run of a kind starts its zygote, waits for its import and is its
    first served run (it used to import itself beside the zygote's import)."""
    first, second = (demo(env_of(folder), "--exit", "5") for _ in range(2))
    lines = log(folder).splitlines()
    assert [line.split(" ", 2)[2].split(" ")[0] for line in lines] == ["started", "served"]
    assert lines[0].split()[1] == lines[1].split()[1]  # both by the second run
    for done in (first, second):
        assert done.returncode == 5 and done.stderr.startswith("the import says this")
    assert json.loads(second.stdout)["pid"] != json.loads(first.stdout)["pid"]


def test_a_zygote_that_ends_first_leaves_the_run_to_import(folder):
    broken = {"DEMO_BROKEN": "1"}
    runs = [demo(env_of(folder, **broken), "--exit", "6") for _ in range(2)]
    assert [done.returncode for done in runs] == [6, 6]
    assert "the zygote this run started ended: the run imports itself" in log(folder)
    assert " served by " not in log(folder)


def test_a_run_whose_environment_the_import_read_differently_imports_itself(folder):
    warm(folder)
    served_before = log(folder).count(" served by ")
    other = demo(env_of(folder, DEMO_READ="b"))
    assert other.returncode == 0
    assert json.loads(other.stdout)["read"] == "b"
    assert log(folder).count(" served by ") == served_before  # not by DEMO_READ=a's
    # another value of a read variable: its own zygote, from its second run
    warm(folder, DEMO_READ="b")
    served = demo(env_of(folder, DEMO_READ="b"), "--exit", "4")
    assert (served.returncode, json.loads(served.stdout)["read"]) == (4, "b")
    assert " served by " in log(folder).splitlines()[-1]
    assert log(folder).count("started a zygote") == 2
    again = warm(folder, PYTHONWARNINGS="ignore")  # the interpreter's: another kind
    assert all(done.returncode == 0 for done in again)
    assert log(folder).count("started a zygote") == 3


def test_signals_reach_the_child_and_its_end_is_the_run_s(folder):
    warm(folder)
    for signum in (signal.SIGTERM, signal.SIGINT):
        run = subprocess.Popen(
            [sys.executable, "-m", "tests.support.forkserver_demo", "--sleep", "60"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, env=env_of(folder),
            cwd=ROOT,
        )  # fmt: skip
        assert run.stdout is not None
        child = json.loads(run.stdout.readline())["pid"]
        assert child != run.pid
        run.send_signal(signum)
        # SIGTERM ends the child by the signal; SIGINT is Python's KeyboardInterrupt,
        # uncaught: the interpreter ends by SIGINT too
        assert run.wait(timeout=30) == -signum
        gone(child)


def test_a_killed_run_takes_its_child_with_it(folder):
    warm(folder)
    run = subprocess.Popen(
        [sys.executable, "-m", "tests.support.forkserver_demo", "--sleep", "60"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, env=env_of(folder), cwd=ROOT,
    )  # fmt: skip
    assert run.stdout is not None
    child = json.loads(run.stdout.readline())["pid"]
    run.kill()
    run.wait(timeout=30)
    gone(child)


def gone(pid: int) -> None:
    deadline = time.monotonic() + 20
    while Path(f"/proc/{pid}").exists():
        status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        if status == "Z":  # ended; its zygote collects it
            return
        assert time.monotonic() < deadline, f"{pid} outlived its run"
        time.sleep(0.1)


def test_the_zygote_ends_with_its_owner(tmp_path):
    home = tmp_path / "zygotes"
    home.mkdir()
    owner = subprocess.Popen(["sleep", "600"])
    (home / "owner").write_text(str(owner.pid))
    warm(home)
    (sock,) = home.glob("*.sock")
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 10 * forkserver.POLL_S
    while sock.exists():
        assert time.monotonic() < deadline, "the zygote outlived its owner"
        time.sleep(0.2)


def test_a_key_whose_zygote_idled_out_gets_a_new_one(folder):
    """An idle zygote ends; the key's next two runs start another, which serves.
    Twice: the kind's first zygote is started under the kind's key, later ones
    under the key of their values (the one whose lock outlived it)."""
    idle = {forkserver.IDLE_ENV: "1"}  # not read by the import: the same key
    for started in (1, 2, 3):
        warm(folder, **idle)
        assert log(folder).count("started a zygote") == started
        served = demo(env_of(folder, **idle), "--exit", "3")
        assert served.returncode == 3
        assert " served by " in log(folder).splitlines()[-1], log(folder)
        _, key = forkserver.keys(folder, _spec(), env_of(folder, **idle))
        deadline = time.monotonic() + 10 * forkserver.POLL_S
        while (folder / f"{key}.sock").exists():
            assert time.monotonic() < deadline, "the zygote never idled out"
            time.sleep(0.2)


def test_unset_or_empty_nothing_is_started(tmp_path):
    env = {k: v for k, v in env_of(tmp_path).items() if k != forkserver.ENV}
    for extra in ({}, {forkserver.ENV: ""}):
        done = demo({**env, **extra})
        assert done.returncode == 0
    assert list(tmp_path.iterdir()) == []


def test_the_recorder_tells_reads_from_scans():
    recorder = forkserver.RecordingEnviron({"A": "1", "TQDM_X": "2", "B": "3"})
    recorder.get("A")
    "Z" in recorder  # noqa: B015 - a read of an absent one
    assert dict(recorder.items())  # a scan from here: not a known one
    recorder.recording = False
    recorder.get("B")
    assert recorder.reads == {"A", "Z"}
    assert recorder.scans and recorder.scans[0].endswith(
        ":test_the_recorder_tells_reads_from_scans"
    )
    hello = {"reads": {"A": "1", "Z": None}, "scans": [], "prefixes": ["TQDM_"], "env": {"A": "1", "TQDM_X": "2"}}  # fmt: skip
    assert forkserver.mismatch(hello, {"A": "1", "TQDM_X": "2", "B": "other"}) is None
    assert "TQDM_" in (forkserver.mismatch(hello, {"A": "1", "TQDM_Y": "2"}) or "")
    assert "Z" in (forkserver.mismatch(hello, {"A": "1", "TQDM_X": "2", "Z": ""}) or "")
    assert "iterated" in (forkserver.mismatch({**hello, "scans": ["x:y"]}, {"A": "1"}) or "")


def _function_source(path: Path, name: str) -> str:
    """The source of the function `name` in path (a comprehension: the enclosing one's)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if name.startswith("<"):
        return path.read_text(encoding="utf-8")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(path.read_text(encoding="utf-8"), node) or ""
    raise AssertionError(f"{path} defines no {name} any more: KNOWN_SCANS is stale")


def test_each_known_scan_reads_only_its_prefix_in_the_installed_code():
    """The third-party scans as installed here (sglang's environ.py is each
    release's: tests/unit/test_server_args_zygote.py reads those)."""
    site = Path(__import__("tqdm").__file__).parents[1]
    for (suffix, name), prefix in forkserver.KNOWN_SCANS.items():
        if suffix.startswith("sglang/"):
            continue
        stdlib = Path(os.__file__).parent / suffix
        path = site / suffix if (site / suffix).exists() else stdlib
        source = _function_source(path, name)
        if suffix == "tqdm/utils.py":  # envwrap(prefix): its callers name the prefix
            # each prefix is NAME_ (or NAME_APP_, within it), NAME the decorator's first word
            assert "k.startswith(prefix)" in source and 'prefix.upper() + "_"' in source
            calls = [c for f in path.parent.glob("*.py") for c in
                     f.read_text(encoding="utf-8").split("@envwrap(")[1:]]  # fmt: skip
            names = {c.split(",")[0].strip("\"'").upper() + "_" for c in calls}
            assert names == {prefix}, names
        elif prefix is None:  # whole, into the WSGI servers' copy, which sm12x starts none of
            assert re.search(r"os_environ\s*=\s*read_environ\(\)", path.read_text("utf-8"))
            for module in (ROOT / "sm12x").rglob("*.py"):
                text = module.read_text(encoding="utf-8")
                assert not re.search(r"(import|from) wsgiref|start_http_server\(", text), module
        else:
            assert f'"{prefix}' in source or f"'{prefix}" in source, (suffix, name, prefix)


def test_the_session_s_variable_is_the_forkserver_s():
    assert forkservers.ENV == forkserver.ENV
    assert os.environ.get(forkserver.ENV) is not None  # conftest made the session's
