"""The other node of a multi-node recipe (the two-node DGX Spark).

qualify runs on the head node (rank 0, which serves the API). For each other
node it renders the exact command that starts it, from the code compose and
launch use: the recipe's compose service for that node
(sm12x.deploy.compose: `--profile NAME-node1 up -d`) with the head's address,
or, when the head boots with `--boot-command`, `sm12x launch` with that node's
rank and the head's address (the variables LaunchContext.from_settings reads).
It prints the command for the rig owner to run there, or with `--ssh HOST`
runs it over ssh (BatchMode, the command shell-quoted). Either way the join
is seen through the head itself: sglang's head serves /health only once every
rank has joined, which verify's boot waits for, bounded by --deadline.

Its GPUs (model, count, driver) are read over ssh for the provenance; without
--ssh they are unknown, said so. Host names and addresses never reach the
bundle: the ssh host and the head's address join the scrubber's secrets.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from sm12x.bench import provenance
from sm12x.deploy import compose
from sm12x.launch.render import HEAD_ADDR_ENV, NODE_RANK_ENV
from sm12x.qualify.bundle import NodeFacts, Provenance
from sm12x.recipe import Recipe
from sm12x.settings import Loaded

SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=20"]
GPU_QUERY = "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader"
TIMEOUT = 30.0


def command(
    recipe: Recipe, rank: int, loaded: Loaded, head_addr: str,
    compose_file: str | None, compose_boot: bool,
) -> list[str]:  # fmt: skip
    """The argv that starts node `rank` of `recipe` (an `env` prefix and the command)."""
    if compose_boot:
        service = compose.service(compose.profiles(recipe)[rank], None, loaded, compose_file)
        return ["env", f"{HEAD_ADDR_ENV}={head_addr}", *service.up]
    return [
        "env", f"{NODE_RANK_ENV}={rank}", f"{HEAD_ADDR_ENV}={head_addr}",
        "sm12x", "launch", "--recipe", recipe.name,
    ]  # fmt: skip


def down(recipe: Recipe, rank: int, loaded: Loaded, compose_file: str | None) -> list[str]:
    return compose.service(compose.profiles(recipe)[rank], None, loaded, compose_file).down


def ssh_argv(host: str, argv: list[str]) -> list[str]:
    # ssh joins its arguments into one line for the remote shell: quote them here.
    return ["ssh", *SSH_OPTIONS, host, shlex.join(argv)]


@dataclass
class Others:
    """The other nodes of one boot: their commands, and the ssh sessions running them."""

    recipe: Recipe
    loaded: Loaded
    head_addr: str
    compose_file: str | None
    compose_boot: bool
    ssh_host: str | None
    say: Callable[[str], None]
    running: list[tuple[int, subprocess.Popen, IO[bytes]]] = field(default_factory=list)

    def ranks(self) -> range:
        return range(1, self.recipe.hardware.nodes)

    def start(self) -> None:
        for rank in self.ranks():
            argv = command(
                self.recipe, rank, self.loaded, self.head_addr, self.compose_file,
                self.compose_boot,
            )  # fmt: skip
            if self.ssh_host is None:
                self.say(f"node {rank}: on the other node run: {shlex.join(argv)}")
                continue
            log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
            proc = subprocess.Popen(
                ssh_argv(self.ssh_host, argv), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            self.running.append((rank, proc, log))
            self.say(f"node {rank}: started over ssh: {shlex.join(argv)}")

    def why_not_joined(self) -> str:
        """What the ssh sessions say, for a node that did not join."""
        said = []
        for rank, proc, log in self.running:
            code = proc.poll()
            log.seek(0)
            tail = log.read().decode(errors="replace").strip().splitlines()[-1:]
            state = "still running" if code is None else f"ssh exited {code}"
            said.append(f"node {rank}: {state}" + (f" ({tail[0][:200]})" if tail else ""))
        return "; ".join(said) or "started by hand: check it runs there"

    def stop(self) -> None:
        for rank, proc, log in self.running:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            log.close()
            if self.compose_boot and self.ssh_host:
                argv = ssh_argv(
                    self.ssh_host, down(self.recipe, rank, self.loaded, self.compose_file)
                )
                provenance.run(argv, TIMEOUT)
        self.running = []


def secrets(ssh_host: str | None, head_addr: str | None) -> list[str]:
    """What names the nodes (kept out of the bundle): the ssh host, the head's host."""
    found = []
    if ssh_host:
        found += [ssh_host, ssh_host.rsplit("@", 1)[-1]]
    if head_addr:
        found.append(str(head_addr).rsplit(":", 1)[0].strip("[]"))
    return found


def facts(recipe: Recipe, prov: Provenance, ssh_host: str | None) -> list[NodeFacts]:
    """Every node's GPUs: the head's from its own provenance, the others' over ssh."""
    if not recipe.is_multinode:
        return []
    head = NodeFacts(
        rank=0, gpus=list(prov.environment.gpus), gpu_count=prov.gpu_count, driver=prov.driver
    )
    out = [head]
    for rank in range(1, recipe.hardware.nodes):
        node = NodeFacts(rank=rank, gpus=[], gpu_count=0, driver=None)
        if ssh_host is None:
            node.unknown = "started by hand (no --ssh): its GPUs were not read"
        else:
            text, problem = provenance.run(ssh_argv(ssh_host, shlex.split(GPU_QUERY)), TIMEOUT)
            rows = [[p.strip() for p in line.split(",")] for line in (text or "").splitlines()]
            rows = [r for r in rows if len(r) == 2 and r[0]]
            if not rows:
                node.unknown = f"nvidia-smi over ssh: {problem or 'no GPU listed'}"
            node.gpus = [r[0] for r in rows]
            node.gpu_count = len(rows)
            node.driver = rows[0][1] if rows else None
        out.append(node)
    return out
