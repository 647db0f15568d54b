"""A rig with a throughput configuration, for the launcher's and tune's tests.

The shipped recipes are each rig's baseline; `tests/fixtures/throughput/`
holds a throughput configuration of rtx-pro-6000-tp4 (DP4 attention, EP4,
DSPARK depth 7, compact ragged verify, a tuned SPS table). `recipes_with_it`
copies the shipped recipes and the fixture into one folder that the recipe
loader reads instead of recipes/, so the code finds the rig's configurations
from whatever recipes exist, as it does for shipped ones.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "throughput" / "rtx-pro-6000-tp4-throughput.yaml"
NVIDIA_SMI = ROOT / "tests" / "fixtures" / "nvidia-smi"
RIG = "rtx-pro-6000-tp4"
THROUGHPUT = "rtx-pro-6000-tp4-throughput"


def recipes_with_it(folder: Path, text: str | None = None) -> Path:
    """recipes/*.yaml and the throughput fixture (or `text` in its place) in folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in (ROOT / "recipes").glob("*.yaml"):
        shutil.copy(path, folder / path.name)
    shutil.copy(ROOT / "recipes" / "recipe.schema.json", folder / "recipe.schema.json")
    (folder / FIXTURE.name).write_text(text or FIXTURE.read_text())
    return folder


def fake_nvidia_smi(folder: Path, machine: str = "rtx-pro-6000-x4") -> Path:
    """A folder with an `nvidia-smi` that prints a recorded answer (put it first on PATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat {NVIDIA_SMI / (machine + '.csv')}\n")
    script.chmod(0o755)
    return folder


def gpu_name(machine: str = "rtx-pro-6000-x4") -> str:
    return (NVIDIA_SMI / f"{machine}.csv").read_text().splitlines()[0].split(",")[0].strip()
