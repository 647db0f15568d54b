"""tools/worker_spy.py: the pytest workers' samples, by test and by function."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from tools import worker_spy

IN_TEST = (
    "<module> (<string>:1);pytest_runtestloop (xdist/remote.py:206);"
    "test_it (test_a.py:5);load_all (sm12x/recipe/load.py:240);check_event (yaml/parser.py:98)"
)
OUTSIDE = "<module> (<string>:1);Thread.run (threading.py:982);select (selectors.py:468)"


def test_the_report_sums_by_test_and_by_function_and_skips_other_lines(tmp_path):
    (tmp_path / "w1.txt").write_text(f"{IN_TEST} 30\n\n (\n{OUTSIDE} 10\n")
    (tmp_path / "w2.txt").write_text(f"{IN_TEST} 10\n")
    profile = worker_spy.Profile()
    for path in sorted(tmp_path.glob("w*.txt")):
        worker_spy.read(path.read_text().splitlines(), profile)
    assert profile.samples == 50
    assert profile.by_test["test_it (test_a.py:5)"] == 40
    assert profile.own["check_event (yaml/parser.py:98)"] == 40
    assert profile.including["load_all (sm12x/recipe/load.py:240)"] == 40
    assert not [f for f in profile.including if "xdist/" in f or "<string>" in f]
    text = worker_spy.report(tmp_path, top=5, rate=20)
    assert text.startswith("2.5 sampled s (50 samples at 20/s) in 2 workers")
    assert "| 2.0 | 80.0% | `test_it (test_a.py:5)` |" in text


def test_report_of_an_empty_folder_says_what_to_run(tmp_path):
    with pytest.raises(SystemExit, match="run `watch` during a run first"):
        worker_spy.report(tmp_path, top=5, rate=20)


def fake_worker(cwd):
    # xdist's own bootstrap line: it waits on stdin as a worker waits for its gateway
    return subprocess.Popen([sys.executable, "-c", worker_spy.WORKER_CMD],
                            stdin=subprocess.PIPE, cwd=cwd)  # fmt: skip


def test_watch_samples_each_worker_of_its_folder_until_they_end(tmp_path):
    root, other = tmp_path / "run", tmp_path / "other"
    root.mkdir()
    other.mkdir()
    # py-spy's part, as py-spy does it: -p's process sampled until it ends, then -o written
    spy = tmp_path / "py-spy"
    spy.write_text(
        "#!/bin/sh\n"
        'while [ "$1" != -o ]; do shift; done; out=$2; pid=$4\n'
        'while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done\n'
        f'echo "{IN_TEST} 7" > "$out"\n'
    )
    spy.chmod(0o755)
    mine, theirs = fake_worker(root), fake_worker(other)
    try:
        assert worker_spy.workers(root) == [mine.pid]
        ended: list[int] = []
        folder = tmp_path / "spy"
        watching = threading.Thread(
            target=lambda: ended.append(worker_spy.watch(root, folder, 20, str(spy), 30))
        )
        watching.start()
        while not (folder / f"w{mine.pid}.log").exists():
            assert watching.is_alive()
            threading.Event().wait(0.1)
        mine.kill()
        mine.wait()
        watching.join(timeout=30)
        assert ended == [0]
        assert [p.name for p in folder.glob("*.txt")] == [f"w{mine.pid}.txt"]
        assert "| 0.3 | 100.0% | `test_it (test_a.py:5)` |" in worker_spy.report(folder, 3, 20)
    finally:
        for proc in (mine, theirs):
            proc.kill()
            proc.wait()


def test_watch_without_a_worker_ends_saying_so(tmp_path, capsys):
    assert worker_spy.watch(tmp_path, tmp_path / "spy", 20, "py-spy", wait_s=0) == 1
    assert "no pytest-xdist worker" in capsys.readouterr().err
