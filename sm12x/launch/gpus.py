"""What GPUs this machine has (nvidia-smi), and which recipe fits them.

SM12X_RECIPE=auto calls query_gpus() then pick_recipe(). Both raise UserError with
a message that lists what was found and what the recipes need, so a machine
that matches nothing says why.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace

from sm12x.errors import UserError
from sm12x.recipe import fit
from sm12x.recipe.lines import DEFAULT_LINE, LINES
from sm12x.recipe.model import Recipe

QUERY = [
    "nvidia-smi",
    "--query-gpu=name,count,compute_cap,memory.total,driver_version",
    "--format=csv,noheader",
]

# nvidia-smi names per GPU model of the recipe vocabulary (GpuModel in
# sm12x/recipe/model.py). RTX PRO 6000 Blackwell comes as Workstation,
# Max-Q Workstation and Server Edition, all 96 GB on GB202.
GPU_NAMES: dict[str, re.Pattern[str]] = {
    "rtx-pro-6000": re.compile(r"^NVIDIA RTX PRO 6000 Blackwell\b"),
    "rtx-5090": re.compile(r"^NVIDIA GeForce RTX 5090$"),
    "gb10": re.compile(r"^NVIDIA GB10$"),
}


class GpuQueryError(UserError):
    pass


class NoRecipeMatch(UserError):
    pass


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str
    memory_mib: int | None  # None where nvidia-smi has no figure (GB10: unified memory)
    driver: str

    @property
    def model(self) -> str | None:
        for model, pattern in GPU_NAMES.items():
            if pattern.search(self.name):
                return model
        return None


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Parse `nvidia-smi --query-gpu=name,count,compute_cap,memory.total,driver_version
    --format=csv,noheader` output (one line per GPU)."""
    gpus = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5:
            raise GpuQueryError(
                f"cannot read nvidia-smi line {number} ({line.strip()!r}): expected "
                "name, count, compute_cap, memory.total, driver_version; set SM12X_RECIPE (or --recipe) to "
                "a recipe name instead of auto"
            )
        name, _count, cap, memory, driver = fields
        match = re.fullmatch(r"(\d+) MiB", memory)
        gpus.append(Gpu(name, cap, int(match[1]) if match else None, driver))
    return gpus


def query_gpus(nvidia_smi: str | None = None) -> list[Gpu]:
    """The GPUs nvidia-smi sees (in a container: the ones granted to it)."""
    binary = nvidia_smi or shutil.which("nvidia-smi")
    if binary is None:
        raise GpuQueryError(
            "SM12X_RECIPE=auto needs nvidia-smi and it is not on PATH: no NVIDIA driver is "
            "visible (in Docker: install the NVIDIA Container Toolkit and grant the GPUs); "
            "or set SM12X_RECIPE (or --recipe) to a recipe name"
        )
    try:
        result = subprocess.run(
            [binary, *QUERY[1:]], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpuQueryError(
            f"nvidia-smi did not run ({exc}): set SM12X_RECIPE (or --recipe) to a recipe name"
        ) from None
    if result.returncode != 0:
        said = (result.stdout + result.stderr).strip().splitlines()
        raise GpuQueryError(
            f"nvidia-smi failed (exit {result.returncode}: {said[0] if said else 'no output'}): "
            "is the NVIDIA driver loaded? Or set SM12X_RECIPE (or --recipe) to a recipe name"
        )
    gpus = parse_nvidia_smi(result.stdout)
    if not gpus:
        raise GpuQueryError(
            "nvidia-smi lists no GPU: set SM12X_RECIPE (or --recipe) to a recipe name"
        )
    return gpus


def describe_gpus(gpus: Sequence[Gpu]) -> str:
    """'4x NVIDIA RTX PRO 6000 ... (compute capability 12.0)', grouped by kind."""
    groups: dict[tuple[str, str], int] = {}
    for gpu in gpus:
        key = (gpu.name, gpu.compute_capability)
        groups[key] = groups.get(key, 0) + 1
    return (
        " + ".join(f"{n}x {name} (compute capability {cap})" for (name, cap), n in groups.items())
        or "no GPU"
    )


def describe_recipe_hardware(recipe: Recipe) -> str:
    hw = recipe.hardware
    nodes = f" per node x {hw.nodes} nodes" if hw.nodes > 1 else ""
    return f"{recipe.name} ({hw.gpus_per_node}x {hw.gpu}, {hw.sm}{nodes})"


@dataclass(frozen=True)
class Pick:
    recipe: Recipe
    reason: str


def other_lines_note(gpus: Sequence[Gpu], recipes: Sequence[Recipe]) -> str:
    """For each model line auto does not pick: the recipe that serves it on these GPUs,
    or why it cannot (sm12x.recipe.fit's arithmetic on this machine's GPU count and
    memory), so the operator learns it before fetching a checkpoint that cannot run."""
    model = gpus[0].model if gpus else None
    notes = []
    for line in LINES.values():
        if line.name == DEFAULT_LINE:
            continue
        served = [
            r
            for r in recipes
            if r.model.line == line.name
            and r.hardware.gpu == model
            and r.hardware.nodes == 1
            and r.hardware.gpus_per_node <= len(gpus)
        ]
        if served:
            best = max(served, key=lambda r: r.hardware.gpus_per_node)
            notes.append(
                f"{line.title} runs here only when named: SM12X_RECIPE={best.name} "
                f"(its checkpoint, {line.hf_ids[0]}, in SM12X_MODEL_DIR)"
            )
            continue
        like = [r.hardware for r in recipes if r.hardware.gpu == model]
        memory = (
            gpus[0].memory_mib / 1024
            if gpus and gpus[0].memory_mib
            else (like[0].memory_gib_per_gpu if like else None)
        )
        if model is None or memory is None:
            continue
        hw = SimpleNamespace(
            gpu=model,
            gpus_per_node=len(gpus),
            nodes=1,
            memory_gib_per_gpu=round(memory),
            unified_memory=bool(like and like[0].unified_memory),
        )
        on_gpu, on_host = fit.judge(line, hw), fit.judge(line, hw, engram_on_gpu=False)
        if on_gpu.fits or on_host.fits:
            where = "" if on_gpu.fits else " with the engram tables in host RAM"
            notes.append(
                f"{line.title}'s weights fit {on_host.rig}{where}, but no recipe serves it "
                f"here yet ({(on_gpu if on_gpu.fits else on_host).arithmetic})"
            )
        else:
            notes.append(f"{line.title} cannot be served here: {on_gpu.arithmetic}")
    return "; ".join(notes)


def pick_recipe(gpus: Sequence[Gpu], recipes: Sequence[Recipe]) -> Pick:
    """The rig for these GPUs: same GPU model and compute capability, and the
    most GPUs per node that the machine has.

    Only baselines are picked: a rig's other configurations are
    SM12X_CONFIGURATION's to choose (sm12x.launch.configuration). Only recipes of
    the default model line (DeepSeek-V4-Flash-0731) are picked: the line decides
    which checkpoint must be in SM12X_MODEL_DIR, which the GPUs cannot tell, so a
    V4.1-Flash recipe is served only when named (SM12X_RECIPE).
    """
    found = describe_gpus(gpus)
    all_recipes = list(recipes)
    recipes = [
        r for r in recipes if r.configuration_kind == "baseline" and r.model.line == DEFAULT_LINE
    ]

    def no_match(why: str) -> NoRecipeMatch:
        listing = "; ".join(describe_recipe_hardware(r) for r in recipes)
        return NoRecipeMatch(
            f"SM12X_RECIPE=auto found no recipe for this machine ({why}). Found: {found}. "
            f"Recipes: {listing}. Set SM12X_RECIPE to one of them to override, or add a recipe"
        )

    if not gpus:
        raise no_match("no GPU")
    models = {gpu.model for gpu in gpus}
    caps = {gpu.compute_capability for gpu in gpus}
    if len(models) > 1 or len(caps) > 1:
        raise no_match("the GPUs are not all the same kind")
    (model,), (cap,) = models, caps
    if model is None:
        raise no_match("no recipe is written for this GPU")
    fitting = [
        r
        for r in recipes
        if r.hardware.gpu == model
        and r.hardware.compute_capability == cap
        and r.hardware.gpus_per_node <= len(gpus)
    ]
    if not fitting:
        same_model = [r for r in recipes if r.hardware.gpu == model]
        if not same_model:
            raise no_match(f"no recipe is written for {model}")
        if all(r.hardware.compute_capability != cap for r in same_model):
            raise no_match(f"{model} recipes expect another compute capability than {cap}")
        need = min(r.hardware.gpus_per_node for r in same_model)
        raise no_match(f"{model} recipes need at least {need} GPUs per node, found {len(gpus)}")
    best = max(fitting, key=lambda r: (r.hardware.gpus_per_node, -r.hardware.nodes))
    hw = best.hardware
    reason = f"found {found}; {best.name} runs {hw.gpus_per_node}x {hw.gpu} ({hw.sm}) per node"
    if hw.nodes > 1:
        reason += f" on {hw.nodes} nodes"
    if len(gpus) > hw.gpus_per_node:
        reason += (
            f"; it uses {hw.gpus_per_node} of the {len(gpus)} GPUs (no recipe uses more "
            "of them: set SM12X_RECIPE (or --recipe) to choose another)"
        )
    others = other_lines_note(gpus, all_recipes)
    if others:
        reason += f". {others}"
    return Pick(best, reason)
