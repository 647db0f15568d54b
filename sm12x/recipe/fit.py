"""Do a line's weights fit a rig? The memory arithmetic, from published figures.

The figures (GiB):
- DeepSeek-V4-Flash-0731: about 150 GB of checkpoint (README; it runs on 2x RTX
  PRO 6000, 192 GB), no engram tables.
- DeepSeek-V4.1-Flash: the published checkpoint is 510,286,023,000 payload bytes
  in 48 shards (475.2 GiB; a public shard-header inventory of
  deepseek-ai/DeepSeek-V4.1-Flash, whose config.json hash matches revision
  fb2764a5). Its two engram tables hold 384,006,168 and 384,016,682 rows
  (config.json engram_num_embeddings) of 264 B (256 FP8 values and 8 UE8M0
  scales), 188.8 GiB; the rest, 286.4 GiB, shards over the TP group (an upper
  bound per GPU: replicated tensors count once). sglang 0.5.23's own GB300 test
  (sglang/test/dsv41_flash_common.py) says the same in round figures: engram
  ~189 GiB, the rest ~143 GiB per GPU at TP2. sglang shards the engram rows over
  the TP group (layers/engram.py: rows tp_rank/tp_size);
  SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1 keeps them in pinned host memory
  instead, which on unified memory (DGX Spark) is the same memory, so it saves
  nothing there.
- Vision: the tower's weights are inside those figures; at boot sglang reserves
  activation room for the image encoder out of --mem-fraction-static
  (arg_groups/memory_hook.py: a fixed 8 GiB per GPU when the KV pool is sized
  after graph capture).

A rig fits when its weights per GPU leave at least HEADROOM of each GPU's memory
for the KV pool, the DSpark draft's state, CUDA graphs and activations (and, on
unified memory, the OS): below that no recipe can hold a useful context.
"""

from __future__ import annotations

from dataclasses import dataclass

from sm12x.recipe.lines import Line

GIB_PER_GB = 1e9 / 2**30
HEADROOM = 0.20  # of each GPU's memory, kept for KV, draft, graphs, activations
VISION_RESERVE_GIB = 8.0  # memory_hook.py's VLM headroom per GPU


@dataclass(frozen=True)
class Weights:
    dense_gib: float  # sharded over the TP group
    engram_gib: float  # the engram tables (GPU, or pinned host memory)
    source: str


# DeepSeek-V4.1-Flash's published checkpoint and its engram tables (module doc).
V41_CHECKPOINT_BYTES = 510_286_023_000
V41_ENGRAM_ROWS = (384_006_168, 384_016_682)
ENGRAM_ROW_BYTES = 264
_V41_ENGRAM_GIB = sum(V41_ENGRAM_ROWS) * ENGRAM_ROW_BYTES / 2**30

WEIGHTS = {
    "v4-flash-0731": Weights(150 * GIB_PER_GB, 0.0, "a ~150 GB checkpoint (README)"),
    "v4.1-flash": Weights(
        V41_CHECKPOINT_BYTES / 2**30 - _V41_ENGRAM_GIB,
        _V41_ENGRAM_GIB,
        "the published checkpoint, 510,286,023,000 bytes in 48 shards (475.2 GiB): engram "
        "tables 188.8 GiB (384,006,168 + 384,016,682 rows x 264 B, FP8), the rest 286.4 GiB",
    ),
}


@dataclass(frozen=True)
class Verdict:
    fits: bool
    rig: str
    per_gpu_gib: float
    budget_gib: float
    arithmetic: str


def describe(gpus_per_node: int, nodes: int, gpu: str, memory_gib: int) -> str:
    layout = f"{gpus_per_node}x {gpu}" if nodes == 1 else f"{nodes}x {gpu} ({gpus_per_node}/node)"
    return f"{layout}, {memory_gib} GiB each"


def judge(line: Line, hardware, *, engram_on_gpu: bool = True) -> Verdict:
    """The arithmetic for one line on one hardware section (sm12x.recipe.model.Hardware
    or anything with the same fields)."""
    weights = WEIGHTS[line.name]
    gpus = hardware.gpus_per_node * hardware.nodes
    memory = hardware.memory_gib_per_gpu
    # Pinned host memory is GPU memory on a unified-memory machine.
    engram_here = engram_on_gpu or hardware.unified_memory
    per_gpu = weights.dense_gib / gpus + (weights.engram_gib / gpus if engram_here else 0.0)
    budget = memory * (1 - HEADROOM)
    rig = describe(hardware.gpus_per_node, hardware.nodes, hardware.gpu, memory)
    total = weights.dense_gib + (weights.engram_gib if engram_here else 0.0)
    where = (
        ""
        if not weights.engram_gib
        else (
            ", engram tables included"
            if engram_on_gpu
            else ", engram tables included (host memory is GPU memory here)"
            if hardware.unified_memory
            else ", engram tables in host memory"
        )
    )
    text = (
        f"{per_gpu:.1f} GiB of weights per GPU ({total:.0f} GiB{where} / {gpus}) against "
        f"{budget:.1f} GiB usable ({memory} GiB less {HEADROOM:.0%} for KV, draft, graphs, "
        "activations)"
    )
    fits = per_gpu <= budget
    if not fits and weights.engram_gib and engram_here and not hardware.unified_memory:
        host = weights.dense_gib / gpus
        text += (
            f"; with the engram tables in host RAM (SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1, "
            f">= {weights.engram_gib:.0f} GiB) {host:.1f} GiB per GPU, which no field "
            "report has run"
        )
    return Verdict(fits, rig, per_gpu, budget, text)


def engram_on_gpu(recipe) -> bool:
    var = recipe.env.get("SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE")
    return not (var is not None and var.value in ("1", "true", "True"))


def kv_budget_gib(recipe) -> float:
    """What --mem-fraction-static leaves per GPU after the weights (and the vision
    reserve): the KV pool and the draft's state live in it."""
    weights = WEIGHTS[recipe.model.line]
    gpus = recipe.hardware.total_gpus
    engram = (
        weights.engram_gib / gpus
        if (engram_on_gpu(recipe) or recipe.hardware.unified_memory)
        else 0.0
    )
    fraction = recipe.flag_value("--mem-fraction-static")
    fraction = float(fraction) if isinstance(fraction, (int, float)) else 0.88
    vision = VISION_RESERVE_GIB if recipe.model.vision else 0.0
    return (
        recipe.hardware.memory_gib_per_gpu * fraction - weights.dense_gib / gpus - engram - vision
    )
