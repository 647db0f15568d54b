"""`sm12x doctor`: is this machine ready to boot a recipe? Before the 30-minute wait.

Checks the GPUs (model, count, compute capability 12.0/12.1, driver,
memory), the recipe SM12X_RECIPE=auto would pick, Docker with Compose v2 and the
NVIDIA container runtime, the image, the model folder (config, index, every
shard present and of the size its own header says), free disk, shared
memory, and on a DGX Spark pair: RDMA ports, the NCCL/Gloo interfaces, the
GID index, the peer and the same image on both nodes; on multi-GPU rigs the
P2P matrix, PCIe links, IOMMU/ACS and power limits; on a DGX Spark the CMA
that kexec handover leaves, driver memory options and the memory beside
sglang's pool. Each check prints a
verdict and a fix. Exit status: 0 when no required check failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sm12x import __version__, settings
from sm12x.cli import Command
from sm12x.doctor.checks import Check, Doctor, Options
from sm12x.doctor.host import Host
from sm12x.fields import HostName, NonNegativeFloat, PositiveFloat, option_type

SCHEMA_ID = "sm12x-doctor/1"
# Read from the environment or .env as compose passes them (DGX Spark pair).
SITE_VARIABLES = ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_GID_INDEX")
STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def make_host() -> Host:
    """The machine doctor looks at (tests replace this)."""
    return Host()


def report(checks: list[Check], recipe: str | None) -> dict:
    return {
        "schema": SCHEMA_ID,
        "sm12x_version": __version__,
        "recipe": recipe,
        "passed": not any(c.failed for c in checks),
        "checks": [c.to_json() for c in checks],
    }


def table(checks: list[Check], console: Console) -> None:
    """check | verdict | what was found, with the fix on the line below it."""
    out = Table(box=box.SIMPLE_HEAVY, show_lines=False)
    out.add_column("check", no_wrap=True)
    out.add_column("verdict", no_wrap=True)
    out.add_column("found / fix", overflow="fold")
    for check in checks:
        # Warnings never fail doctor; say so only for a failure that does not count.
        verdict = check.verdict + (
            " (optional)" if check.verdict == "fail" and not check.required else ""
        )
        found = Text(check.detail)
        if check.fix:
            found.append("\nfix: ", style="bold")
            found.append(check.fix)
        out.add_row(check.title, Text(verdict, style=STYLE[check.verdict]), found)
    console.print(out)


def run(args: argparse.Namespace) -> int:
    host = make_host()
    # The settings as the machine doctor looks at has them (tests record one).
    loaded = settings.from_args(args, "doctor", environ=host.environ)
    if args.explain:
        sys.stdout.write(settings.explain(loaded, "doctor", SITE_VARIABLES))
        return 0
    options = Options(
        loaded=loaded,
        peer=args.peer,
        peer_report=args.peer_report,
        min_free_gib=args.min_free_gib,
        verify_hashes=args.hash,
        ssh=not args.no_ssh,
    )
    host.timeout = args.timeout
    err = Console(stderr=True)
    if args.json:
        doctor = Doctor(host, options)
        checks = doctor.run()
    else:
        with err.status("checking") as status:
            doctor = Doctor(
                host, options, progress=lambda label: status.update(f"checking {label}")
            )
            checks = doctor.run()
    data = report(checks, doctor.recipe.name if doctor.recipe else None)
    if args.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        console = Console()
        table(checks, console)
        failed = [c for c in checks if c.failed]
        warned = [c for c in checks if c.verdict == "warn"]
        if failed:
            console.print(
                Text(
                    f"not ready: {len(failed)} required check(s) failed "
                    f"({', '.join(c.id for c in failed)})",
                    style="bold red",
                )
            )
        else:
            recipe = f" for {data['recipe']}" if data["recipe"] else ""
            console.print(
                Text(
                    f"ready{recipe}" + (f", {len(warned)} warning(s)" if warned else ""),
                    style="green",
                )
            )
    return 0 if data["passed"] else 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--peer",
        type=option_type(HostName),
        help="DGX Spark pair: the other node's address on the RoCE link "
        "(default SM12X_HEAD_ADDR on the second node)",
    )
    parser.add_argument(
        "--peer-report",
        type=Path,
        metavar="JSON",
        help="the other node's `sm12x doctor --json`, to compare images",
    )
    parser.add_argument(
        "--no-ssh", action="store_true", help="do not ask the peer for its image over ssh"
    )
    parser.add_argument(
        "--hash",
        action="store_true",
        help="also sha256 every shard against the download's metadata (slow)",
    )
    parser.add_argument(
        "--min-free-gib",
        type=option_type(NonNegativeFloat),
        default=10.0,
        help="free disk under Docker's data root below which the check fails",
    )
    parser.add_argument(
        "--timeout",
        type=option_type(PositiveFloat),
        default=20.0,
        help="seconds each command may take (default 20)",
    )
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    settings.add_arguments(parser, "doctor")


COMMAND = Command(
    name="doctor",
    help="check this machine before a boot: GPUs, recipe, Docker, model files, disk, shm, RoCE",
    description=__doc__.split("\n\n")[0].replace("\n", " "),
    add_arguments=add_arguments,
    run=run,
)
