"""A third track and a recipe on it need no edit but the pins and the recipe:
`make regen` writes its compose service, its Kubernetes manifest and the docs
(issue 42: "a new rig is a recipe file plus `make regen`").

In a copy of the checkout, versions.env gets a track `next` (current's pins
under its own name: a track is a name for a sglang/flashinfer pair, and this
one needs no new parser description or patch folder) and recipes/ a rig that
runs only on it. The regen entries then rewrite exactly the files that
describe tracks and recipes, and the real Compose binary reads the new profile
on the new track's image.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.compose import ROOT, compose

COPIED = ("sm12x", "tools", "recipes", "patches", "deploy", "tests/golden")
COPIED_FILES = (
    "versions.env",
    "pyproject.toml",
    "README.md",
    "compose.yaml",
    ".env.example",
    "docs/recipes.md",  # support-matrix writes its status table too
)
ENTRIES = ("compose", "env-example", "k8s", "goldens", "support-matrix", "settings-table")
RIG = "rtx-pro-6000-tp4-next"


def checkout(tmp_path: Path) -> Path:
    home = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in COPIED:
        shutil.copytree(ROOT / name, home / name, ignore=ignore)
    for name in COPIED_FILES:
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, home / name)
    if (ROOT / "results").is_dir():  # the qualify bundles the support matrix reads
        shutil.copytree(ROOT / "results", home / "results", ignore=ignore)
    return home


def add_track(home: Path) -> None:
    path = home / "versions.env"
    text = path.read_text()
    text, n = re.subn(r"(?m)^SM12X_TRACKS=(.*)$", r"SM12X_TRACKS=\1,next", text)
    assert n == 1
    pins = re.findall(r"(?m)^CURRENT_(\w+)=(.*)$", text)
    assert pins
    path.write_text(text + "".join(f"NEXT_{key}={value}\n" for key, value in pins))


def add_recipe(home: Path) -> None:
    text = (home / "recipes" / "rtx-pro-6000-tp4.yaml").read_text()
    text, n = re.subn(r"(?m)^name: rtx-pro-6000-tp4$", f"name: {RIG}", text)
    assert n == 1
    assert not re.search(r"(?m)^tracks:", text)
    (home / "recipes" / f"{RIG}.yaml").write_text(text + "tracks: [next]\n")


def tree(home: Path) -> dict[str, str]:
    return {
        str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(home.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def regen(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [a for e in ENTRIES for a in ("--only", e)]
    return subprocess.run(
        [sys.executable, "-m", "tools.regen", *flags, *args],
        cwd=home,
        # The copy's sm12x and tools, not this checkout's (an editable install's
        # path entry comes after PYTHONPATH).
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": str(home)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_third_track_and_a_recipe_on_it_need_only_regen(tmp_path):
    home = checkout(tmp_path)
    add_track(home)
    add_recipe(home)
    before = tree(home)
    stale = regen(home, "--check")
    assert stale.returncode == 1, stale.stdout + stale.stderr
    done = regen(home)
    assert done.returncode == 0, done.stderr
    after = tree(home)
    changed = {p for p in after if before.get(p) != after[p]}
    assert changed == {
        "compose.yaml",  # the rig's service on the next track's image
        ".env.example",  # SM12X_TRACK's help names the tracks
        f"deploy/k8s/{RIG}.yaml",
        f"tests/golden/{RIG}.sh",
        "README.md",  # the support matrix and the settings table
        "docs/recipes.md",  # the status table, beside README's matrix
    }, changed
    assert regen(home, "--check").returncode == 0

    image = "ghcr.io/sm12x/sm12x:0.1.0-next"
    manifest = list(yaml.safe_load_all((home / "deploy" / "k8s" / f"{RIG}.yaml").read_text()))
    containers = manifest[0]["spec"]["template"]["spec"]["containers"]
    assert [c["image"] for c in containers] == [image]
    readme = (home / "README.md").read_text()
    assert f"`{RIG}`" in readme and "next (sglang" in readme

    (tmp_path / "model").mkdir()
    env = tmp_path / ".env"
    env.write_text(
        re.sub(
            r"(?m)^SM12X_MODEL_DIR=.*$",
            f"SM12X_MODEL_DIR={tmp_path / 'model'}",
            (home / ".env.example").read_text(),
        )
    )
    result = compose(
        "--profile", RIG, "config", "--format", "json",
        env_file=env, project_dir=home, file=home / "compose.yaml",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    service = json.loads(result.stdout)["services"][RIG]
    assert service["image"] == image
    assert service["environment"]["SM12X_TRACK"] == "next"
    assert service["environment"]["SM12X_RECIPE"] == RIG
