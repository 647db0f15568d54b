"""One reading of a server's /metrics, by sglang's metric names (the table in
deploy/monitoring/metrics.json, read from both wheels' code).

Every request is bounded (sm12x.http.transport: connect, stall and
whole-request deadlines, a cap on the body); the key goes as
`Authorization: Bearer`, as every sm12x client sends it (sglang itself exempts
/metrics, a proxy in front of it may not).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sm12x.http import redact, transport
from sm12x.http.transport import Limits

# sglang's /metrics is tens of kilobytes; a megabyte more than covers a DP8 rig.
MAX_BODY = 4 * 1024 * 1024

RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"
USAGE = "sglang:token_usage"
ACCEPT = "sglang:spec_accept_length"
SEQ_LENS = "sglang:decode_sum_seq_lens"
TOKENS = "sglang:generation_tokens_total"
RESPONSES = "sglang:http_responses_total"
ABORTED = "sglang:num_aborted_requests_total"
RANK_GAUGES = {RUNNING: "running", QUEUED: "queued", USAGE: "kv_usage", ACCEPT: "accept_length"}


@dataclass
class Rank:
    running: float = 0.0
    queued: float = 0.0
    kv_usage: float | None = None
    accept_length: float | None = None
    seq_lens: float | None = None  # sglang:decode_sum_seq_lens: every running sequence's length

    def context(self) -> float | None:
        """The running batch's mean sequence length (prompt and output so far)."""
        if self.seq_lens is None or self.running <= 0:
            return None
        return self.seq_lens / self.running


@dataclass
class Point:
    """What one scrape read, summed the way the alert rules sum it."""

    at: float  # seconds (time.monotonic() live; the series' own clock in tests)
    up: bool = True
    tokens: float | None = None  # sglang:generation_tokens_total, every label summed
    ranks: dict[str, Rank] = field(default_factory=dict)  # dp_rank ("0" without DP) -> gauges
    responses: dict[str, float] = field(default_factory=dict)  # "endpoint status" -> count
    aborted: float | None = None
    error: str | None = None  # why the scrape failed (up is False)

    def total(self, name: str) -> float:
        return sum(getattr(r, name) for r in self.ranks.values())

    def responses_total(self, only_5xx: bool = False) -> float:
        return sum(
            v for k, v in self.responses.items() if not only_5xx or k.rsplit(" ", 1)[-1][:1] == "5"
        )


def parse(text: str, at: float) -> Point:
    """A Point from Prometheus' text exposition (ValueError when it is not one)."""
    point = Point(at)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name in RANK_GAUGES or name == SEQ_LENS:
                rank = point.ranks.setdefault(labels.get("dp_rank", "0"), Rank())
                attr = RANK_GAUGES.get(name, "seq_lens")
                current = getattr(rank, attr)
                # several TP/PP ranks of one DP rank report the same batch: keep one
                setattr(rank, attr, value if current in (None, 0.0) else max(current, value))
            elif name == TOKENS:
                point.tokens = (point.tokens or 0.0) + value
            elif name == RESPONSES:
                key = f"{labels.get('endpoint', '?')} {labels.get('status_code', '?')}"
                point.responses[key] = point.responses.get(key, 0.0) + value
            elif name == ABORTED:
                point.aborted = (point.aborted or 0.0) + value
    return point


def limits(timeout: float) -> Limits:
    return Limits(
        timeout=timeout,
        stall=timeout,
        connect=min(timeout, 5.0),
        max_body=MAX_BODY,
        fail_fast_after=1 << 30,  # a server that comes back is read again
    )


def client(timeout: float) -> httpx.Client:
    return transport.client(limits(timeout))


def scrape(http: httpx.Client, url: str, api_key: str | None) -> Point:
    """The server's /metrics now; a Point with up=False and the reason when it
    does not answer with metrics."""
    at = time.monotonic()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        try:
            response = http.get(f"{url}/metrics", headers=headers)
        except (httpx.ReadError, httpx.RemoteProtocolError):
            # a pooled connection the server closed (it restarted): once more, anew
            response = http.get(f"{url}/metrics", headers=headers)
    except httpx.HTTPError as exc:
        return Point(at, up=False, error=redact.url(str(exc)) or type(exc).__name__)
    if response.status_code != 200:
        hint = (
            " (the key: SM12X_API_KEY or --api-key)" if response.status_code in (401, 403) else ""
        )
        return Point(at, up=False, error=f"HTTP {response.status_code} from /metrics{hint}")
    try:
        return parse(response.content.decode("utf-8"), at)
    except (ValueError, UnicodeDecodeError) as exc:
        return Point(at, up=False, error=f"/metrics is not Prometheus text ({exc})"[:200])
