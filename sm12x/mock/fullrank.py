"""The stand-in's DP ranks, and the fault that corrupts only a full one.

What sglang does with several DP ranks (DP attention), and what this keeps:

- the data-parallel controller hands each new request to a rank, by default
  the next one in turn (`--load-balance-method round_robin`); a rank runs at
  most max_running_requests / dp_size requests (the rest wait);
- each rank's decode steps replay the smallest captured CUDA graph that holds
  its batch; the largest is `--cuda-graph-max-bs` (`-decode` on 0.5.23).

The `full-rank` fault is sglang 0.5.23's compact-verify full-rank padding
(issue 28): when a rank holds as many requests as its largest decode graph
has slots, no padding slot is left, the last request's verify row is handed
the graph's leftover rows, and that request's compressed KV is overwritten.
So only a request that fills its rank is hurt: its answer gets wrong tokens
in fluent text (a word or number changed, at least one), which only ground
truth sees. A rank that never reaches its largest graph (fewer requests in
flight, or a per-rank maximum below the graph) is never hurt: the ordinary
soak at 64 streams over four ranks of 64 passes; a load that fills every
rank does not.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field, replace

FAULT = "full-rank"
DESCRIPTION = (
    "wrong tokens only in a request that fills its DP rank (its running requests reach "
    "the largest decode graph, --cuda-graph-max-bs): compact verify's full-rank padding"
)
_TOKEN = re.compile(r"[A-Za-z]{3,}|\d+")


@dataclass(frozen=True)
class Layout:
    """The launch settings that place requests on ranks (sglang's flags)."""

    dp: int = 1
    max_running_requests: int = 256
    cuda_graph_max_bs: int = 64

    @property
    def per_rank(self) -> int:
        return max(1, self.max_running_requests // self.dp)

    def server_args(self) -> dict:
        return {
            "dp_size": self.dp,
            "max_running_requests": self.max_running_requests,
            "cuda_graph_max_bs": self.cuda_graph_max_bs,
        }


@dataclass
class Ranks:
    """Requests in flight per DP rank, placed round robin as sglang's controller does."""

    layout: Layout = field(default_factory=Layout)
    running: list[int] = field(default_factory=list)
    placed: dict[str, tuple[int, bool]] = field(default_factory=dict)
    turn: int = 0
    filled: int = 0  # requests that filled their rank, in all

    def __post_init__(self) -> None:
        self.running = [0] * self.layout.dp

    def admit(self, rid: str) -> None:
        rank = self.turn % self.layout.dp
        self.turn += 1
        self.running[rank] += 1
        # The rank is full when it holds its largest decode graph's slots; it can
        # only get there when its share of max running requests allows it.
        graph = self.layout.cuda_graph_max_bs
        full = self.layout.per_rank >= graph and self.running[rank] >= graph
        self.filled += full
        self.placed[rid] = (rank, full)

    def fills(self, rid: str) -> bool:
        return self.placed.get(rid, (0, False))[1]

    def release(self, rid: str) -> None:
        found = self.placed.pop(rid, None)
        if found is not None:
            self.running[found[0]] -= 1


def _change(text: str, rng: random.Random) -> str:
    """The text with one word or number changed (a number to another of as many
    digits, a word to another word of the text), fluent around it."""
    tokens = list(_TOKEN.finditer(text))
    if not tokens:
        return text + " the"
    match = tokens[rng.randrange(len(tokens))]
    old = match.group()
    if old.isdigit():
        new = str((int(old) + 1 + rng.randrange(8)) % 10 ** len(old)).zfill(len(old))
    else:
        words = sorted(
            {t.group().lower() for t in tokens if not t.group().isdigit()} - {old.lower()}
        )
        new = rng.choice(words) if words else old[::-1]
        new = new.capitalize() if old[0].isupper() else new
    return text[: match.start()] + new + text[match.end() :]


def corrupt(gen, seed: int):
    """The generation as a full rank leaves it: one token changed in the answer
    (the content, or a tool call's first text argument)."""
    rng = random.Random(seed)
    if gen.calls:
        call = gen.calls[0]
        for key, value in call.arguments.items():
            if isinstance(value, str) and value:
                call.arguments[key] = _change(value, rng)
                break
        else:
            call.arguments["note"] = "the"
    else:
        gen = replace(gen, content=_change(gen.content, rng))
    gen.corrupted = FAULT
    return gen
