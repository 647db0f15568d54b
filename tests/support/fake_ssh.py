"""A fake `ssh` for qualify's two-node path (put its folder first on PATH).

It records its argv (one JSON line per call, to $FAKE_SSH_LOG), checks the
options qualify must pass (BatchMode), then runs the remote command's stand-in:
for nvidia-smi a GB10's answer; for the node's start command the mock's
node-1 stand-in (python -m sm12x.mock.rendezvous), joining at the head address
and rank the command itself carries, so a wrong address or rank never joins.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

SCRIPT = """#!/bin/sh
exec {python} {this} "$@"
"""
GB10 = "NVIDIA GB10, 580.95.05"
# What qualify asks node 1 for (sm12x.qualify.nodes.GPU_QUERY, written out here).
GPU_QUERY = "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader"


def install(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ssh"
    path.write_text(SCRIPT.format(python=sys.executable, this=Path(__file__).resolve()))
    path.chmod(0o755)
    return folder


def main(argv: list[str]) -> int:
    with open(os.environ["FAKE_SSH_LOG"], "a") as log:
        log.write(json.dumps(argv) + "\n")
    if "BatchMode=yes" not in argv:
        print("fake ssh: not BatchMode", file=sys.stderr)
        return 255
    remote = shlex.split(argv[-1])  # ssh hands the remote shell one line
    if remote[0] == "nvidia-smi":
        print(GB10)
        return 0
    env = dict(a.split("=", 1) for a in remote[1:] if "=" in a and a.startswith("SM12X_"))
    rank = env.get("SM12X_NODE_RANK")
    if rank is None:  # the compose form: the rank is the profile's
        profile = remote[remote.index("--profile") + 1]
        rank = profile.rsplit("-node", 1)[1]
    os.execv(
        sys.executable,
        [sys.executable, "-m", "sm12x.mock.rendezvous", env["SM12X_HEAD_ADDR"], rank],
    )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
