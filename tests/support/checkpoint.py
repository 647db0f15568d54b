"""Tiny checkpoint folders in the real on-disk formats, for doctor's model checks.

write_checkpoint(dir) writes what `hf download deepseek-ai/DeepSeek-V4-Flash-0731
--local-dir DIR` leaves, in miniature: config.json (DeepSeek-V4 fields),
model.safetensors.index.json, real safetensors shards (8-byte little-endian
header length, JSON header with dtype/shape/data_offsets, then the bytes), a
tokenizer file and `.cache/huggingface/download/<file>.metadata` (commit
hash, etag, timestamp: huggingface_hub's _local_folder format). The breakers
below each damage it the way a real download goes wrong.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from pathlib import Path

REVISION = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
SHARDS = 3
TENSORS_PER_SHARD = 2


def shard_name(i: int, total: int = SHARDS) -> str:
    return f"model-{i:05d}-of-{total:05d}.safetensors"


def safetensors_bytes(tensors: dict[str, int]) -> bytes:
    """A valid safetensors file: tensors maps name -> element count (bf16)."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, count in tensors.items():
        size = count * 2
        header[name] = {"dtype": "BF16", "shape": [count], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads its header to 8 bytes
    return (
        struct.pack("<Q", len(raw))
        + raw
        + bytes(range(256)) * (offset // 256)
        + bytes(offset % 256)
    )


# What a DeepSeek-V4.1-Flash config.json names, as sglang 0.5.23 reads it
# (configs/deepseek_v41.py: text_config flattened into the top level, vision_config
# mapped onto vision_* fields); only the fields doctor reads.
V41_CONFIG = {
    "architectures": ["DeepseekV41ForCausalLM"],
    "model_type": "deepseek_v41",
    "text_config": {"index_topk": 512, "index_n_heads": 64, "index_head_dim": 128},
    "vision_config": {"num_hidden_layers": 24, "hidden_size": 1024},
    "image_token_id": 129264,
}


def write_checkpoint(
    model: Path, revision: str = REVISION, metadata: bool = True, config: dict | None = None
) -> Path:
    """`config`: another config.json (V41_CONFIG for a V4.1-Flash checkpoint)."""
    model.mkdir(parents=True, exist_ok=True)
    config = config or {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "index_topk": 512,
        "index_n_heads": 64,
        "index_head_dim": 128,
    }
    (model / "config.json").write_text(json.dumps(config))
    (model / "tokenizer.json").write_text('{"version": "1.0"}')
    weight_map = {}
    files = ["config.json", "tokenizer.json", "model.safetensors.index.json"]
    for i in range(1, SHARDS + 1):
        tensors = {f"model.layers.{i}.w{j}": 64 * (i + j) for j in range(TENSORS_PER_SHARD)}
        name = shard_name(i)
        (model / name).write_bytes(safetensors_bytes(tensors))
        weight_map.update(dict.fromkeys(tensors, name))
        files.append(name)
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    if metadata:
        meta = model / ".cache" / "huggingface" / "download"
        meta.mkdir(parents=True, exist_ok=True)
        stamp = time.time() + 5
        for name in files:
            etag = hashlib.sha256((model / name).read_bytes()).hexdigest()
            (meta / f"{name}.metadata").write_text(f"{revision}\n{etag}\n{stamp}\n")
    return model


# --- the ways a download goes wrong -------------------------------------------------------------


def remove_shard(model: Path, i: int = 2) -> str:
    name = shard_name(i)
    (model / name).unlink()
    return name


def truncate_shard(model: Path, i: int = 2, keep: int = 100) -> str:
    path = model / shard_name(i)
    path.write_bytes(path.read_bytes()[:-keep])
    return shard_name(i)


def empty_shard(model: Path, i: int = 1) -> str:
    (model / shard_name(i)).write_bytes(b"")
    return shard_name(i)


def corrupt_shard_bytes(model: Path, i: int = 3) -> str:
    """Same size, other content: only --hash can see it."""
    path = model / shard_name(i)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    return shard_name(i)


def swap_in_other_revision(model: Path, i: int = 1) -> str:
    """A shard holding other tensor names than the index says (mixed revisions)."""
    (model / shard_name(i)).write_bytes(safetensors_bytes({"model.layers.99.other": 64}))
    return shard_name(i)


def leave_incomplete(model: Path, i: int = 2) -> str:
    meta = model / ".cache" / "huggingface" / "download"
    name = f"{shard_name(i)}.{'0' * 64}.incomplete"
    (meta / name).write_bytes(b"partial")
    return name


def wrong_architecture(model: Path) -> None:
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
