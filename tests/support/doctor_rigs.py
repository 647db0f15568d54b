"""Recorded machines for `sm12x doctor`: a Host whose commands answer from
fixtures and whose /proc, /sys and /dev/shm are a folder.

rig(tmp, "rtx-pro-6000-x4.csv") is a healthy 4x RTX PRO 6000 box: the
recorded nvidia-smi answer, Docker 28 with Compose v2 and the `nvidia`
runtime, the image pulled, a complete checkpoint (tests/support/checkpoint.py),
1 TB free under /var/lib/docker and a 64 GiB /dev/shm. spark_rig() adds the
DGX Spark pair: recorded ibv_devinfo, a /sys tree mapping RDMA devices to
interfaces, .env's NCCL settings, a peer that answers. Tests then break one
thing at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sm12x.doctor.checks import Doctor, Options
from sm12x.doctor.host import Host, Output
from sm12x.launch import gpus as gpu_query
from tests.support.checkpoint import write_checkpoint
from tests.support.cli import ROOT

NVIDIA_SMI = ROOT / "tests" / "fixtures" / "nvidia-smi"
IBV = ROOT / "tests" / "fixtures" / "ibv_devinfo"
PCIE = ROOT / "tests" / "fixtures" / "pcie"
SPARK = ROOT / "tests" / "fixtures" / "spark"
# A Gen5 x16 link as sysfs reads it (Documentation/ABI/testing/sysfs-bus-pci).
GEN5_X16 = ("32.0 GT/s PCIe", "16")
GIB = 1024**3
IMAGE_ID = "sha256:" + "a1" * 32
IMAGE_DIGEST = "ghcr.io/sm12x/sm12x@sha256:" + "d4" * 32
SPARK_HCAS = ("rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1")
SPARK_NETDEVS = {
    "rocep1s0f0": "enp1s0f0np0",
    "rocep1s0f1": "enp1s0f1np1",
    "roceP2p1s0f0": "enP2p1s0f0np0",
    "roceP2p1s0f1": "enP2p1s0f1np1",
}

PACKAGES = ROOT / "tests" / "fixtures" / "packages"
# What Docker's buildx plugin prints (the format of buildx 0.17; the help is cut).
BUILDX_VERSION = "github.com/docker/buildx v0.17.1 257815a\n"
BAKE_HELP = (
    "\nUsage:  docker buildx bake [OPTIONS] [TARGET...]\n\nBuild from a file\n\n"
    "Aliases:\n  docker buildx bake, docker buildx f\n\nOptions:\n"
    "  -f, --file stringArray         Build definition file\n"
    '      --load                     Shorthand for "--set=*.output=type=docker"\n'
    "      --print                    Print the options without building\n"
)

Answer = Output | str | Callable[[tuple[str, ...]], Output]


@dataclass
class FakeHost(Host):
    commands: dict[tuple[str, ...], Answer] = field(default_factory=dict)
    tools: set[str] = field(default_factory=set)
    disks: dict[str, tuple[int, int]] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def which(self, name: str) -> str | None:
        return f"/usr/bin/{name}" if name in self.tools else None

    def run(self, argv, timeout=None) -> Output:
        argv = tuple(argv)
        self.calls.append(argv)
        if argv[0] not in self.tools:
            return Output(argv, error=f"{argv[0]} is not installed (not on PATH)")
        if argv[:2] == ("apt-cache", "policy") and len(argv) > 3:
            return self.apt_policy(argv)
        matches = [key for key in self.commands if argv[: len(key)] == key]
        if not matches:
            return Output(argv, stderr=f"no recording for {' '.join(argv)}", returncode=1)
        answer = self.commands[max(matches, key=len)]
        if callable(answer):
            return answer(argv)
        if isinstance(answer, str):
            return Output(argv, stdout=answer, returncode=0)
        return answer

    def apt_policy(self, argv: tuple[str, ...]) -> Output:
        """`apt-cache policy A B ...` from the recordings of one name each: their
        blocks in argv's order (what the real tool prints, held by
        test_doctor_packages on this machine's apt-cache), a name without a
        recording as one no source knows (nothing printed)."""
        outs = []
        for name in argv[2:]:
            single = (*argv[:2], name)
            if any(single[: len(key)] == key for key in self.commands):
                outs.append(self.run(single))
                self.calls.pop()
        bad = next((o for o in outs if not o.ok), None)
        if bad is not None:
            return Output(argv, bad.stdout, bad.stderr, bad.returncode, bad.error)
        return Output(argv, stdout="".join(o.stdout for o in outs), returncode=0)

    def disk(self, path):
        return self.disks.get(str(path))

    def answer(self, prefix: tuple[str, ...], value: Answer) -> None:
        self.commands[prefix] = value

    def nvidia_smi(self, text: str) -> None:
        """What sm12x's nvidia-smi query answers."""
        self.answer(tuple(gpu_query.QUERY), text)


def failing(stderr: str, code: int = 1) -> Output:
    return Output((), stderr=stderr, returncode=code)


def rig(tmp: Path, nvidia_smi: str, env: dict[str, str] | None = None) -> FakeHost:
    root = tmp / "root"
    for folder in ("var/lib/docker", "dev/shm", "proc"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "proc" / "meminfo").write_text(
        "MemTotal:       263842104 kB\nMemAvailable:   250000000 kB\nSwapTotal:       8388604 kB\n"
    )
    model = write_checkpoint(tmp / "model")
    host = FakeHost(
        # No .env unless a test writes one (the checkout's must not leak in).
        environ={
            "PATH": "/usr/bin",
            "SM12X_MODEL_DIR": str(model),
            "SM12X_ENV_FILE": os.devnull,
            **(env or {}),
        },
        root=root,
        tools={"nvidia-smi", "docker", "nvidia-container-runtime-hook"},
        disks={"/var/lib/docker": (2000 * GIB, 900 * GIB), "/dev/shm": (64 * GIB, 63 * GIB)},
    )
    host.nvidia_smi((NVIDIA_SMI / nvidia_smi).read_text())
    host.answer(("docker", "version"), "28.0.1\n")
    host.answer(("docker", "compose", "version"), "Docker Compose version v2.30.3\n")
    host.answer(("docker", "buildx", "version"), BUILDX_VERSION)
    host.answer(("docker", "buildx", "bake", "--help"), BAKE_HELP)
    host.answer(
        ("docker", "info"),
        json.dumps(
            {
                "Runtimes": {
                    "runc": {"path": "runc"},
                    "nvidia": {"path": "nvidia-container-runtime"},
                },
                "DockerRootDir": "/var/lib/docker",
            }
        )
        + "\n",
    )
    host.answer(("docker", "image", "inspect"), f'{IMAGE_ID} ["{IMAGE_DIGEST}"]\n')
    pcie_rig(host)
    return host


def pcie_rig(
    host: FakeHost,
    p2p: str = "p2p-ok-x8.txt",
    pci: str = "pci-x8.csv",
    lspci: str = "lspci-acs-off.txt",
    cmdline: str = "cmdline-default.txt",
    links: dict[int, tuple[str, str]] | None = None,
    iommu_groups: int = 0,
    iommu_type: str | None = None,
) -> FakeHost:
    """The PCIe facts (tests/fixtures/pcie/): the P2P matrix, the bus ids and
    power limits, lspci's ACS lines, /proc/cmdline, the IOMMU groups, and each
    GPU's link in sysfs under its port (Gen5 x16 unless `links` says otherwise)."""
    from sm12x.doctor import pcie

    host.tools.add("lspci")
    host.answer(tuple(pcie.P2P_QUERY), (PCIE / p2p).read_text())
    host.answer(tuple(pcie.PCI_QUERY), (PCIE / pci).read_text())
    host.answer(("lspci",), (PCIE / lspci).read_text())
    (host.root / "proc").mkdir(parents=True, exist_ok=True)
    (host.root / "proc" / "cmdline").write_text((PCIE / cmdline).read_text())
    groups = host.root / "sys" / "kernel" / "iommu_groups"
    groups.mkdir(parents=True, exist_ok=True)
    for group in range(iommu_groups):
        (groups / str(group)).mkdir(exist_ok=True)
        if iommu_type is not None:  # Linux 5.11+: DMA, DMA-FQ or identity
            (groups / str(group) / "type").write_text(iommu_type + "\n")
    bus = host.root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    for gpu in pcie.parse_pci_query((PCIE / pci).read_text()):
        port = host.root / "sys" / "devices" / "pci0000:00" / f"0000:00:0{gpu.index + 1}.1"
        device = port / gpu.bus_id
        device.mkdir(parents=True, exist_ok=True)
        for folder in (port, device):
            (folder / "max_link_speed").write_text(GEN5_X16[0] + "\n")
            (folder / "max_link_width").write_text(GEN5_X16[1] + "\n")
        speed, width = (links or {}).get(gpu.index, GEN5_X16)
        (device / "current_link_speed").write_text(speed + "\n")
        (device / "current_link_width").write_text(width + "\n")
        link = bus / gpu.bus_id
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(device, bus))
    return host


def spark_rig(tmp: Path, node: int = 1, ibv: str = "dgx-spark.txt") -> FakeHost:
    """One node of the DGX Spark pair (node 1 by default: its peer is the head)."""
    env = {
        "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0",
        "NCCL_SOCKET_IFNAME": "enp1s0f0np0",
        "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
        "SM12X_HEAD_ADDR": "192.168.100.1",
    }
    host = rig(tmp, "dgx-spark.csv", env)
    host.tools |= {"ibv_devinfo", "ip", "ping", "ssh"}
    (host.root / "proc" / "meminfo").write_text((SPARK / "meminfo-kho-off.txt").read_text())
    (host.root / "proc" / "cmdline").write_text((SPARK / "cmdline-kho-off.txt").read_text())
    modprobe = host.root / "etc" / "modprobe.d"
    modprobe.mkdir(parents=True, exist_ok=True)
    (modprobe / "nvidia-graphics-drivers.conf").write_text(
        (SPARK / "modprobe-stock.conf").read_text()
    )
    sys_root = host.root / "sys" / "class"
    for hca in SPARK_HCAS:
        netdev = SPARK_NETDEVS[hca]
        up = hca.endswith("f0")
        (sys_root / "infiniband" / hca / "device" / "net" / netdev).mkdir(parents=True)
        gid_types = sys_root / "infiniband" / hca / "ports" / "1" / "gid_attrs" / "types"
        gid_types.mkdir(parents=True)
        for index, kind in enumerate(["IB/RoCE v1", "RoCE v2", "IB/RoCE v1", "RoCE v2"]):
            (gid_types / str(index)).write_text(kind + "\n")
        gids = sys_root / "infiniband" / hca / "ports" / "1" / "gids"
        gids.mkdir(parents=True)
        (gids / "3").write_text("0000:0000:0000:0000:0000:ffff:c0a8:6402\n")
        (sys_root / "net" / netdev).mkdir(parents=True)
        (sys_root / "net" / netdev / "operstate").write_text("up\n" if up else "down\n")
    host.answer(("ibv_devinfo",), (IBV / ibv).read_text())
    own = "192.168.100.1" if node == 0 else "192.168.100.2"
    host.answer(
        ("ip", "-o", "addr"),
        (
            "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n"
            f"4: enp1s0f0np0    inet {own}/24 brd 192.168.100.255 scope global enp1s0f0np0\n"
            "6: wlP9s9    inet 10.0.0.23/24 brd 10.0.0.255 scope global dynamic wlP9s9\n"
        ),
    )
    host.answer(("ip", "route", "get"), "192.168.100.1 dev enp1s0f0np0 src 192.168.100.2 uid 0\n")
    host.answer(("ping",), "2 packets transmitted, 2 received, 0% packet loss\n")
    host.answer(("ssh",), IMAGE_ID + "\n")
    return host


def packages_fixture(name: str) -> dict:
    """tests/fixtures/packages/NAME.json: a distribution's recorded (or
    format-true) /etc files and package-tool answers."""
    return json.loads((PACKAGES / f"{name}.json").read_text())


def on_distribution(host: FakeHost, name: str) -> FakeHost:
    """The machine as the fixture has it: its /etc/os-release (and
    /etc/dgx-release), what dpkg-query and apt-cache answer, and what its
    docker CLI says without the compose and buildx plugins."""
    fixture = packages_fixture(name)
    for path, text in fixture["files"].items():
        target = host.path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    host.tools |= {"dpkg-query", "apt-cache"}
    for command in fixture["commands"]:
        if command.get("missing"):
            continue
        host.answer(
            tuple(command["argv"]),
            Output(
                tuple(command["argv"]), command["stdout"], command["stderr"], command["returncode"]
            ),
        )
    return host


def run_doctor(host, **options) -> dict[str, object]:
    doctor = Doctor(host, Options(env_file=os.devnull, **options))
    checks = doctor.run()
    by_id = {c.id: c for c in checks}
    assert len(by_id) == len(checks), "check ids are unique"
    for check in checks:
        assert check.verdict in ("ok", "warn", "fail", "skip")
        if check.verdict in ("warn", "fail"):
            assert check.fix, f"{check.id} {check.verdict} without a fix"
    return {"doctor": doctor, "checks": by_id, "failed": [c.id for c in checks if c.failed]}
