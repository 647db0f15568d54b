"""The GPUs, their driver, the recipe that fits them and their memory.

check_gpus reads nvidia-smi once; the others compare what it found (the
Context's gpus) with the driver the image needs and the recipe's hardware.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any

from sm12x.doctor.core import Context, meminfo
from sm12x.launch import gpus as gpu_query
from sm12x.recipe import Recipe, RecipeError, fit, load_all, load_recipe
from sm12x.versions import load_versions

# The image is CUDA 13.0 (versions.env CUDA_VERSION), which needs an R580 or
# newer driver.
MIN_DRIVER_MAJOR = 580
# Tools count memory differently (an RTX PRO 6000 shows 97,887 MiB = 95.6 GiB
# for its 96 GB), so a card passes at 85% of the recipe's figure; a card well
# under the recipe's size will not hold its share of the weights. A margin,
# not a measurement.
MEMORY_ALLOWANCE = 0.85
# The architectures the image's kernels are built for: sm_120 (RTX PRO 6000,
# RTX 5090) and sm_121 (DGX Spark).
SUPPORTED_CAPS = ("12.0", "12.1")
FIX_DRIVER = (
    "install the NVIDIA driver (R580 or newer) so nvidia-smi works; reboot after installing"
)


def check_gpus(ctx: Context) -> None:
    """nvidia-smi answers and lists GPUs of a supported architecture (warn: one
    no recipe is written for)."""
    out = ctx.host.run(gpu_query.QUERY, timeout=60)
    if not out.ok:
        ctx.add("gpus", "GPUs", "fail", f"nvidia-smi: {out.why()}", FIX_DRIVER)
        return
    try:
        ctx.gpus = gpu_query.parse_nvidia_smi(out.stdout)
    except gpu_query.GpuQueryError as exc:
        ctx.add("gpus", "GPUs", "fail", str(exc), FIX_DRIVER)
        return
    if not ctx.gpus:
        ctx.add("gpus", "GPUs", "fail", "nvidia-smi lists no GPU", FIX_DRIVER)
        return
    found = gpu_query.describe_gpus(ctx.gpus)
    data: dict[str, Any] = {"gpus": [asdict(g) for g in ctx.gpus]}
    wrong = sorted({g.compute_capability for g in ctx.gpus} - set(SUPPORTED_CAPS))
    if wrong:
        ctx.add(
            "gpus",
            "GPUs",
            "fail",
            f"{found}: compute capability {', '.join(wrong)} is not sm_120/sm_121",
            "sm12x serves RTX PRO 6000 / RTX 5090 (sm_120) and DGX Spark (sm_121) "
            "only; on other GPUs use upstream sglang's own images",
            **data,
        )
        return
    unknown = sorted({g.name for g in ctx.gpus if g.model is None})
    if unknown:
        ctx.add(
            "gpus",
            "GPUs",
            "warn",
            f"{found}: no recipe is written for {', '.join(unknown)}",
            "pass --recipe NAME to check against a recipe of similar hardware, or "
            "write one (docs/recipes.md)",
            **data,
        )
        return
    ctx.add("gpus", "GPUs", "ok", found, **data)


def driver_major(driver: str) -> int:
    """The leading number of a driver version ("580.95.05" -> 580; 0 if none)."""
    match = re.match(r"(\d+)", driver)
    return int(match[1]) if match else 0


def check_driver(ctx: Context) -> None:
    """Every GPU's driver is at least MIN_DRIVER_MAJOR, what the image's CUDA needs."""
    if not ctx.gpus:
        ctx.add("driver", "NVIDIA driver", "skip", "no GPU seen", required=False)
        return
    drivers = sorted({g.driver for g in ctx.gpus})
    if min(driver_major(d) for d in drivers) < MIN_DRIVER_MAJOR:
        cuda = load_versions(ctx.settings.track_name)["CUDA_VERSION"]
        ctx.add(
            "driver",
            "NVIDIA driver",
            "fail",
            f"driver {', '.join(drivers)}",
            f"the image is built on CUDA {cuda}, which needs driver "
            f"{MIN_DRIVER_MAJOR} or newer: upgrade the driver",
            drivers=drivers,
        )
        return
    ctx.add("driver", "NVIDIA driver", "ok", f"driver {', '.join(drivers)}", drivers=drivers)


def check_recipe(ctx: Context) -> None:
    """The recipe named (SM12X_RECIPE / --recipe) fits the GPUs, or auto picks one."""
    if ctx.settings.recipe != "auto":
        check_named_recipe(ctx, ctx.settings.recipe)
    else:
        check_auto_recipe(ctx)


def check_named_recipe(ctx: Context, name: str) -> None:
    """A named recipe loads and this machine has the GPUs it is written for."""
    title = "recipe"
    try:
        ctx.recipe = load_recipe(name)
    except RecipeError as exc:
        ctx.add("recipe", title, "fail", str(exc), "pass a name from recipes/")
        return
    if not ctx.gpus:
        ctx.add(
            "recipe",
            title,
            "warn",
            f"{ctx.recipe.name} (named; no GPU seen to check it against)",
            "fix the GPU check first",
            recipe=ctx.recipe.name,
        )
        return
    if not fits(ctx.recipe, ctx.gpus):
        hw = ctx.recipe.hardware
        ctx.add(
            "recipe",
            title,
            "fail",
            f"{ctx.recipe.name} needs {hw.gpus_per_node}x {hw.gpu} ({hw.sm}) per "
            f"node; this machine has {gpu_query.describe_gpus(ctx.gpus)}",
            "name the recipe for this machine, or --recipe auto",
            recipe=ctx.recipe.name,
        )
        return
    ctx.add(
        "recipe",
        title,
        "ok",
        f"{ctx.recipe.name} (named): fits {gpu_query.describe_gpus(ctx.gpus)}",
        recipe=ctx.recipe.name,
    )


def fits(recipe: Recipe, gpus: list[gpu_query.Gpu]) -> bool:
    """Enough GPUs per node, every one the recipe's model and compute capability."""
    hw = recipe.hardware
    return len(gpus) >= hw.gpus_per_node and all(
        g.model == hw.gpu and g.compute_capability == hw.compute_capability for g in gpus
    )


def check_auto_recipe(ctx: Context) -> None:
    """The recipe SM12X_RECIPE=auto would pick (the launcher's own pick_recipe)."""
    title = "recipe"
    if not ctx.gpus:
        ctx.add(
            "recipe",
            title,
            "fail",
            "cannot pick one: no GPU seen",
            "fix the GPU check, or pass --recipe NAME",
        )
        return
    try:
        pick = gpu_query.pick_recipe(ctx.gpus, load_all())
    except gpu_query.NoRecipeMatch as exc:
        ctx.add(
            "recipe",
            title,
            "fail",
            str(exc).removeprefix("SM12X_RECIPE=auto "),
            "use a machine a recipe is written for (README support matrix), or write "
            "a recipe (docs/recipes.md)",
        )
        return
    ctx.recipe = pick.recipe
    ctx.add(
        "recipe",
        title,
        "ok",
        f"{pick.recipe.name}: {pick.reason}",
        recipe=pick.recipe.name,
        status=pick.recipe.status.state,
    )


def check_gpu_memory(ctx: Context) -> None:
    """Each GPU holds at least MEMORY_ALLOWANCE of the recipe's memory per GPU;
    on unified memory (or when nvidia-smi reports none) the host's MemTotal."""
    if ctx.recipe is None or not ctx.gpus:
        ctx.add("gpu-memory", "GPU memory", "skip", "no recipe to compare with", required=False)
        return
    need_gib = ctx.recipe.hardware.memory_gib_per_gpu * MEMORY_ALLOWANCE
    if ctx.recipe.hardware.unified_memory or all(g.memory_mib is None for g in ctx.gpus):
        check_unified_memory(ctx, ctx.recipe, need_gib)
    else:
        check_card_memory(ctx, ctx.recipe, need_gib)
    check_engram_host_memory(ctx)


# The 4x RTX PRO 6000 V4.1 launcher's host RAM for the engram host table (>= 256 GB).
ENGRAM_HOST_RAM_GB = 256


def check_engram_host_memory(ctx: Context) -> None:
    """A recipe that keeps DeepSeek-V4.1's engram tables in host RAM
    (SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE) needs a host that holds them."""
    recipe = ctx.recipe
    if recipe is None or recipe.hardware.unified_memory or fit.engram_on_gpu(recipe):
        return
    title = "engram host memory"
    engram = fit.WEIGHTS[recipe.model.line].engram_gib
    total_kib = meminfo(ctx.host).get("MemTotal")
    if total_kib is None:
        ctx.add(
            "engram-host-memory",
            title,
            "warn",
            f"/proc/meminfo unreadable; {recipe.name} pins {engram:.1f} GiB of engram tables "
            "in host memory",
            "check `free -g` by hand",
            required=False,
        )
        return
    have = total_kib / 1024**2
    detail = (
        f"{have:.1f} GiB of host memory; {recipe.name} pins the engram tables, "
        f"{engram:.1f} GiB, in it (SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE)"
    )
    if have < engram:
        verdict, fix = "fail", "use a host with more RAM, or a recipe with the tables on the GPUs"
    elif have * 2**30 < ENGRAM_HOST_RAM_GB * 1e9:
        verdict = "warn"
        fix = f"the field runs it with >= {ENGRAM_HOST_RAM_GB} GB of host RAM"
    else:
        verdict, fix = "ok", None
    ctx.add("engram-host-memory", title, verdict, detail, fix, memory_gib=round(have, 1))


def check_unified_memory(ctx: Context, recipe: Recipe, need_gib: float) -> None:
    """Unified memory (DGX Spark): /proc/meminfo's MemTotal against the recipe."""
    title = "GPU memory"
    hw = recipe.hardware
    total_kib = meminfo(ctx.host).get("MemTotal")
    if total_kib is None:
        ctx.add(
            "gpu-memory",
            title,
            "warn",
            "unified memory: /proc/meminfo unreadable",
            "check `free -g` by hand",
            required=False,
        )
        return
    have = total_kib / 1024**2
    verdict = "ok" if have >= need_gib else "fail"
    ctx.add(
        "gpu-memory",
        title,
        verdict,
        f"unified memory {have:.1f} GiB (recipe {recipe.name}: {hw.memory_gib_per_gpu} GB)",
        f"{recipe.name} needs about {hw.memory_gib_per_gpu} GB per node",
        memory_gib=round(have, 1),
    )


def check_card_memory(ctx: Context, recipe: Recipe, need_gib: float) -> None:
    """Discrete cards: every card's memory.total against the recipe's figure."""
    title = "GPU memory"
    hw = recipe.hardware
    small = [g for g in ctx.gpus if g.memory_mib is not None and g.memory_mib / 1024 < need_gib]
    sizes = sorted({f"{g.memory_mib / 1024:.1f} GiB" for g in ctx.gpus if g.memory_mib})
    if small:
        ctx.add(
            "gpu-memory",
            title,
            "fail",
            f"{len(small)} GPU(s) with {', '.join(sizes)}; {recipe.name} is "
            f"written for {hw.memory_gib_per_gpu} GB cards",
            "use the recipe for these cards, or cards of the recipe's size",
            sizes=sizes,
        )
        return
    ctx.add(
        "gpu-memory",
        title,
        "ok",
        f"{', '.join(sizes)} per GPU (recipe: {hw.memory_gib_per_gpu} GB)",
        sizes=sizes,
    )
