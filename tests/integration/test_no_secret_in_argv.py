"""No process sm12x starts has the API key in its command line.

/proc/<pid>/cmdline is readable by every user of the host (`ps -ef`), so a
key passed as `--api-key KEY` is no secret. These tests start the real
launchers, `sm12x launch` and `sm12x router`, exactly as the containers do,
in front of stand-ins for `sglang.launch_server` and
`sglang_router.launch_router` that keep the real programs' rules:

- the sglang stand-in parses its argv with every flag of the pinned sglang
  release (read from the wheel by tools/sglang_cli.py): an unknown
  flag, or one missing its value, fails as the real parser would; then, as
  sglang's engine does, it starts worker processes with multiprocessing's
  spawn method;
- the router stand-in is the real sglang_router package with only
  launch_router replaced: it parses with the real RouterArgs, then spawns a
  worker process too.

sm12x launches them with an environment it builds (sm12x.launch_env),
not the caller's: each stand-in reads where to report from standin.json
beside its package, not from a variable.

Each stand-in writes what it parsed (so the test knows the key arrived) and
waits; the test then reads /proc/<pid>/cmdline of the launcher's process and
every descendant.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sm12x.versions import load_versions
from tools import sglang_cli

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-argv-test-0123456789"

SGLANG_STANDIN = '''
"""Stand-in for sglang.launch_server: the real release's flags, spawned workers."""
import argparse, json, multiprocessing as mp, os, sys, time

def worker():
    time.sleep(600)

def config():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return json.load(open(os.path.join(here, "standin.json")))

if __name__ == "__main__":
    spec = json.load(open(config()["flags"]))
    parser = argparse.ArgumentParser(prog="sglang.launch_server", allow_abbrev=True)
    for name, switch in spec.items():
        if switch:
            parser.add_argument(name, action="store_true")
        else:
            parser.add_argument(name, nargs="+" if switch is None else None)
    args = parser.parse_args(sys.argv[1:])
    mp.set_start_method("spawn", force=True)
    children = [mp.Process(target=worker) for _ in range(2)]
    for child in children:
        child.start()
    report = config()["report"]
    json.dump({"api_key": args.api_key, "pid": os.getpid(),
               "children": [c.pid for c in children]},
              open(report + ".tmp", "w"))
    os.rename(report + ".tmp", report)
    time.sleep(600)
'''

ROUTER_INIT = '''
"""The real sglang_router, with launch_router taken from this folder first."""
import json, os
_here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
__path__.append(json.load(open(os.path.join(_here, "standin.json")))["router"])
'''

ROUTER_STANDIN = '''
"""Stand-in for sglang_router.launch_router: the real parser, a spawned worker."""
import argparse, json, multiprocessing as mp, os, sys, time
from sglang_router.router_args import RouterArgs

def worker():
    time.sleep(600)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    args = RouterArgs.from_cli_args(parser.parse_args(sys.argv[1:]), use_router_prefix=False)
    mp.set_start_method("spawn", force=True)
    child = mp.Process(target=worker)
    child.start()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    report = json.load(open(os.path.join(here, "standin.json")))["report"]
    json.dump({"api_key": args.api_key, "pid": os.getpid(), "children": [child.pid]},
              open(report + ".tmp", "w"))
    os.rename(report + ".tmp", report)
    time.sleep(600)
'''


def descendants(pid: int) -> list[int]:
    """pid and every process below it, from /proc/<pid>/task/*/children."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return found


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def run_until_reported(argv: list[str], env: dict[str, str], report: Path) -> dict:
    """Start argv, wait for the stand-in's report, return it with every process's cmdline."""
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not report.exists():
            if proc.poll() is not None:
                pytest.fail(f"{argv} exited {proc.returncode}: {proc.stderr.read()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{argv}: no report within 60 s")
            time.sleep(0.1)
        data = json.loads(report.read_text())
        pids = descendants(proc.pid)
        data["launcher"] = proc.pid
        data["cmdlines"] = {pid: cmdline(pid) for pid in pids}
        data["environ"] = Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
        return data
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture
def model_dir(tmp_path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def standin_sglang(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "standin"
    (root / "sglang").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "launch_server.py").write_text(SGLANG_STANDIN)
    # Installed as the image's is: sm12x launch checks it is the track's sglang.
    version = load_versions()["SGLANG_VERSION"]
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    flags = {
        name: spec.switch
        for name, spec in sglang_cli.server_flags(load_versions()["SGLANG_VERSION"]).items()
        if not spec.deprecated
    }
    spec_file = tmp_path / "flags.json"
    spec_file.write_text(json.dumps(flags))
    config = {"flags": str(spec_file), "report": str(tmp_path / "report.json")}
    (root / "standin.json").write_text(json.dumps(config))
    return root, spec_file


def base_env(tmp_path: Path, path: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": f"{path}:{ROOT}",
        "LANG": "C.UTF-8",
    }


@pytest.mark.parametrize("source", ["env", "file"])
def test_launch_keeps_the_key_out_of_every_argv(tmp_path, model_dir, source):
    root, flags = standin_sglang(tmp_path)
    env = {
        **base_env(tmp_path, root),
        "SM12X_RECIPE": "rtx-pro-6000-tp2",
        "SM12X_MODEL_DIR": str(model_dir),
        "SM12X_HOST": "0.0.0.0",
    }
    if source == "env":
        env["SM12X_API_KEY"] = SECRET
    else:  # the Kubernetes Secret, mounted as a file
        key_file = tmp_path / "api-key"
        key_file.write_text(SECRET + "\n")
        env["SM12X_API_KEY_FILE"] = str(key_file)
    got = run_until_reported(
        [sys.executable, "-m", "sm12x.cli", "launch"], env, tmp_path / "report.json"
    )
    assert got["api_key"] == SECRET  # sglang has the key...
    assert got["pid"] == got["launcher"]  # (the launcher exec'd into it)
    assert set(got["children"]) <= set(got["cmdlines"])
    assert len(got["cmdlines"]) >= 3
    for pid, line in got["cmdlines"].items():  # ...and no command line shows it
        assert SECRET not in line, f"pid {pid}: {line}"
        assert "--api-key" not in line, f"pid {pid}: {line}"
    assert "sm12x.keyed sglang.launch_server" in got["cmdlines"][got["launcher"]]
    if source == "env":  # where it is: the environment, readable by its owner only
        assert f"SM12X_API_KEY={SECRET}" in got["environ"]


def test_router_keeps_the_key_out_of_every_argv(tmp_path):
    import sglang_router

    root = tmp_path / "standin"
    (root / "sglang_router").mkdir(parents=True)
    (root / "sglang_router" / "__init__.py").write_text(ROUTER_INIT)
    (root / "sglang_router" / "launch_router.py").write_text(ROUTER_STANDIN)
    config = {
        "router": str(Path(sglang_router.__file__).parent),
        "report": str(tmp_path / "report.json"),
    }
    (root / "standin.json").write_text(json.dumps(config))
    env = {
        **base_env(tmp_path, root),
        "SM12X_ROUTER_WORKERS": "http://127.0.0.1:30000",
        "SM12X_API_KEY": SECRET,
    }
    got = run_until_reported(
        [sys.executable, "-m", "sm12x.cli", "router"], env, tmp_path / "report.json"
    )
    assert got["api_key"] == SECRET
    assert len(got["cmdlines"]) >= 2
    for pid, line in got["cmdlines"].items():
        assert SECRET not in line, f"pid {pid}: {line}"
    assert "sm12x.keyed sglang_router.launch_router" in got["cmdlines"][got["launcher"]]


def test_a_key_on_the_command_line_would_be_seen(tmp_path):
    """The check can fail: sglang started the old way shows the key to everyone."""
    root, flags = standin_sglang(tmp_path)
    env = base_env(tmp_path, root)
    got = run_until_reported(
        [sys.executable, "-m", "sglang.launch_server", "--model-path", "/m", "--api-key", SECRET],
        env,
        tmp_path / "report.json",
    )
    assert SECRET in got["cmdlines"][got["launcher"]]


def test_the_standin_refuses_what_sglang_refuses(tmp_path):
    root, flags = standin_sglang(tmp_path)
    env = base_env(tmp_path, root)
    for argv in (["--no-such-flag"], ["--api-key"]):
        done = subprocess.run(
            [sys.executable, "-m", "sglang.launch_server", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done.stderr
