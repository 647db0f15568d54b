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
    # The SWA page the pool keeps, where it is not the kernel harness's SWA_PAGE (the
    # full-rank chain models the served pool's 256).
    page: int | None = None

    @property
    def overlap(self) -> bool:
        return self.ratio == 4

    @property
    def window(self) -> int:
        return self.ratio * (2 if self.overlap else 1)

    @property
    def swa_page(self) -> int:
        return self.page if self.page is not None else SWA_PAGE[self.ratio]


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


# --- DeepSeek-V4.1's ratio-2 pair ring (sglang 0.5.23) --------------------------------
#
# V4.1 compresses at ratios 2 and 1 only (its config's compress_ratios; no c4/c128
# layer, so nothing above applies to it). Ratio 1 keeps no state: every row is its own
# latent, written at its own slot (c1_out_loc is raw_out_loc). Ratio 2 pools each odd
# position with its even predecessor; the pending even row parks in a per-request
# ring of `c2_ring(drafts)` rows at req * ring + pos % ring (c2.cuh, CompressStatePool).
# In a verify block (C2Mode::Verify, `draft_len` rows per request, request-major) the
# block's first row takes its partner from the ring, every later row from the row
# before it; every even row parks. The kernel checks `num_tokens % draft_len == 0` and
# `ring > draft_len`: it serves uniform (static) verify only.


def c2_ring(num_draft_tokens: int) -> int:
    """get_compress_state_ring_size(2, num_draft_tokens) of sglang 0.5.23
    (mem_cache/deepseek_v4_memory_pool.py): a power of two >= 2 + the drafts."""
    if num_draft_tokens <= 0:
        return 2
    return 1 << (num_draft_tokens + 1).bit_length()


@dataclass(frozen=True)
class C2Row:
    row: int
    request: int  # the request whose ring the kernel uses (its `req` entry)
    position: int
    partner: tuple[str, int]  # ("row", i) or ("ring", slot)
    parks_at: int | None  # the ring slot an even row writes, else None


def c2_verify_rows(
    draft_len: int, ring: int, first_positions: list[int], req_of_row: list[int] | None = None
) -> list[C2Row]:
    """What C2Mode::Verify does with `len(first_positions)` blocks of `draft_len` rows:
    block b's rows are positions first_positions[b] ...; `req_of_row` is the `req`
    tensor (token_req_indices: each request repeated draft_len times, by default)."""
    if ring <= draft_len:
        raise ValueError(f"the pair-state ring ({ring}) must be wider than the draft length")
    out = []
    for b, first in enumerate(first_positions):
        for x in range(draft_len):
            row = b * draft_len + x
            req = b if req_of_row is None else req_of_row[row]
            pos = first + x
            partner = ("ring", req * ring + (pos - 1) % ring) if x == 0 else ("row", row - 1)
            parks = req * ring + pos % ring if pos % 2 == 0 else None
            out.append(C2Row(row, req, pos, partner, parks))
    return out


def c2_verify_is_served(draft_len: int, ring: int, first: int) -> bool:
    """One request's verify of draft_len rows from `first`, for every acceptance: the
    next step's first row, if odd, finds its even partner in the ring (parked by this
    verify, or by an earlier step when the partner precedes it), and no row this
    verify parks overwrote a slot another of its rows parked."""
    rows = c2_verify_rows(draft_len, ring, [first])
    parked: dict[int, int] = {}
    for r in rows:
        if r.parks_at is not None:
            if r.parks_at in parked:
                return False  # two rows of one verify race for one slot
            parked[r.parks_at] = r.position
    for accepted in range(1, draft_len + 1):
        nxt = first + accepted
        if nxt % 2 == 0:
            continue  # an even row parks; it reads no partner
        want = nxt - 1
        owner = parked.get(want % ring)
        if want >= first and owner != want:
            return False
        if want < first and owner is not None:
            return False  # the earlier step's parked partner was overwritten
    return True


def c2_widest_served(max_rows: int = 16, firsts: range = range(4096, 4096 + 64)) -> int:
    """The widest uniform verify (rows = depth + 1) the ring sglang sizes for it serves
    at every alignment, or 0."""
    best = 0
    for rows in range(1, max_rows + 1):
        ring = c2_ring(rows)
        if all(c2_verify_is_served(rows, ring, f) for f in firsts):
            best = rows
        else:
            break
    return best


def compact_misassigned(draft_len: int, verify_lens: list[int]) -> tuple[int, int]:
    """Rows packed by verify_lens (compact ragged verify) against the request index
    sglang 0.5.23's V4.1 paths use for them (dsv41_sparse.token_req_indices:
    repeat_interleave(req, draft_len), cut to the packed length): (rows given to
    another request, rows in all)."""
    owner = [req for req, n in enumerate(verify_lens) for _ in range(n)]
    used = [req for req in range(len(verify_lens)) for _ in range(draft_len)][: len(owner)]
    return sum(1 for a, b in zip(owner, used) if a != b), len(owner)


def c2_park_slot(request: int, position: int, ring: int) -> int | None:
    """Where the ratio-2 kernel parks a row (even positions only), in `request`'s ring."""
    return request * ring + position % ring if position % 2 == 0 else None
