"""flashinfer's SM120 sparse-MLA instantiation tables, read from its C++.

The wheel ships its sources (flashinfer/data/csrc/). Before 0.6.18 the prefill
table exists only there, so this parser is the independent reference both for
the kernel emulator and for the patch's prefill mirror.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


class CsrcFormatError(ValueError):
    """The .cu file no longer looks like what this parser was written for."""


@dataclass(frozen=True)
class PrefillTable:
    """dispatch_dsv4_single / dispatch_dsv4_dual of sparse_mla_sm120_prefill.cu."""

    single_heads: frozenset[int]
    single_topk: frozenset[int]
    dual_heads: frozenset[int]
    dual_topk: frozenset[int]
    dual_extra_pbs: frozenset[int]

    def accepts(self, num_heads: int, topk: int, extra_pbs: int | None) -> bool:
        """extra_pbs None: single cache; else the extra cache's page block."""
        if extra_pbs is None:
            return num_heads in self.single_heads and topk in self.single_topk
        return (
            num_heads in self.dual_heads
            and topk in self.dual_topk
            and extra_pbs in self.dual_extra_pbs
        )

    def as_mirror(self) -> dict[str, tuple[int, ...]]:
        """The shape of an entry of the patch's _SM12X_PREFILL_DSV4 mirror."""
        return {name: tuple(sorted(getattr(self, name))) for name in self.__dataclass_fields__}


def csrc_dir(flashinfer_package: Path) -> Path:
    return Path(flashinfer_package) / "data" / "csrc"


def _function_body(source: str, name: str) -> str:
    """Text of a C++ function from its signature to the matching close brace."""
    start = re.search(rf"\b{name}\s*\(", source)
    if start is None:
        raise CsrcFormatError(f"function {name} not found")
    open_at = source.index("{", start.end())
    depth = 0
    for pos in range(open_at, len(source)):
        depth += {"{": 1, "}": -1}.get(source[pos], 0)
        if depth == 0:
            return source[open_at : pos + 1]
    raise CsrcFormatError(f"function {name} is not closed")


def _macro(body: str, name: str) -> str:
    """Text of a `#define NAME(...)` with its backslash continuations."""
    match = re.search(rf"#define\s+{name}\s*\((?:[^\n]*\\\n)*[^\n]*", body)
    if match is None:
        raise CsrcFormatError(f"macro {name} not found")
    return match.group(0)


def _ints(pattern: str, text: str, what: str) -> frozenset[int]:
    values = frozenset(int(v) for v in re.findall(pattern, text))
    if not values:
        raise CsrcFormatError(f"no {what} found")
    return values


def parse_prefill(path: Path) -> PrefillTable:
    source = Path(path).read_text(encoding="utf-8")
    single = _function_body(source, "dispatch_dsv4_single")
    dual = _function_body(source, "dispatch_dsv4_dual")
    # single: `if/else if (topk == K) DISPATCH_BY_NH_CM(CM, K);`, heads from the
    # `case NH:` labels of the DISPATCH_BY_NH_CM switch.
    single_topk = _ints(r"topk\s*==\s*(\d+)\s*\)\s*\n?\s*DISPATCH_BY_NH_CM", single, "single topk")
    single_heads = _ints(r"case\s+(\d+):", _macro(single, "DISPATCH_BY_NH_CM"), "single heads")
    # dual: the generic path is gated by `if (topk != K) return false;`, its
    # heads are the cases of DISPATCH_BY_NH_PBSX, its extra page blocks the
    # `extra_page_block_size == P` branches that call it.
    dual_topk = _ints(r"if\s*\(\s*topk\s*!=\s*(\d+)\s*\)\s*return\s+false", dual, "dual topk")
    dual_heads = _ints(r"case\s+(\d+):", _macro(dual, "DISPATCH_BY_NH_PBSX"), "dual heads")
    generic = dual[dual.index("if (topk != ") :]
    dual_pbs = _ints(
        r"extra_page_block_size\s*==\s*(\d+)\s*\)\s*\{\s*DISPATCH_BY_NH_PBSX",
        generic,
        "dual extra page blocks",
    )
    return PrefillTable(single_heads, single_topk, dual_heads, dual_topk, dual_pbs)


def parse_decode_dsv4(path: Path) -> frozenset[tuple[int, int]]:
    """(num_heads, topk) pairs of launch_sparse_mla_decode_dsv4's DSV4_DISPATCH list."""
    source = Path(path).read_text(encoding="utf-8")
    body = _function_body(source, "launch_sparse_mla_decode_dsv4")
    pairs = frozenset(
        (int(h), int(k)) for h, k in re.findall(r"^\s*DSV4_DISPATCH\((\d+),\s*(\d+)\)", body, re.M)
    )
    if not pairs:
        raise CsrcFormatError("no DSV4_DISPATCH(H, K) entries found")
    return pairs


def decode_page_block_size(path: Path) -> int:
    """The only page block the DSV4 decode launcher takes (`page_block_size != P`)."""
    source = Path(path).read_text(encoding="utf-8")
    body = _function_body(source, "launch_sparse_mla_decode_dsv4")
    match = re.search(r"page_block_size\s*!=\s*(\d+)\)\s*return\s+false", body)
    if match is None:
        raise CsrcFormatError("decode page-block guard not found")
    return int(match.group(1))


def decode_orchestrator_min_tokens(path: Path) -> int:
    """N of the prefill orchestrator's `TVM_FFI_ICHECK_GT(num_tokens, N)`."""
    source = Path(path).read_text(encoding="utf-8")
    match = re.search(r"TVM_FFI_ICHECK_GT\(num_tokens,\s*(\d+)\)", source)
    if match is None:
        raise CsrcFormatError("num_tokens check not found in the orchestrator")
    return int(match.group(1))
