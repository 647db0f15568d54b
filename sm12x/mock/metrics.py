"""The stand-in's `/metrics`: sglang's own metric names, types and labels, with
values that follow what the stand-in is doing.

Names, types and extra labels are sglang's (observability/metrics_collector.py
and utils/common.py's HTTP middleware in both tracks; deploy/monitoring/metrics.json
is the table read from the wheels, and tests/unit/test_monitoring.py holds this
module to it). The scheduler's gauges carry sglang's scheduler labels
(model_name, engine_type, tp_rank, pp_rank, moe_ep_rank, and dp_rank per DP
rank when there are several); the tokenizer manager's counters and histograms
carry model_name and engine_type. What the values follow:

- requests running and queued: the requests in flight, spread over the DP
  ranks; above a rank's share of the max running requests the rest wait in
  the queue;
- token usage: the running requests' share of the KV pool (a fixed budget of
  tokens per request, so it rises with load);
- generation throughput: the output tokens of the last ten seconds;
- acceptance: the DSPARK acceptance length the server runs with, 1.1 under
  the `low-accept` fault and 0 under `no-spec` (as /server_info says);
- counters and latency histograms: every finished chat completion's prompt and
  output tokens, time to first token, inter-token latency and end-to-end time;
- HTTP responses by endpoint and status code (`http-500` shows as 5xx).
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# sglang's scheduler collector labels (metrics_collector.py: SchedulerMetricsCollector
# context); dp_rank only under DP attention.
SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
TOKENIZER_LABELS = ("model_name", "engine_type")
# The KV pool the stand-in pretends to have, in tokens per DP rank, and what a
# running request holds of it.
POOL_TOKENS = 262144
TOKENS_PER_REQUEST = 4096
WINDOW_S = 10.0
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass
class Finished:
    prompt_tokens: int
    completion_tokens: int
    streaming: bool
    ttft_s: float
    e2e_s: float


class Metrics:
    def __init__(
        self, model_name: str, *, dp: int, gamma: int, max_running: int, spec: bool
    ) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        self.dp, self.gamma, self.max_running, self.spec = dp, gamma, max_running, spec
        self.labels = SCHEDULER_LABELS + (("dp_rank",) if dp > 1 else ())
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, self.labels, registry=r)

        self.running = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.queued = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.accept_length = gauge(
            "sglang:spec_accept_length", "The average acceptance length of speculative decoding."
        )
        self.accept_rate = gauge(
            "sglang:spec_accept_rate", "The average acceptance rate of speculative decoding."
        )
        self.draft_tokens = gauge(
            "sglang:spec_num_draft_tokens", "Currently active speculative_num_draft_tokens."
        )
        tok = (*TOKENIZER_LABELS, "is_streaming")
        self.prompt_tokens = Counter(
            "sglang:prompt_tokens_total", "Number of prefill tokens processed.", tok, registry=r
        )
        self.generation_tokens = Counter(
            "sglang:generation_tokens_total",
            "Number of generation tokens processed.",
            tok,
            registry=r,
        )
        self.requests = Counter(
            "sglang:num_requests_total", "Number of requests processed.", tok, registry=r
        )
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            tok,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            TOKENIZER_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            tok,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.responses = Counter(
            "sglang:http_responses_total",
            "Total number of HTTP responses by endpoint and status code",
            ("endpoint", "status_code", "method"),
            registry=r,
        )
        self._recent: collections.deque[tuple[float, int]] = collections.deque()

    def _rank_labels(self, rank: int) -> dict[str, str]:
        labels = dict.fromkeys(self.labels, "0")
        labels.update(model_name=self.model_name, engine_type="unified")
        if self.dp > 1:
            labels["dp_rank"] = str(rank)
        return labels

    def finished(self, done: Finished) -> None:
        streaming = "true" if done.streaming else "false"
        tok = {"model_name": self.model_name, "engine_type": "unified", "is_streaming": streaming}
        self.prompt_tokens.labels(**tok).inc(done.prompt_tokens)
        self.generation_tokens.labels(**tok).inc(done.completion_tokens)
        self.requests.labels(**tok).inc()
        self.ttft.labels(**tok).observe(done.ttft_s)
        self.e2e.labels(**tok).observe(done.e2e_s)
        if done.completion_tokens > 1:
            self.itl.labels(model_name=self.model_name, engine_type="unified").observe(
                (done.e2e_s - done.ttft_s) / (done.completion_tokens - 1)
            )
        self._recent.append((time.monotonic(), done.completion_tokens))

    def response(self, endpoint: str, method: str, status: int) -> None:
        self.responses.labels(endpoint=endpoint, status_code=str(status), method=method).inc()

    def render(
        self, *, in_flight: int, accept_length: float, per_rank: list[int] | None = None
    ) -> bytes:
        """The exposition, with the gauges set from the server's state now.
        `per_rank`: the requests in flight on each DP rank where the server placed
        them (fullrank.Ranks); None: in_flight spread evenly."""
        now = time.monotonic()
        while self._recent and self._recent[0][0] < now - WINDOW_S:
            self._recent.popleft()
        throughput = sum(n for _, n in self._recent) / WINDOW_S
        # sglang splits --max-running-requests over the DP ranks.
        cap = max(1, self.max_running // self.dp)
        for rank in range(self.dp):
            share = (
                per_rank[rank]
                if per_rank is not None
                else in_flight // self.dp + (1 if rank < in_flight % self.dp else 0)
            )
            running = min(share, cap)
            labels = self._rank_labels(rank)
            self.running.labels(**labels).set(running)
            self.queued.labels(**labels).set(share - running)
            self.token_usage.labels(**labels).set(
                min(1.0, running * TOKENS_PER_REQUEST / POOL_TOKENS)
            )
            self.throughput.labels(**labels).set(throughput / self.dp)
            self.accept_length.labels(**labels).set(accept_length if self.spec else 0.0)
            self.accept_rate.labels(**labels).set(
                max(0.0, (accept_length - 1) / self.gamma) if self.spec else 0.0
            )
            self.draft_tokens.labels(**labels).set(self.gamma + 1 if self.spec else 0)
        return generate_latest(self.registry)
