"""tools/test_cpu.py: each test's CPU, its process's own and its children's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools import test_cpu

REPO = Path(__file__).resolve().parents[2]

BURN = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
TESTS = f"""
import subprocess, sys, time

def burn():
{"".join("    " + line + chr(10) for line in BURN.splitlines())}

def test_in_process():
    burn()

def test_in_a_child():
    subprocess.run([sys.executable, "-c", {BURN!r}], check=True, timeout=60)

def test_waits():
    time.sleep(0.3)
"""


def _run(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    (tmp_path / "test_burn.py").write_text(TESTS)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tools.test_cpu", "-p", "no:cacheprovider",
         "-p", "no:randomly", str(tmp_path / "test_burn.py"), "--rootdir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=env,
    )  # fmt: skip


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (test_cpu.ENV, "PYTEST_XDIST_WORKER")}
    return {**env, **extra}


def test_each_test_gets_its_own_and_its_children_s_cpu(tmp_path):
    rows_at = tmp_path / "rows"
    done = _run(tmp_path, _env(**{test_cpu.ENV: str(rows_at)}))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["id"].split("::")[-1]: r for r in test_cpu.rows(rows_at)}
    assert set(rows) == {"test_in_process", "test_in_a_child", "test_waits"}
    assert rows["test_in_process"]["own"] >= 0.35 and rows["test_in_process"]["kids"] < 0.1
    assert rows["test_in_a_child"]["kids"] >= 0.35 and rows["test_in_a_child"]["own"] < 0.3
    assert rows["test_waits"]["wall"] >= 0.3
    assert rows["test_waits"]["own"] + rows["test_waits"]["kids"] < 0.2
    table = test_cpu.report(list(rows.values()), 10)
    # The two burners lead the test table, the sleeper last.
    order = [line for line in table.splitlines() if "test_burn.py::" in line]
    assert "test_waits" in order[-1] and "test_waits" not in " ".join(order[:2])


def test_without_the_variable_it_writes_nothing(tmp_path):
    done = _run(tmp_path, _env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(tmp_path.rglob("*.jsonl"))


def test_report_on_an_empty_folder_says_how_to_get_rows(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tools.test_cpu", "report", str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 1
    assert f"run the tests with {test_cpu.ENV}={tmp_path}" in done.stderr
