"""A CPU model of DeepSeek-V4's compress-plan write rule (c_plan.cuh), per sglang tree.

DSPARK verifies up to depth + 1 rows per request per step; under ragged verify
(SGLANG_RAGGED_VERIFY_MODE=compact / cap-accept) each request of a batch has its own
width, 1..depth + 1. A verify is served correctly only if (1) every row some
acceptance keeps and the next compression reads back is written to the compressor's
state ring, and (2) no row the verify writes lands on a ring slot that still holds a
row the next compression reads. The GPU planner decides (1); the ring's size decides
(2). This module models both, for the three rules the project's trees carry:

- ``0.5.17-pristine``: the GPU planner writes from min(boundary, seq - min(spare, 4))
  (``kMaxMTPDraftTokens = 4``);
- ``0.5.17-patched``: 0020's ``first_write_position`` (every row of an extend that
  fits in the ring's spare room);
- ``0.5.23``: its own ``mtp_pad = ring - window + 2`` (and the per-request ring a
  unified KV pool uses for c4).

tests/unit/test_compress_plan_model.py checks the model entry for entry against the
write plans an NVIDIA H200 produced (benchmarks/dsv4_compact_check.sh, recorded under
docs/benchmarks/dsv4-compact-h200/), then uses it to find the widest verify each rule
serves, which must be the ``verify_rows`` patches.toml gives the depth lint.
"""

from __future__ import annotations

from dataclasses import dataclass

# The harness's geometry (benchmarks/dsv4_kernel_check.py): SWA page per ratio, the
# speculative rings (get_compress_state_ring_size), and the req_to_token row length.
SWA_PAGE = {4: 128, 128: 256}
SPEC_RING = {4: 16, 128: 256}
MAX_TOKENS = 8192
RULES = ("0.5.17-pristine", "0.5.17-patched", "0.5.23")


def rule_of(version: str, state: str) -> str:
    """The write rule a recorded tree runs (0.5.23's plan is the same patched or not:
    its only patch there, 0022, is in store.cuh)."""
    return "0.5.23" if version == "0.5.23" else f"{version}-{state}"


@dataclass(frozen=True)
class Geometry:
    ratio: int
    ring: int
    req_ring: bool = False

    @property
    def overlap(self) -> bool:
        return self.ratio == 4

    @property
    def window(self) -> int:
        return self.ratio * (2 if self.overlap else 1)

    @property
    def swa_page(self) -> int:
        return SWA_PAGE[self.ratio]


def boundary(g: Geometry, seq_len: int) -> int:
    """Where the next compression of a request of seq_len tokens reads back to."""
    return seq_len // g.ratio * g.ratio - (g.ratio if g.overlap else 0)


def first_written(rule: str, g: Geometry, seq_len: int, extend_len: int) -> int:
    """The first position of the extend whose row goes to the ring (before the
    overlap rule below adds a page's last rows)."""
    spare = g.ring - g.ratio
    if rule == "0.5.17-pristine":
        return min(boundary(g, seq_len), seq_len - min(spare, 4))
    if rule == "0.5.17-patched":
        return min(boundary(g, seq_len), seq_len - min(extend_len, spare))
    if rule == "0.5.23":
        pad = g.ring - g.window + 2 if g.ring > g.window else 0
        return min(boundary(g, seq_len), seq_len - pad)
    raise ValueError(f"unknown rule {rule!r}: one of {', '.join(RULES)}")


def writes(rule: str, g: Geometry, seq_len: int, position: int, extend_len: int) -> bool:
    if position >= first_written(rule, g, seq_len, extend_len):
        return True
    # c4 also writes the last rows of each SWA page (its shared-page layout), except
    # with 0.5.23's per-request ring.
    per_request = rule == "0.5.23" and g.req_ring
    sps = g.swa_page
    return g.overlap and not per_request and position % sps >= sps - g.ratio


def slot(g: Geometry, request: int, position: int) -> int:
    """sglang's slot formulas: compute_loc (c4, shared pages), compute_c128_loc and
    0.5.23's compute_req_ring_loc (per-request rings)."""
    if g.ratio == 128 or g.req_ring:
        return request * g.ring + position % g.ring
    swa_loc = request * MAX_TOKENS + position
    return (swa_loc // g.swa_page) * g.ring + swa_loc % g.ring


def plan_writes(
    rule: str, g: Geometry, seq_lens: list[int], extend_lens: list[int]
) -> list[tuple[int, int]]:
    """The write plan the GPU planner produces: (ragged id, ring slot), sorted."""
    out, start = [], 0
    for request, (seq, ext) in enumerate(zip(seq_lens, extend_lens)):
        for j in range(ext):
            position = seq - ext + j
            if writes(rule, g, seq, position, ext):
                out.append((start + j, slot(g, request, position)))
        start += ext
    return sorted(out)


def read_back(g: Geometry, kept: int) -> range:
    """The positions the next compression reads from the ring when kept tokens stay."""
    return range(max(boundary(g, kept), 0), kept)


def verify_is_served(rule: str, g: Geometry, seq_len: int, width: int) -> bool:
    """A verify of `width` rows ending at seq_len, for every acceptance outcome: the
    rows the next compression reads are in the ring, and none of them shares its slot
    with a row this verify wrote for another position (rows before the verify were
    written by earlier steps under the same rule, which this checks too, step by step)."""
    first = seq_len - width
    written = [p for p in range(first, seq_len) if writes(rule, g, seq_len, p, width)]
    by_slot: dict[int, int] = {}
    for p in written:  # the last write to a slot wins
        by_slot[slot(g, 0, p)] = p
    for accepted in range(1, width + 1):
        kept = first + accepted
        for p in read_back(g, kept):
            owner = by_slot.get(slot(g, 0, p))
            if p >= first and owner != p:
                return False  # a verify row that is read back was not written
            if p < first and owner is not None and owner != p:
                return False  # an older row read back was overwritten by this verify
    return True


def widest_served(
    rule: str,
    g: Geometry,
    widths: range = range(1, 17),
    seq_lens: range = range(4096, 4096 + 2 * 256),
) -> int:
    """The widest verify (rows) served at every alignment, or 0."""
    best = 0
    for width in widths:
        if all(verify_is_served(rule, g, s, width) for s in seq_lens):
            best = width
        else:
            break
    return best
