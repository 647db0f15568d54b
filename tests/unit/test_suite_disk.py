"""tools/suite_disk.py: a run's disk peak and what held it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import suite_disk

REPO = Path(__file__).resolve().parents[2]
GB = suite_disk.GB


def test_watch_records_the_used_space_and_each_entry_s_size(tmp_path):
    folder = tmp_path / "cache"
    (folder / "venv").mkdir(parents=True)
    (folder / "venv" / "big").write_bytes(b"\1" * (3 << 20))
    (folder / "small").write_bytes(b"x")
    out = tmp_path / "samples.jsonl"
    watcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tools.suite_disk",
            "watch",
            str(out),
            "--path",
            str(tmp_path),
            "--folders",
            str(folder),
            str(tmp_path / "absent"),
            "--interval",
            "0.1",
            "--every",
            "2",
        ],
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            not out.exists() or len(out.read_text().splitlines()) < 4
        ):
            time.sleep(0.1)
    finally:
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(timeout=30) == 0
    samples = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(samples) >= 4
    assert all(s["used"] > 0 for s in samples)
    with_sizes = [s for s in samples if "sizes" in s]
    assert len(with_sizes) == (len(samples) + 1) // 2  # every second sample, the first included
    sizes = with_sizes[0]["sizes"]
    assert set(sizes) == {str(folder / "venv"), str(folder / "small")}
    assert sizes[str(folder / "venv")] >= 3 << 20
    assert sizes[str(folder / "small")] < 1 << 20


def sample(minute: float, used_gb: float, sizes: dict[str, float] | None = None) -> dict:
    s: dict = {"t": 1000 + minute * 60, "used": int(used_gb * GB)}
    if sizes is not None:
        s["sizes"] = {name: int(gb * GB) for name, gb in sizes.items()}
    return s


def test_report_names_the_peak_and_the_breakdown_sampled_before_it():
    samples = [
        sample(0, 20, {"/c/venv": 0.1}),
        sample(10, 30, {"/c/venv": 3.0, "/tmp/pytest-of-root": 4.5, "/c/docker": 2.0}),
        sample(12, 42.4),
        sample(14, 35, {"/c/venv": 3.0, "/tmp/pytest-of-root": 0.1, "/c/docker": 9.0}),
        sample(20, 31),
    ]
    text = suite_disk.report(samples, top=2)
    assert "used at the start 20.0 GB" in text
    assert "peak: 22.4 GB over the start, 12.0 min in; at the end 11.0 GB over it" in text
    # The breakdown is the last one taken at or before the peak, not the one after.
    assert "sampled 2.0 min before the peak (the 2 largest entries):" in text
    assert "4.50 GB  /tmp/pytest-of-root" in text and "3.00 GB  /c/venv" in text
    assert "/c/docker" not in text
    assert "  12.0 min   22.4 GB" in text


def test_report_refuses_what_is_not_a_run_s_samples(tmp_path):
    with pytest.raises(SystemExit, match="no samples"):
        suite_disk.load(["", "  "])
    done = subprocess.run(
        [sys.executable, "-m", "tools.suite_disk", "report", str(tmp_path / "none.jsonl")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "none.jsonl does not exist: give the file `watch` wrote" in done.stderr
