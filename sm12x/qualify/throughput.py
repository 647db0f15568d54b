"""The throughput phase's own steps: tune (sm12x tune as it stands, two phases)
and the relaunch of the rig's throughput configuration with the table it
wrote. verify, the full-load soak and bench then run again (sm12x.qualify.steps).

tune runs as its own command (`python -m sm12x.cli tune`), its output shown
here: with the compose boot it boots the profiling service and relaunches it
between its phases itself; with --tune-boot-command it stops after phase 1
(exit 3) and names the 1-D table, and qualify runs it again with
`--sps-table TABLE` added to that command, as tune tells a user to.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time

from sm12x.qualify.boot import Booter
from sm12x.qualify.bundle import Step
from sm12x.recipe import Recipe

PHASE_TWO = 3  # sm12x tune's exit status after phase 1 (sm12x.tune.main.PHASE_TWO)
TABLE = re.compile(r"--sps-table (\S+?\.json)")
# Settings qualify was given that tune reads the same way.
PASSED_ON = ("port", "bind", "cache_dir", "track", "env_file", "model_dir")


def tune_argv(args: argparse.Namespace, recipe: Recipe, left: float) -> list[str]:
    argv = [sys.executable, "-m", "sm12x.cli", "tune", "--recipe", recipe.name]
    argv += ["--deadline", str(max(1, int(left)))]
    for name in PASSED_ON:
        value = getattr(args, name, None)
        if value not in (None, ""):
            argv += ["--" + name.replace("_", "-"), str(value)]
    if args.compose_file:
        argv += ["--compose-file", args.compose_file]
    return argv + shlex.split(args.tune_args or "")


def _run(argv: list[str], left: float, say) -> tuple[int, list[str]]:
    said: list[str] = []
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            said.append(line)
            if line.startswith("sm12x tune:"):
                say(f"tune: {line.removeprefix('sm12x tune:').strip()}")
        try:
            code = proc.wait(timeout=max(1.0, left) + 120)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise TimeoutError("throughput/tune") from None
    return code, said


def tune(args: argparse.Namespace, step: Step, recipe: Recipe, booter: Booter, scrub, say) -> Step:
    """sm12x tune for the throughput recipe, every phase; the served server is down first."""
    booter.stop()
    argv = tune_argv(args, recipe, booter.deadline_at - time.monotonic())
    command = args.tune_boot_command
    code, said = _run(
        argv + (["--boot-command", command] if command else []),
        booter.deadline_at - time.monotonic(),
        say,
    )
    if code == PHASE_TWO and command:
        found = [m.group(1) for line in said for m in TABLE.finditer(line)]
        if not found:
            step.problems.append("tune finished phase 1 but named no table to relaunch with")
        else:
            relaunch = f"{command} --sps-table {shlex.quote(found[-1])}"
            say(f"tune: phase 2, the profiling server relaunched with {found[-1]}")
            argv = tune_argv(args, recipe, booter.deadline_at - time.monotonic())
            code, said = _run(
                argv + ["--boot-command", relaunch], booter.deadline_at - time.monotonic(), say
            )
    if code != 0 and not step.problems:
        last = [line for line in said if "error:" in line] or said[-1:] or ["no output"]
        step.problems.append(scrub.text(f"sm12x tune exited {code}: {last[-1]}"))
    step.checks = {"tune": "pass" if code == 0 else "fail"}
    step.verdict = "pass" if code == 0 and not step.problems else "fail"
    return step


def relaunch(step: Step, recipe: Recipe, booter: Booter) -> Step:
    """Boot the throughput configuration (it reads the table tune wrote)."""
    from sm12x.errors import UserError

    try:
        booter.start("throughput", recipe)
    except UserError as exc:
        step.problems.append(exc.message)
    step.verdict = "fail" if step.problems else "pass"
    return step
