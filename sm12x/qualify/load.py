"""The measuring client and the figures: per-request records, and every figure
computed from them by one function (`figures`), which `--check` runs again.

Each request is a streamed chat completion of a prompt of about `input_len`
tokens (random words, never recorded) asking for `output_len` tokens with
`ignore_eos` (sglang's sampling parameter: the request lives its full length,
as bench_serving's random workload does). A record keeps times and token
counts only: when the request started and got its first token, when it ended
(seconds from the run's start), the tokens the server's usage counted, and
an error class on failure; never the prompt or the text.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from pydantic import BaseModel, ConfigDict

WORDS = [
    "river",
    "stone",
    "cloud",
    "paper",
    "lantern",
    "orbit",
    "signal",
    "meadow",
    "copper",
    "harbor",
    "thread",
    "window",
    "garden",
    "silver",
    "engine",
    "valley",
    "pocket",
    "marble",
    "winter",
    "candle",
    "ladder",
    "forest",
    "mirror",
    "planet",
    "saddle",
    "tunnel",
    "violet",
    "anchor",
    "basket",
    "feather",
    "rocket",
]


class RequestRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    start_s: float
    ttft_s: float | None
    end_s: float
    prompt_tokens: int | None
    output_tokens: int
    ok: bool
    error: str | None = None


@dataclass(frozen=True)
class Load:
    base_url: str
    model: str
    api_key: str | None
    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    timeout: float = 600.0
    seed: int = 1
    # Closed loop until this many seconds pass or `stop` is set (full load).
    duration_s: float | None = None
    stop: threading.Event | None = None


def prompt(rng: random.Random, tokens: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(1, tokens - 8)))


async def _one(client: httpx.AsyncClient, load: Load, text: str, t0: float) -> RequestRecord:
    body = {
        "model": load.model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": load.output_len,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 1.0,
        "chat_template_kwargs": {"thinking": False},
    }
    start = time.monotonic() - t0
    first: float | None = None
    usage: dict = {}
    chunks = 0
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"HTTP {response.status_code}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if event.get("usage"):
                    usage = event["usage"]
                for choice in event.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("reasoning_content"):
                        chunks += 1
                        if first is None:
                            first = time.monotonic() - t0
    except (httpx.HTTPError, RuntimeError, ValueError) as exc:
        name = str(exc) if isinstance(exc, RuntimeError) else type(exc).__name__
        return RequestRecord(
            start_s=start, ttft_s=first, end_s=time.monotonic() - t0,
            prompt_tokens=None, output_tokens=0, ok=False, error=name,
        )  # fmt: skip
    end = time.monotonic() - t0
    out = int(usage.get("completion_tokens") or 0)
    ok = first is not None and out > 0
    return RequestRecord(
        start_s=round(start, 6),
        ttft_s=None if first is None else round(first - start, 6),
        end_s=round(end, 6),
        prompt_tokens=usage.get("prompt_tokens"),
        output_tokens=out,
        ok=ok,
        error=None if ok else "no tokens or no usage",
    )


async def _run(load: Load, on_done: Callable[[int], None]) -> list[RequestRecord]:
    rng = random.Random(load.seed)
    headers = {"Authorization": f"Bearer {load.api_key}"} if load.api_key else {}
    limits = httpx.Limits(max_connections=load.concurrency + 4)
    timeout = httpx.Timeout(load.timeout, connect=10.0)
    records: list[RequestRecord] = []
    t0 = time.monotonic()
    async with httpx.AsyncClient(
        base_url=load.base_url, headers=headers, limits=limits, timeout=timeout
    ) as client:
        if load.duration_s is not None:
            stop_at = t0 + load.duration_s

            stop = load.stop or threading.Event()

            async def stream() -> None:
                while time.monotonic() < stop_at and not stop.is_set():
                    records.append(await _one(client, load, prompt(rng, load.input_len), t0))
                    on_done(len(records))

            await asyncio.gather(*(stream() for _ in range(load.concurrency)))
            return records
        texts = [prompt(rng, load.input_len) for _ in range(load.num_prompts)]
        gate = asyncio.Semaphore(load.concurrency)

        async def bounded(text: str) -> None:
            async with gate:
                records.append(await _one(client, load, text, t0))
                on_done(len(records))

        await asyncio.gather(*(bounded(t) for t in texts))
    return sorted(records, key=lambda r: r.start_s)


def run(load: Load, on_done: Callable[[int], None] = lambda n: None) -> list[RequestRecord]:
    return asyncio.run(_run(load, on_done))


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000.0, 3)


def figures(records: list[RequestRecord]) -> dict[str, float | None]:
    """Every figure a bundle states for a run, from its records alone."""
    ok = [r for r in records if r.ok]
    out = sum(r.output_tokens for r in ok)
    span = (max(r.end_s for r in records) - min(r.start_s for r in records)) if records else 0.0
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    itls = [
        (r.end_s - r.start_s - r.ttft_s) / (r.output_tokens - 1)
        for r in ok
        if r.ttft_s is not None and r.output_tokens > 1
    ]
    return {
        "completed": float(len(ok)),
        "total_output_tokens": float(out),
        "duration_s": round(span, 6),
        "output_tokens_per_s": round(out / span, 3) if span > 0 else None,
        "request_throughput": round(len(ok) / span, 6) if span > 0 else None,
        "mean_ttft_ms": _ms(_mean(ttfts)),
        "p99_ttft_ms": _ms(_p99(ttfts)),
        "mean_itl_ms": _ms(_mean(itls)),
        "mean_e2e_latency_ms": _ms(_mean([r.end_s - r.start_s for r in ok])),
    }
