"""The PCIe traps of 2-8 GPU rigs: P2P between the cards, the links the
risers trained, the IOMMU and ACS behind PCIe switches, the power limits.

What each reads, in the format tests/fixtures/pcie/README.md cites:

- `nvidia-smi topo -p2p r`: a matrix, a header row of GPU names, then one row
  per GPU of `X` (self), `OK`, or why not (`GNS` GPU not supported, `CNS`,
  `TNS`, `NS`, `DR`, `U`), tab-separated, then a Legend.
- `nvidia-smi --query-gpu=index,pci.bus_id,power.limit,power.default_limit,
  power.max_limit --format=csv,noheader,nounits`: "0, 00000000:01:00.0, 450.00,
  575.00, 600.00" ("[N/A]" where a card has no figure).
- /sys/bus/pci/devices/DDDD:BB:DD.F/{current,max}_link_{speed,width} ("32.0 GT/s
  PCIe", "16"); the port above it is the parent folder of its real path.
- /proc/cmdline and /sys/kernel/iommu_groups (an IOMMU is active when that
  folder has groups; each group's `type` says DMA/DMA-FQ when it translates,
  identity when it passes through), `lspci -vvv`'s ACSCtl lines per bridge.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from sm12x.doctor.core import Context

P2P_QUERY = ["nvidia-smi", "topo", "-p2p", "r"]
PCI_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,pci.bus_id,power.limit,power.default_limit,power.max_limit",
    "--format=csv,noheader,nounits",
]
# What NCCL does without P2P (its SHM transport): docs/doctor.md cites the NCCL
# environment-variable docs (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE).
NO_P2P_EFFECT = (
    "NCCL falls back to its SHM transport, copying every all-reduce through host "
    "memory: it works, but all-reduce is slower and decode throughput with it"
)


@dataclass(frozen=True)
class PciGpu:
    index: int
    bus_id: str  # sysfs form: 0000:01:00.0
    power_limit: float | None
    power_default: float | None
    power_max: float | None


def parse_p2p(text: str) -> dict[tuple[int, int], str]:
    """`nvidia-smi topo -p2p r`'s matrix: (i, j) -> OK / GNS / ... (no self pairs)."""
    matrix: dict[tuple[int, int], str] = {}
    header: list[int] = []
    for line in text.splitlines():
        cells = line.split()
        if not cells or cells[0].startswith("Legend"):
            if header and matrix:
                break
            continue
        if all(re.fullmatch(r"GPU\d+", c) for c in cells):
            header = [int(c[3:]) for c in cells]
        elif header and re.fullmatch(r"GPU\d+", cells[0]):
            row = int(cells[0][3:])
            for col, status in zip(header, cells[1:], strict=False):
                if col != row:
                    matrix[(row, col)] = status
    return matrix


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def sysfs_bus_id(bus_id: str) -> str:
    """nvidia-smi's 00000000:01:00.0 as sysfs names it: 0000:01:00.0."""
    domain, bus, function = bus_id.strip().lower().split(":")
    return f"{domain[-4:]}:{bus}:{function}"


def parse_pci_query(text: str) -> list[PciGpu]:
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 5 or not cells[0].isdigit() or cells[1].count(":") != 2:
            continue
        gpus.append(
            PciGpu(
                int(cells[0]),
                sysfs_bus_id(cells[1]),
                _number(cells[2]),
                _number(cells[3]),
                _number(cells[4]),
            )
        )
    return gpus


def parallel_gpus(ctx: Context) -> int:
    """GPUs of one node that exchange activations every layer: the recipe's TP
    (or EP, if larger) per node, at most the GPUs present."""
    recipe = ctx.recipe
    if recipe is None:
        return len(ctx.gpus)
    group = max(int(recipe.flag_value(f) or 1) for f in ("--tp-size", "--ep-size"))
    return min(max(group // recipe.hardware.nodes, 1), len(ctx.gpus))


def applies(ctx: Context) -> bool:
    """Two or more discrete GPUs on this node."""
    return len(ctx.gpus) >= 2 and not any(g.model == "gb10" for g in ctx.gpus)


def check_p2p(ctx: Context) -> None:
    """The P2P matrix among the GPUs the recipe's TP/EP group spans; a recipe
    that needs P2P (hardware.gpu_p2p) on a rig without it: warn, with what to expect."""
    out = ctx.host.run(P2P_QUERY)
    title = "GPU peer-to-peer"
    if not out.ok:
        ctx.add(
            "p2p",
            title,
            "warn",
            f"cannot read it: {out.why()}",
            "run `nvidia-smi topo -p2p r` by hand",
            required=False,
        )
        return
    matrix = parse_p2p(out.stdout)
    group = parallel_gpus(ctx)
    pairs = {k: v for k, v in matrix.items() if k[0] < group and k[1] < group}
    if not pairs:
        ctx.add(
            "p2p",
            title,
            "warn",
            "no matrix in `nvidia-smi topo -p2p r`",
            "run `nvidia-smi topo -p2p r` by hand",
            required=False,
        )
        return
    bad = {k: v for k, v in pairs.items() if v != "OK"}
    needed = ctx.recipe is not None and ctx.recipe.hardware.needs_p2p
    if not bad:
        ctx.add("p2p", title, "ok", f"P2P OK between all {group} GPUs", gpus=group)
        return
    statuses = sorted(set(bad.values()))
    first = min(bad)
    detail = (
        f"no P2P between {len(bad) // 2 or 1} GPU pair(s) of {group} "
        f"(GPU{first[0]}-GPU{first[1]}: {bad[first]}; {'/'.join(statuses)} "
        "in `nvidia-smi topo -p2p r`'s legend)"
    )
    if needed:
        name = ctx.recipe.name if ctx.recipe else ""
        detail += f"; {name} runs TP/EP over {group} GPUs: {NO_P2P_EFFECT}"
    fix = (
        "GeForce cards (GNS) have no P2P in NVIDIA's driver: expect the slower "
        "all-reduce, or use cards with P2P (RTX PRO 6000); CNS/TNS: put the GPUs "
        "under one CPU root complex or PCIe switch, and check IOMMU/ACS below"
    )
    ctx.add(
        "p2p",
        title,
        "warn",
        detail,
        fix,
        required=False,
        pairs={f"{i}-{j}": v for (i, j), v in bad.items()},
        needed=needed,
    )


def link_facts(ctx: Context, bus_id: str) -> dict[str, str | None]:
    """The GPU's link (current, max) and the port above it (its max)."""
    base = f"/sys/bus/pci/devices/{bus_id}"

    def read(path: str) -> str | None:
        text = ctx.host.read(path)
        return text.strip() if text is not None else None

    real = os.path.realpath(ctx.host.path(base))
    parent = os.path.dirname(real)
    slot: dict[str, str | None] = {}
    for name in ("max_link_speed", "max_link_width"):
        try:
            with open(os.path.join(parent, name), encoding="utf-8") as handle:
                slot[name] = handle.read().strip()
        except OSError:
            slot[name] = None
    return {
        "speed": read(f"{base}/current_link_speed"),
        "max_speed": read(f"{base}/max_link_speed"),
        "width": read(f"{base}/current_link_width"),
        "max_width": read(f"{base}/max_link_width"),
        "slot_speed": slot["max_link_speed"],
        "slot_width": slot["max_link_width"],
    }


def _gts(speed: str | None) -> float | None:
    match = re.match(r"([\d.]+) GT/s", speed or "")
    return float(match[1]) if match else None


def _width(width: str | None) -> int | None:
    return int(width) if width and width.isdigit() else None


GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def gen(gts: float) -> str:
    return f"Gen{GENERATIONS.get(gts, '?')}"


def pci_gpus(ctx: Context) -> list[PciGpu]:
    out = ctx.host.run(PCI_QUERY)
    return parse_pci_query(out.stdout) if out.ok else []


def check_links(ctx: Context) -> None:
    """Each GPU's link against what it and its slot can do: a riser or slot
    that trained the link narrower (x8 of x16) or slower (Gen4 of Gen5)."""
    title = "PCIe links"
    gpus = pci_gpus(ctx)
    facts = {g.index: link_facts(ctx, g.bus_id) for g in gpus}
    known = {i: f for i, f in facts.items() if f["width"] and f["max_width"]}
    if not known:
        ctx.add(
            "pcie-link", title, "skip", "no link figures under /sys/bus/pci/devices", required=False
        )
        return
    narrow, slow = [], []
    for index, f in known.items():
        can_width = min(w for w in (_width(f["max_width"]), _width(f["slot_width"])) if w)
        if (_width(f["width"]) or 0) < can_width:
            narrow.append(f"GPU{index} x{f['width']} of x{can_width}")
        speeds = [s for s in (_gts(f["max_speed"]), _gts(f["slot_speed"])) if s]
        now = _gts(f["speed"])
        if speeds and now and now < min(speeds):
            slow.append(f"GPU{index} {gen(now)} of {gen(min(speeds))}")
    if not narrow and not slow:
        f = next(iter(known.values()))
        now = _gts(f["speed"])
        ctx.add(
            "pcie-link",
            title,
            "ok",
            f"{len(known)} GPU(s) at their full width (x{f['width']})"
            + (f", {gen(now)}" if now else ""),
        )
        return
    found = "; ".join(narrow + slow)
    fix = (
        "reseat the card or replace the riser (a Gen5 x16 link needs a Gen5-rated "
        "riser), check the BIOS slot setting (x16, not bifurcated x8x8; Gen5, not Auto)"
    )
    if slow and not narrow:
        fix = (
            "GPUs slow the link when idle to save power: read it again under load "
            "(`nvidia-smi -q -d PCIE`); if it stays low, " + fix
        )
    ctx.add(
        "pcie-link",
        title,
        "warn",
        f"trained below what card and slot can do: {found}",
        fix,
        required=False,
        narrow=narrow,
        slow=slow,
    )


IOMMU_ON = re.compile(r"\b(intel_iommu=on|amd_iommu=on|iommu=force)\b")
IOMMU_PT = re.compile(
    r"\b(iommu=pt|iommu\.passthrough=1|intel_iommu=off|amd_iommu=off|iommu=off)\b"
)


def acs_redirecting(lspci: str) -> list[str]:
    """The devices whose ACSCtl redirects peer requests or completions upstream
    (ReqRedir+ or CmpltRedir+): P2P through them goes via the root complex."""
    found, device = [], ""
    for line in lspci.splitlines():
        if line and not line[0].isspace():
            device = line.split()[0]
        elif "ACSCtl:" in line and re.search(r"\b(ReqRedir|CmpltRedir)\+", line):
            found.append(device)
    return found


def check_iommu_acs(ctx: Context) -> None:
    """IOMMU translation (not passthrough) and ACS redirection on the bridges:
    NCCL's P2P between GPUs behind a PCIe switch hangs or crawls with either."""
    title = "IOMMU / ACS"
    cmdline = (ctx.host.read("/proc/cmdline") or "").strip()
    groups = ctx.host.listdir("/sys/kernel/iommu_groups")
    # Each group's `type` (Linux 5.11+): identity is passthrough, DMA/DMA-FQ translate.
    types = {(ctx.host.read(f"/sys/kernel/iommu_groups/{g}/type") or "").strip() for g in groups}
    if types - {""}:
        translating = bool(types & {"DMA", "DMA-FQ"})
    else:
        translating = bool(groups) and not IOMMU_PT.search(cmdline)
    lspci = ctx.host.run(["lspci", "-D", "-vvv"])
    redirecting = acs_redirecting(lspci.stdout) if lspci.ok else []
    unreadable = lspci.ok and "ACSCtl" not in lspci.stdout and "access denied" in lspci.stdout
    problems = []
    if translating:
        problems.append(
            f"the IOMMU translates DMA ({len(groups)} IOMMU groups; "
            f"/proc/cmdline: {cmdline or 'empty'})"
        )
    if redirecting:
        problems.append(
            f"ACS redirects peer traffic on {', '.join(redirecting[:4])}"
            + (f" and {len(redirecting) - 4} more" if len(redirecting) > 4 else "")
        )
    data: dict[str, Any] = {"iommu_groups": len(groups), "acs_redirecting": redirecting}
    if problems:
        ctx.add(
            "iommu-acs",
            title,
            "warn",
            "; ".join(problems),
            "add iommu=pt (or intel_iommu=off / amd_iommu=off) to the kernel command "
            "line and reboot; disable ACS on the PCIe switch ports "
            "(setpci -s BDF ECAP_ACS+0x6.w=0000 at boot), as NCCL's troubleshooting "
            "guide says",
            required=False,
            **data,
        )
    elif not lspci.ok or unreadable:
        why = lspci.why() if not lspci.ok else "lspci needs root to show ACSCtl"
        ctx.add(
            "iommu-acs",
            title,
            "warn",
            f"IOMMU passthrough or off; ACS unknown: {why}",
            "run `sudo lspci -vvv | grep ACSCtl`: ReqRedir+ or CmpltRedir+ on a bridge "
            "above the GPUs sends their P2P through the CPU",
            required=False,
            **data,
        )
    else:
        ctx.add(
            "iommu-acs",
            title,
            "ok",
            "IOMMU passthrough or off, no ACS redirection on the bridges",
            **data,
        )


def check_power(ctx: Context) -> None:
    """Each GPU's power limit against its default: a capped card (nvidia-smi -pl)
    runs slower, and in a TP group every card waits for the slowest."""
    title = "GPU power limits"
    gpus = [g for g in pci_gpus(ctx) if g.power_limit is not None]
    if not gpus:
        ctx.add("power-limit", title, "skip", "nvidia-smi reports no power limit", required=False)
        return
    capped = [
        g
        for g in gpus
        if g.power_limit is not None
        and g.power_default is not None
        and g.power_limit < g.power_default - 0.5
    ]
    limits = sorted({f"{g.power_limit:.0f} W" for g in gpus})
    if capped:
        listing = ", ".join(
            f"GPU{g.index} {g.power_limit:.0f} W of {g.power_default:.0f} W" for g in capped
        )
        ctx.add(
            "power-limit",
            title,
            "warn",
            f"below the default: {listing}",
            "expect lower throughput (a TP group runs at its slowest card's pace), or "
            "restore it: sudo nvidia-smi -i N -pl DEFAULT_WATTS (check the PSU first)",
            required=False,
            limits=limits,
        )
        return
    ctx.add("power-limit", title, "ok", f"at the default ({', '.join(limits)})", limits=limits)
