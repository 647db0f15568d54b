"""The mock server's fault modes: what each reproduces, and the set a server runs with.

Each is one way a real deployment goes wrong that verify must catch. Those of
the model change its text (model.py, corruption.py); those of the serving
layer rewrite sglang's response (app.py). Kept apart from the server so
`sm12x mock-server --help` lists them without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sm12x.mock import corruption, fullrank

FAULTS = {
    "healthy": "no fault",
    "loop": "under concurrency, some outputs end in a repetition loop (depth-5 style)",
    "salad": "under concurrency, some outputs turn into word salad (depth-5 style)",
    "think-leak": "with thinking on, a second </think> leaks reasoning and the tag into content",
    "no-reasoning-parser": "served without --reasoning-parser: reasoning stays in content",
    "no-tool-parser": "served without --tool-call-parser: raw DSML markup in content",
    "bad-tool-json": "the model writes tool arguments as JSON with its closing brace lost",
    "truncated-tool-stream": "streamed tool-call arguments stop after their first fragment",
    "tool-id-change": "streamed tool-call fragments carry a new id each time",
    "wrong-finish-reason": "tool calls end with finish_reason 'stop' instead of 'tool_calls'",
    "no-usage": "no usage in responses, stream_options.include_usage ignored",
    "no-done": "streams end without the final 'data: [DONE]'",
    "stall": "streams stall after a few chunks (no bytes, connection left open)",
    "http-500": "chat completions answer HTTP 500",
    "hang": "every request is accepted and never answered",
    "no-spec": "speculative decoding off: no acceptance length, the gauge reads 0",
    "low-accept": "speculative decoding on but accepting almost nothing (1.1)",
    "router-info": "answers server info like sglang-router: router fields, no /server_info or /metrics",
    "image-blind": "images are accepted but never reach the model (a vision tower not loaded): "
    "it counts shapes without looking",
}
FAULTS.update(corruption.FAULTS)  # wrong tokens in fluent text (corruption.py)
FAULTS[fullrank.FAULT] = fullrank.DESCRIPTION  # only at a full DP rank (fullrank.py)


@dataclass
class Faults:
    active: set[str] = field(default_factory=set)
    # loop/salad: corrupt every `every`-th request while at least
    # `min_concurrency` requests are in flight (single requests stay clean).
    every: int = 8
    min_concurrency: int = 4
    stall_seconds: float = 3600.0
    die_after: int = 0  # exit the process after this many chat requests (0: never)

    def __contains__(self, name: str) -> bool:
        return name in self.active

    @classmethod
    def parse(cls, spec: str | list[str] | None, **kw) -> Faults:
        names: set[str] = set()
        for part in [spec] if isinstance(spec, str) or spec is None else spec:
            for name in (part or "").split(","):
                name = name.strip()
                if name and name != "healthy":
                    if name not in FAULTS:
                        raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
                    names.add(name)
        return cls(active=names, **kw)
