"""Run the real `sm12x` CLI in a subprocess, as a user (or the container) would."""

from __future__ import annotations

import copy
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def run_sm12x(
    *args: str, env: dict[str, str] | None = None, path: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`sm12x ARGS` with a clean environment: only what the test passes.

    PATH defaults to the system folders (no nvidia-smi there on a CI box);
    pass `path` to put fakes first.
    """
    base = {
        "PATH": path or "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(ROOT),
        "LANG": "C.UTF-8",
        # No .env unless the test names one (--env-file or its own SM12X_ENV_FILE).
        "SM12X_ENV_FILE": os.devnull,
    }
    return subprocess.run(
        [sys.executable, "-m", "sm12x.cli", *args],
        env={**base, **(env or {})},
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def fake_nvidia_smi(tmp_path: Path, body: str) -> str:
    """A bin folder whose nvidia-smi runs `body`; returns a PATH with it first.

    The fake refuses any other arguments than the query sm12x documents, so a
    change to the query shows up here.
    """
    from sm12x.launch import gpus

    query = " ".join(gpus.QUERY[1:])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$*" != {shlex.quote(query)} ]; then echo "unexpected args: $*" >&2; exit 64; fi\n'
        + body
        + "\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return f"{bin_dir}:/usr/bin:/bin"


def raw_recipe(name: str) -> dict:
    """A shipped recipe as a plain dict, to mutate into failing examples."""
    text = (ROOT / "recipes" / f"{name}.yaml").read_text()
    return copy.deepcopy(yaml.safe_load(text))


def write_recipe(tmp: Path, data: dict, name: str = "case.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def assert_one_clear_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Non-zero exit, exactly one stderr line, no traceback, and it says what it must."""
    assert result.returncode != 0, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]
