"""The model lines sm12x serves, as data: what each checkpoint is and what it needs.

A recipe names its line in `model.line` (default: DeepSeek-V4-Flash-0731, the
line every recipe served before V4.1 existed). What a line needs is fixed by the
checkpoint and by sglang's code, not by a rig, so it lives here once: the
architectures sglang maps onto its model, the model_type its code branches on,
the first sglang release that serves it, whether the checkpoint has a vision
tower, and the parser names that select its prompt encoder and output parser.
The lints (sm12x.recipe.lints), verify, doctor and the stand-in server read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LineName = Literal["v4-flash-0731", "v4.1-flash"]
DEFAULT_LINE: LineName = "v4-flash-0731"


@dataclass(frozen=True)
class Line:
    name: LineName
    title: str
    # Checkpoints of this line on the Hub (a recipe may name a fine-tune too).
    hf_ids: tuple[str, ...]
    # config.json `architectures[0]` values sglang serves for this line, the first
    # the default; refused: spellings the line's sglang does not map (with why).
    architectures: tuple[str, ...]
    refused_architectures: dict[str, str]
    model_type: str
    min_sglang: str
    min_sglang_why: str
    vision_tower: bool
    # The KV compression ratios of the checkpoint's layers (config.json compress_ratios,
    # 0 = window only): which compress paths DSPARK's verify goes through (c_plan.cuh's
    # c4/c128 plan for V4; the ratio-2 pair ring and ratio-1 rows for V4.1).
    compress_ratios: tuple[int, ...]
    # --reasoning-parser / --tool-call-parser: in sglang 0.5.23 they also pick the
    # prompt encoder (chat_encoding.resolve_chat_encoding_spec: deepseekv4 -> dsv4,
    # deepseekv41 -> dsv41), so a line's recipes must name its own.
    reasoning_parser: str
    tool_call_parser: str
    # what the verify acceptance floor and exact tasks were judged on
    notes: str


V4_FLASH_0731 = Line(
    name="v4-flash-0731",
    title="DeepSeek-V4-Flash-0731",
    hf_ids=("deepseek-ai/DeepSeek-V4-Flash-0731",),
    architectures=("DeepseekV4ForCausalLM",),
    refused_architectures={},
    model_type="deepseek_v4",
    min_sglang="0.5.16",
    min_sglang_why="the first release sm12x's patch series covers (DSPARK, the V4 model code)",
    vision_tower=False,
    compress_ratios=(4, 128),
    reasoning_parser="deepseek-v4",
    tool_call_parser="deepseekv4",
    notes="text only; the DSpark draft is bundled in the checkpoint",
)

V41_FLASH = Line(
    name="v4.1-flash",
    title="DeepSeek-V4.1-Flash",
    hf_ids=("deepseek-ai/DeepSeek-V4.1-Flash", "deepseek-ai/DeepSeek-V4.1-Flash-1017"),
    # configs/deepseek_v41.py maps ["DeepseekV41ForCausalLM"] onto DeepseekV4ForCausalLM;
    # chat_encoding.is_deepseek_v41_arch: "V4.1 configs can also use the V4
    # architecture name" (the model_type deepseek_v41 decides).
    architectures=("DeepseekV41ForCausalLM", "DeepseekV4ForCausalLM"),
    refused_architectures={
        "DeepseekV41ForConditionalGeneration": (
            "sglang 0.5.23 maps only DeepseekV41ForCausalLM onto its model "
            "(configs/deepseek_v41.py normalize_deepseek_v41_config) and registers no "
            "class of this name (models/deepseek_v4.py EntryClass): it would not load"
        ),
    },
    model_type="deepseek_v41",
    min_sglang="0.5.23",
    min_sglang_why=(
        "sglang 0.5.16, 0.5.17 and 0.5.18 have no deepseek_v41 config, compressor, indexer "
        "or vision tower (no file of their wheels names V4.1); 0.5.23 has them "
        "(configs/deepseek_v41.py); 0.5.19-0.5.22 were not checked"
    ),
    vision_tower=True,
    compress_ratios=(2, 1),
    reasoning_parser="deepseek-v41",
    tool_call_parser="deepseekv41",
    notes="vision tower, engram layers, V4.1's own compressor and indexer",
)

LINES: dict[str, Line] = {line.name: line for line in (V4_FLASH_0731, V41_FLASH)}


def line_named(name: str) -> Line:
    return LINES[name]


def version_tuple(version: str) -> tuple[int, ...]:
    """0.5.23 -> (0, 5, 23); a post/rc suffix is ignored (0.5.15.post1 -> (0, 5, 15))."""
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def serves(line_: Line, sglang_version: str) -> bool:
    """Whether sglang `sglang_version` has the code this line needs."""
    return version_tuple(sglang_version) >= version_tuple(line_.min_sglang)
