"""What every check gets: the endpoint, its clients, the options, the model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from verify.client import Endpoint


@dataclass
class Options:
    min_accept_length: float = 2.0
    accept_floor_source: str = "default"
    metrics_url: str | None = None
    soak_concurrency: int = 64
    soak_rounds: int = 3
    soak_max_tokens: int = 2048
    skip: set[str] = field(default_factory=set)
    only: set[str] = field(default_factory=set)
    # --compare-url: the same recipe without speculative decoding (verify/compare.py)
    compare_endpoint: Endpoint | None = None
    compare_min_agreement: float = 0.8
    # --accuracy: the lm-eval gate (verify/accuracy.py); None: not asked for
    accuracy: object | None = None
    # --full-load: every DP rank full (verify/fullload.py's FullLoad); None: off
    full_load: object | None = None
    # --deadline: time.monotonic() when the whole run must end; checks not
    # started by then are not run, requests in flight are cut off.
    deadline: float | None = None
    # The model line's expectations (the recipe's model section, sm12x.recipe.lines):
    # the id /v1/models must list, and whether the image check runs.
    expected_model: str | None = None
    line: str | None = None
    vision: bool = False


@dataclass
class Context:
    endpoint: Endpoint
    options: Options = field(default_factory=Options)
    model: str | None = None
    requests_sent: int = 0
    # Told a line while a request waits on a silent server (the terminal's progress).
    waiting: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        # One bounded transport for both clients: one connection pool, and one
        # fail-fast count over every request of the run.
        self.transport = self.endpoint.transport(self.waiting)
        self.http = self.endpoint.http(self.transport)
        self.client = self.endpoint.openai(self.transport)

    def payload(self, messages: list[dict], **extra) -> dict:
        body = {"model": self.model, "messages": messages, "temperature": 0, "max_tokens": 512}
        body.update(extra)
        return body

    def close(self) -> None:
        self.http.close()
        self.client.close()
        self.transport.close()
