"""The lint and type gate, run by the suite: ruff (the rules and their reasons
are in pyproject.toml), ruff's formatter, mypy on the packages users run, and
shellcheck on every shell script of the repository. Each runs the pinned tool
from the test environment ([test] extra) on the checkout as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(
            f"{name} is not in the test environment: scripts/test installs the [test] extra"
        )
    return str(path)


def run(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def shell_scripts() -> list[Path]:
    """Every tracked file whose first line names sh or bash: new scripts are
    checked without being listed here."""
    tracked = run("git", "ls-files", "-z").stdout.split("\0")
    found = []
    for name in filter(None, tracked):
        path = ROOT / name
        if not path.is_file() or path.suffix in (".py", ".md", ".patch"):
            continue
        with path.open("rb") as f:
            first = f.readline(200)
        if first.startswith(b"#!") and (b"bash" in first or first.rstrip().endswith(b"/sh")):
            found.append(path)
    return found


def test_ruff_check_is_clean():
    done = run(tool("ruff"), "check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_is_clean():
    done = run(tool("ruff"), "format", "--check", "--no-cache", ".")
    assert done.returncode == 0, (
        "files ruff format would change (run `ruff format .`):\n" + done.stdout + done.stderr
    )


@pytest.mark.slow
def test_mypy_is_clean():
    # Its cache under the test cache: a second run checks only what changed.
    cache = Path(os.environ.get("SM12X_CACHE", ROOT / ".cache")) / "mypy"
    done = run(
        tool("mypy"), "--cache-dir", str(cache), "--python-executable", sys.executable, timeout=900
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_the_test_helpers_have_one_import_name():
    """`tests.support.X`, never `support.X`: a module imported under both names
    loads twice, and its state (caches, servers started) splits in two."""
    import re

    two = []
    for name in run("git", "ls-files", "*.py").stdout.split():
        text = (ROOT / name).read_text(encoding="utf-8")
        two += [f"{name}: {m}" for m in re.findall(r"(?m)^\s*(?:from|import) support\b.*$", text)]
    assert not two, "\n".join(two)


def test_shellcheck_is_clean():
    scripts = shell_scripts()
    names = {p.relative_to(ROOT).as_posix() for p in scripts}
    # The ones that matter most are found (the walk is not silently empty).
    assert {"scripts/test", ".ci/run", "scripts/regen"} <= names, names
    done = run(tool("shellcheck"), "--external-sources", *map(str, scripts))
    assert done.returncode == 0, done.stdout + done.stderr


def test_pre_commit_runs_the_pinned_tools():
    """.pre-commit-config.yaml is a second copy of the lint pins: the same versions."""
    import tomllib

    import yaml

    test_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["test"]
    pins = {r.split("==")[0]: r for r in test_extra if "==" in r}
    hooks = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"]
    used = {dep for hook in hooks for dep in hook.get("additional_dependencies", [])}
    assert used, "no pinned tool in .pre-commit-config.yaml"
    for dep in used:
        name = dep.split("==")[0]
        assert pins.get(name) == dep, f"{dep} in pre-commit, {pins.get(name)} in [test]"
