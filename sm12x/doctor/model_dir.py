"""Is the checkpoint folder complete? Without loading a byte of weights.

- config.json parses and is a checkpoint of the recipe's model line
  (sm12x.recipe.lines: V4-Flash-0731 or V4.1-Flash; the architecture sglang
  serves, the vision tower where the recipe serves it);
- model.safetensors.index.json parses; its weight_map names the shards;
- every shard is there, and its size is exactly what its own safetensors
  header says (8-byte header length + header + the end of the last tensor),
  so a truncated or padded download is caught; the tensors the index puts
  in a shard are in that shard's header (catches shards of two revisions);
- no `.incomplete` file is left by an interrupted `hf download`;
- the revision, where the download left metadata (`hf download --local-dir`
  writes .cache/huggingface/download/<file>.metadata: commit hash, etag,
  timestamp) or the folder is a Hub cache snapshot (snapshots/<hash>/);
- optionally (--hash) each shard's sha256 against the etag the Hub gave.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm12x.recipe.lines import LINES, V4_FLASH_0731, V41_FLASH, Line

INDEX = "model.safetensors.index.json"
# sglang 0.5.16's EntryClass for the target model (srt/models/deepseek_v4.py);
# tests/unit/test_doctor_real.py reads it from the wheel. V4.1 is served by the
# same class (sglang 0.5.23 maps its architecture onto it).
ARCHITECTURE = V4_FLASH_0731.architectures[0]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
HF_METADATA = Path(".cache") / "huggingface" / "download"
_MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class HeaderError(ValueError):
    pass


def read_header(path: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's header and the file size it implies."""
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise HeaderError("shorter than a safetensors header")
        length = int.from_bytes(prefix, "little")
        if length <= 0 or length > _MAX_HEADER:
            raise HeaderError(f"header length {length} is not plausible: not a safetensors file")
        raw = f.read(length)
    if len(raw) < length:
        raise HeaderError("ends inside its header")
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise HeaderError("its header is not JSON") from None
    if not isinstance(header, dict):
        raise HeaderError("its header is not a JSON object")
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            end = max(end, int(entry["data_offsets"][1]))
        except (KeyError, TypeError, ValueError, IndexError):
            raise HeaderError(f"tensor {name} has no data_offsets") from None
    return header, 8 + length + end


@dataclass
class Finding:
    verdict: str  # ok | warn | fail | skip
    detail: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


def _line_of_config(config: dict) -> str | None:
    """The model line a config.json belongs to, as sglang 0.5.23 tells them apart:
    model_type deepseek_v41 (or a DeepseekV41 architecture) is V4.1
    (entrypoints/openai/chat_encoding.is_deepseek_v41_arch)."""
    architectures = config.get("architectures") or [""]
    arch = architectures[0] if isinstance(architectures, list) and architectures else ""
    model_type = config.get("model_type")
    if model_type == V41_FLASH.model_type or "DeepseekV41" in str(arch):
        return V41_FLASH.name
    if model_type == V4_FLASH_0731.model_type or "DeepseekV4" in str(arch):
        return V4_FLASH_0731.name
    return None


def _has_vision_tower(config: dict) -> bool:
    # V4.1 nests it as vision_config (configs/deepseek_v41.py flattens it into
    # vision_* fields) or writes vision_n_layers directly; 0 layers: no tower.
    vision = config.get("vision_config")
    if isinstance(vision, dict) and vision.get("num_hidden_layers", 1):
        return True
    return bool(config.get("vision_n_layers"))


def check_config(model: Path, line: Line = V4_FLASH_0731, vision: bool = False) -> Finding:
    """config.json is there and is a checkpoint of `line` that sglang serves."""
    path = model / "config.json"
    if not path.is_file():
        return Finding(
            "fail",
            f"no config.json in {model}",
            "download the whole checkpoint (see .env.example), not only the shards",
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        return Finding("fail", f"config.json is unreadable ({exc})", "download it again")
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list):
        architectures = [str(architectures)]
    arch = architectures[0] if architectures else None
    named = ", ".join(map(str, architectures)) or "no architecture"
    found_line = _line_of_config(config)
    data = {"architectures": architectures, "line": found_line}
    if found_line is not None and found_line != line.name:
        other = LINES[found_line]
        return Finding(
            "fail",
            f"config.json is {other.title} ({named}, model_type "
            f"{config.get('model_type', '?')}), but the recipe serves {line.title}",
            f"point SM12X_MODEL_DIR at {line.hf_ids[0]}, or pick a recipe of the "
            f'{other.name} line (model.line in recipes/*.yaml; README "Model lines")',
            data,
        )
    if arch in line.refused_architectures:
        return Finding(
            "fail",
            f"config.json names {arch}: {line.refused_architectures[arch]}",
            f"use a checkpoint whose config names {line.architectures[0]}",
            data,
        )
    if arch not in line.architectures:
        return Finding(
            "fail",
            f"config.json names {named}, not {' or '.join(line.architectures)}: this is not "
            f"{line.title}",
            f"point SM12X_MODEL_DIR at {line.hf_ids[0]}",
            data,
        )
    if vision and not _has_vision_tower(config):
        return Finding(
            "fail",
            f"the recipe serves {line.title}'s vision tower, but config.json has no "
            "vision_config (or vision_n_layers is 0)",
            "download the full checkpoint, or use a recipe with model.vision: false",
            data,
        )
    return Finding(
        "ok",
        f"{line.title}: {arch}, model_type {config.get('model_type', '?')}"
        + (", vision tower" if vision else ""),
        data=data,
    )


def _human(size_bytes: int) -> str:
    size = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{size_bytes} B"
        size /= 1024
    return f"{size_bytes} B"


def check_shards(
    model: Path, *, verify_hashes: bool = False, progress: Callable[[str], None] | None = None
) -> Finding:
    index_path = model / INDEX
    if not index_path.is_file():
        return Finding(
            "fail",
            f"no {INDEX} in {model}",
            "download the whole checkpoint again (hf download ... --local-dir DIR)",
        )
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        weight_map: dict[str, str] = index["weight_map"]
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError("empty weight_map")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Finding("fail", f"{INDEX} is unreadable ({exc})", "download it again")
    by_shard: dict[str, list[str]] = {}
    for tensor, shard in weight_map.items():
        by_shard.setdefault(shard, []).append(tensor)
    missing, empty, wrong_size, bad, wrong_tensors, mismatched_hash = [], [], [], [], [], []
    total = 0
    for shard in sorted(by_shard):
        path = model / shard
        if not path.is_file():  # also a dangling Hub-cache symlink
            missing.append(shard)
            continue
        size = path.stat().st_size
        total += size
        if size == 0:
            empty.append(shard)
            continue
        try:
            header, expected = read_header(path)
        except (HeaderError, OSError) as exc:
            bad.append(f"{shard} ({exc})")
            continue
        if size != expected:
            wrong_size.append(f"{shard} ({_human(size)}, its header says {_human(expected)})")
            continue
        absent = [t for t in by_shard[shard] if t not in header]
        if absent:
            wrong_tensors.append(
                f"{shard} (lacks {absent[0]}"
                + (f" and {len(absent) - 1} more" if len(absent) > 1 else "")
                + ")"
            )
        if verify_hashes:
            etag = _metadata(model, shard)[1]
            if etag and _SHA256.match(etag):
                if progress:
                    progress(f"sha256 {shard}")
                if _sha256(path) != etag:
                    mismatched_hash.append(shard)
    incomplete = (
        sorted(str(p.relative_to(model)) for p in (model / HF_METADATA).rglob("*.incomplete"))
        if (model / HF_METADATA).is_dir()
        else []
    )
    data = {
        "shards": len(by_shard),
        "bytes": total,
        "missing": missing,
        "empty": empty,
        "wrong_size": wrong_size,
        "unreadable": bad,
        "wrong_tensors": wrong_tensors,
        "incomplete_downloads": incomplete,
        "hash_mismatch": mismatched_hash,
    }
    problems = []
    for label, items in (
        ("missing", missing),
        ("empty", empty),
        ("truncated or padded", wrong_size),
        ("not safetensors", bad),
        ("holding other tensors than the index says", wrong_tensors),
        ("with a sha256 other than the Hub's", mismatched_hash),
    ):
        if items:
            shown = ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")
            problems.append(f"{len(items)} shard(s) {label}: {shown}")
    if incomplete:
        problems.append(f"an interrupted download left {incomplete[0]}")
    if problems:
        return Finding(
            "fail",
            f"{len(by_shard)} shards in the index; " + "; ".join(problems),
            "resume the download (the same `hf download ... --local-dir DIR` command fetches "
            "only what is missing or wrong), then run doctor again",
            data,
        )
    checked = " and sha256" if verify_hashes else ""
    return Finding(
        "ok",
        f"all {len(by_shard)} shards present, sizes{checked} match ({_human(total)})",
        data=data,
    )


def _metadata(model: Path, filename: str) -> tuple[str | None, str | None]:
    """(commit hash, etag) recorded by `hf download --local-dir`, if any."""
    path = model / HF_METADATA / f"{filename}.metadata"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None, None
    commit = lines[0].strip() if lines else None
    etag = lines[1].strip() if len(lines) > 1 else None
    return commit, etag


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(16 * 1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def revision_of(model: Path) -> tuple[str | None, str]:
    """The checkpoint's commit hash and where it was read."""
    commit, _ = _metadata(model, "config.json")
    if commit and _HEX40.match(commit):
        return commit, f"{HF_METADATA}/config.json.metadata"
    resolved = model.resolve()
    if resolved.parent.name == "snapshots" and _HEX40.match(resolved.name):
        return resolved.name, "the Hub cache snapshot folder name"
    return None, "no download metadata"


def check_revision(model: Path, expected: str | None) -> Finding:
    found, source = revision_of(model)
    if expected is None:
        return Finding(
            "skip",
            f"revision {found[:12] if found else 'unknown'} ({source}); the "
            "recipe pins no revision (model.revision_why says why)",
        )
    if found is None:
        return Finding(
            "skip",
            f"revision unknown ({source}); the recipes expect {expected[:12]}",
            data={"expected": expected},
        )
    if found != expected:
        return Finding(
            "warn",
            f"revision {found[:12]} ({source}), the recipes were written for {expected[:12]}",
            f"download --revision {expected} into a fresh folder, or keep this one knowing "
            "the recipes were not written for it",
            {"found": found, "expected": expected},
        )
    return Finding(
        "ok",
        f"revision {found[:12]}, the recipes' ({source})",
        data={"found": found, "expected": expected},
    )


def check_tokenizer(model: Path) -> Finding:
    present = [f for f in TOKENIZER_FILES if (model / f).is_file()]
    if present:
        return Finding("ok", ", ".join(present))
    return Finding(
        "warn",
        "no tokenizer.json or tokenizer_config.json",
        "download the whole checkpoint; the server and bench need the tokenizer",
    )
