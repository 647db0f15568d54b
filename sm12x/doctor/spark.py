"""DGX Spark traps the field hit first (tests/fixtures/spark/README.md cites each):

- cma: HWE kernels with kexec handover (KHO) on by default release their KHO
  scratch pageblocks as CMA without a registered CMA area, so /proc/meminfo
  shows CmaFree above CmaTotal; those pages cannot be pinned long-term, and
  RDMA memory registration (ibv_reg_mr) fails with ENOMEM at NCCL init. The
  `kho=off` boot parameter removes them.
- driver-options: an `options nvidia...` line in /etc/modprobe.d that limits
  the memory the driver hands out; the recipes' memory fractions assume none.
- autotune-memory: on unified memory, flashinfer's autotune (and CUDA graph
  capture) allocate outside sglang's --mem-fraction-static accounting.
- socket interfaces per node: the pair's .env names one interface; another node
  may call it something else.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sm12x.doctor.core import GIB, Context, meminfo
from sm12x.doctor.pair import first_interface

MODPROBE_DIR = "/etc/modprobe.d"
# A driver option whose name says it limits or reserves memory; the two that
# only say how allocations are kept or cleared are not that.
MEMORY_OPTION = re.compile(r"\b(NVreg_\w*(?:Heap|Carveout|Reserved|Limit|MemSize)\w*)=(\S+)")
NOT_A_LIMIT = {"NVreg_PreserveVideoMemoryAllocations", "NVreg_InitializeSystemMemoryAllocations"}
# The burst outside the engine's accounting on a GB10 during warm-up: MemAvailable
# fell from 28.97 to 6.27 GiB in 11 s (vllm-project/vllm#56824); with flashinfer's
# autotune on, sglang-project/sglang#35860 saw host RAM driven to zero at fractions
# 0.60-0.85. Rounded up: a margin from field reports, not a measurement of sm12x.
AUTOTUNE_HEADROOM_GIB = 24


def applies(ctx: Context) -> bool:
    """A GB10, or a unified-memory recipe."""
    if ctx.recipe is not None and ctx.recipe.hardware.unified_memory:
        return True
    return any(g.model == "gb10" for g in ctx.gpus)


def check_cma(ctx: Context) -> None:
    """CmaFree above CmaTotal (KHO scratch counted as free CMA): RDMA
    registration fails with ENOMEM unless the kernel booted with kho=off."""
    info = meminfo(ctx.host)
    title = "CMA / kexec handover"
    cmdline = (ctx.host.read("/proc/cmdline") or "").split()
    if "CmaFree" not in info:
        ctx.add("cma", title, "skip", "no CmaTotal/CmaFree in /proc/meminfo", required=False)
        return
    total, free = info.get("CmaTotal", 0), info["CmaFree"]
    found = f"CmaTotal {total // 1024} MiB, CmaFree {free // 1024} MiB"
    if free > total:
        ctx.add(
            "cma",
            title,
            "fail",
            f"{found}: free CMA above its total is kexec handover's scratch memory, which "
            "RDMA cannot pin: NCCL init fails with `ibv_reg_mr... Cannot allocate memory`",
            "add kho=off to the kernel command line (GRUB_CMDLINE_LINUX_DEFAULT in "
            "/etc/default/grub, then sudo update-grub) and reboot",
            cma_total_kib=total,
            cma_free_kib=free,
            kho_off="kho=off" in cmdline,
        )
        return
    suffix = " (kho=off)" if "kho=off" in cmdline else ""
    ctx.add("cma", title, "ok", found + suffix, cma_total_kib=total, cma_free_kib=free)


def modprobe_options(ctx: Context) -> list[tuple[str, str]]:
    """(file, line) of every `options nvidia*` line in /etc/modprobe.d."""
    found = []
    for name in ctx.host.listdir(MODPROBE_DIR):
        if not name.endswith(".conf"):
            continue
        for line in (ctx.host.read(f"{MODPROBE_DIR}/{name}") or "").splitlines():
            words = line.split("#")[0].split()
            if len(words) > 2 and words[0] == "options" and words[1].startswith("nvidia"):
                found.append((f"{MODPROBE_DIR}/{name}", " ".join(words)))
    return found


def check_driver_options(ctx: Context) -> None:
    """No modprobe override limits the memory the driver exposes; the loaded
    module's own value (/sys/module/nvidia/parameters) when it shows one."""
    title = "driver memory options"
    capping = []
    for path, line in modprobe_options(ctx):
        for name, value in MEMORY_OPTION.findall(line):
            if name in NOT_A_LIMIT:
                continue
            live = ctx.host.read(f"/sys/module/nvidia/parameters/{name}")
            now = f", loaded: {live.strip()}" if live is not None else ""
            capping.append(f"{path}: {name}={value}{now}")
    if capping:
        ctx.add(
            "driver-options",
            title,
            "warn",
            "a modprobe override limits the driver's memory: " + "; ".join(capping),
            "the recipe's memory fraction assumes the stock driver: remove the option "
            "(or comment it out), sudo update-initramfs -u, reboot",
            required=False,
            options=capping,
        )
        return
    ctx.add("driver-options", title, "ok", "no nvidia option in /etc/modprobe.d limits memory")


def check_autotune_memory(ctx: Context) -> None:
    """Unified memory: what is left beside sglang's static pool, MemAvailable -
    mem_fraction * MemTotal, against the burst autotune and graph capture take."""
    recipe = ctx.recipe
    title = "memory beside the static pool"
    if recipe is None or not recipe.hardware.unified_memory:
        return
    fraction = recipe.flag_value("--mem-fraction-static")
    info = meminfo(ctx.host)
    if not isinstance(fraction, float) or "MemAvailable" not in info:
        ctx.add("autotune-memory", title, "skip", "no fraction or no MemAvailable", required=False)
        return
    total, available = info["MemTotal"] * 1024 / GIB, info["MemAvailable"] * 1024 / GIB
    headroom = available - fraction * total
    autotune = not recipe.has_flag("--disable-flashinfer-autotune")
    detail = (
        f"MemAvailable {available:.1f} GiB - {fraction} x MemTotal {total:.1f} GiB = "
        f"{headroom:.1f} GiB beside sglang's pool; flashinfer autotune "
        + ("on" if autotune else "off (--disable-flashinfer-autotune)")
    )
    data: dict[str, Any] = {"headroom_gib": round(headroom, 1), "autotune": autotune}
    if headroom < 0:
        ctx.add(
            "autotune-memory",
            title,
            "fail",
            detail,
            "free memory (stop other GPU programs, `sudo sh -c 'sync; echo 3 > "
            "/proc/sys/vm/drop_caches'`) or lower --mem-fraction-static",
            **data,
        )
    elif autotune and headroom < AUTOTUNE_HEADROOM_GIB:
        ctx.add(
            "autotune-memory",
            title,
            "warn",
            f"{detail}: under {AUTOTUNE_HEADROOM_GIB} GiB, autotune's burst can exhaust "
            "host memory (field reports freeze the Spark)",
            f"use {recipe.rig} (autotune off), or lower --mem-fraction-static until "
            f"{AUTOTUNE_HEADROOM_GIB} GiB stay free",
            required=False,
            **data,
        )
    else:
        ctx.add("autotune-memory", title, "ok", detail, **data)


def check_peer_interfaces(ctx: Context) -> None:
    """The pair: NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME as each node has them,
    against the interfaces the other node has (from its `doctor --json`)."""
    title = "socket interfaces on both nodes"
    if ctx.options.peer_report is None:
        return
    try:
        peer = json.loads(ctx.options.peer_report.read_text(encoding="utf-8"))
        peer_ifs = next(c for c in peer["checks"] if c["id"] == "nccl-socket-ifname")["data"]
        names = set(peer_ifs["interfaces"])
    except (OSError, ValueError, KeyError, StopIteration, TypeError):
        ctx.add(
            "peer-interfaces",
            title,
            "skip",
            "the peer's report lists no interfaces (an older sm12x?)",
            required=False,
        )
        return
    missing = []
    for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        wanted = first_interface(ctx.setting(variable) or "")
        peer_value = peer_ifs.get("values", {}).get(variable)
        if wanted and peer_value in (None, ctx.setting(variable)) and wanted not in names:
            missing.append(f"{variable}={wanted}")
    if missing:
        ctx.add(
            "peer-interfaces",
            title,
            "fail",
            f"the other node has no {', '.join(missing)} (it has "
            f"{', '.join(sorted(names)) or 'none'})",
            "interface names differ per node: set each node's own NCCL_SOCKET_IFNAME "
            "and GLOO_SOCKET_IFNAME in that node's .env (ip -br link on each)",
            peer=sorted(names),
        )
        return
    ctx.add(
        "peer-interfaces",
        title,
        "ok",
        "the socket interfaces exist on both nodes",
        peer=sorted(names),
    )
