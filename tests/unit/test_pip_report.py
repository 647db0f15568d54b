"""tests/support/pip_report.py: pip's own dry-run report becomes uv's exact requirements."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import pip_report


def a_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal, valid pure-Python wheel (pip installs and reports it like any other)."""
    dist = f"{name}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    files = {
        f"{name}/__init__.py": b"",
        f"{dist}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires)
        ).encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as archive:
        for arcname, data in files.items():
            archive.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arcname},sha256={digest},{len(data)}")
        record.append(f"{dist}.dist-info/RECORD,,")
        archive.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def test_pip_s_real_report_becomes_exact_urls_and_hashes(tmp_path):
    # pip resolves a dependency it was not named (alpha needs beta): the lines hold
    # both, each the exact file pip chose, with that file's sha256.
    alpha = a_wheel(tmp_path, "alpha", "1.0", ("beta>=2",))
    a_wheel(tmp_path, "beta", "1.0")
    beta2 = a_wheel(tmp_path, "beta", "2.1")
    report = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--dry-run", "--ignore-installed", "--no-index", "--find-links", str(tmp_path),
         "--report", str(report), "alpha"],
        check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    got = sorted(pip_report.lines(json.loads(report.read_text())))
    assert got == sorted(
        f"{wheel.name.split('-')[0]} @ {wheel.as_uri()} --hash=sha256:"
        + hashlib.sha256(wheel.read_bytes()).hexdigest()
        for wheel in (alpha, beta2)
    )


def entry(name: str, info: dict) -> dict:
    return {"metadata": {"name": name, "version": "1"}, "download_info": info}


def test_an_editable_becomes_dash_e_and_its_path():
    report = {
        "version": "1",
        "install": [
            entry("sm12x", {"url": "file:///work/my%20repo", "dir_info": {"editable": True}})
        ],
    }
    assert pip_report.lines(report) == ["-e /work/my repo"]


@pytest.mark.parametrize(
    "report, says",
    [
        ({"version": "0", "install": []}, "version '0'"),
        ({"version": "1", "install": []}, "installs nothing"),
        (
            {"version": "1", "install": [entry("x", {"url": "file:///src/x", "dir_info": {}})]},
            "not editable",
        ),
        (
            {
                "version": "1",
                "install": [entry("x", {"url": "https://h/x.whl", "archive_info": {}})],
            },
            "no sha256",
        ),
        (
            {
                "version": "1",
                "install": [entry("x", {"url": "git+https://h/x", "vcs_info": {"vcs": "git"}})],
            },
            "no sha256",
        ),
        (
            {
                "version": "1",
                "install": [entry("x", {"url": "https://h/x", "dir_info": {"editable": True}})],
            },
            "not a local folder",
        ),
    ],
)
def test_what_it_cannot_pin_is_one_error(report, says):
    with pytest.raises(pip_report.ReportError, match=says):
        pip_report.lines(report)


def test_the_command_exits_1_with_one_line_on_a_bad_report(tmp_path):
    bad = tmp_path / "report.json"
    bad.write_text("{not json")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.pip_report", str(bad)],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and str(bad) in proc.stderr
