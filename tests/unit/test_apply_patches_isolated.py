"""scripts/apply-patches needs only the standard library and its own files.

The image runs it before sm12x is installed, from a copy of the wrapper and
sm12x/patches' standard-library modules (the Dockerfile's COPY lines). Here
those files alone are copied to a temporary folder and run with `python -I -S`
(no site-packages, no environment, no current folder): on a small sglang tree
of its own they apply a one-patch series, record it, and pass --check. No
sm12x/__init__.py is among them, so the wrapper cannot lean on it either.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.cli import ROOT

PATCH = (
    "--- a/sglang/mod.py\n"
    "+++ b/sglang/mod.py\n"
    "@@ -1,3 +1,3 @@\n"
    " def answer():\n"
    "-    return 41\n"
    "+    return 42  # sm12x-demo\n"
    " \n"
)


def copied_files() -> list[str]:
    """What the Dockerfile copies for apply-patches (relative to the checkout)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    files = []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and any(w.startswith("/opt/sm12x/sm12x/patches") for w in words):
            files += [w for w in words[1:-1] if not w.startswith("--")]
    return files


def demo_tree(tmp_path: Path) -> tuple[Path, Path]:
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "mod.py").write_text("def answer():\n    return 41\n\n")
    info = site / "sglang-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n")
    patches = tmp_path / "patches"
    (patches / "9.9.9").mkdir(parents=True)
    (patches / "9.9.9" / "0001-demo.patch").write_text(PATCH)
    (patches / "patches.toml").write_text(
        '[[patch]]\nfile = "0001-demo.patch"\ntitle = "demo"\nupstream = "none"\n'
        'target = "sglang/mod.py"\nsglang = ["9.9.9"]\npresent = "sm12x-demo"\n'
        'retire_when = "never"\nretire_sglang = "not yet"\n'
    )
    return site, patches


def test_the_dockerfile_copies_the_wrapper_and_every_module_it_imports():
    files = copied_files()
    assert "sm12x/patches/apply.py" in files and "sm12x/patches/rules.py" in files
    # Every sm12x module the copied files import is copied with them.
    for name in files:
        for module in re.findall(r"^from (sm12x[\w.]*) import", (ROOT / name).read_text(), re.M):
            path = module.replace(".", "/")
            assert f"{path}.py" in files or f"{path}/__init__.py" in files, (name, module)
    assert "sm12x/__init__.py" not in files


def test_runs_with_python_isolated_and_only_its_own_files(tmp_path):
    image = tmp_path / "opt"
    (image / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "apply-patches", image / "scripts" / "apply-patches")
    for name in copied_files():
        (image / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, image / name)
    site, patches = demo_tree(tmp_path)
    command = [sys.executable, "-I", "-S", str(image / "scripts" / "apply-patches")]
    args = ["--site-packages", str(site), "--patches", str(patches)]

    done = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "sglang 9.9.9: 0001-demo.patch: applied" in done.stdout
    assert "return 42  # sm12x-demo" in (site / "sglang" / "mod.py").read_text()
    record = json.loads((site / "sglang" / ".sm12x-patches.json").read_text())
    assert record["sglang"] == "9.9.9" and record["patches"][0]["file"] == "0001-demo.patch"

    check = subprocess.run(
        [*command, *args, "--check"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert check.returncode == 0 and "already applied" in check.stdout, check.stderr

    # Without its package beside it: one line saying what to copy, no traceback.
    shutil.rmtree(image / "sm12x")
    bare = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert bare.returncode == 1 and "Traceback" not in bare.stderr
    assert bare.stderr.count("\n") == 1 and "apply.py is missing" in bare.stderr
