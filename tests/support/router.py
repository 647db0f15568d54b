"""Real processes for the router tests and the router benchmark.

- Backend: the mock sglang server as its own process
  (`python -m sm12x.mock`, i.e. `sm12x mock-server`), as a rig looks to the router.
- Router: `sm12x router`, i.e. the same code path the compose `router`
  service runs, which execs the pinned sglang-router (same pid).
- load(): concurrent streamed chat requests, each recorded with its start and
  end time and whether it completed (HTTP 200 and `data: [DONE]`).

Every process is stopped by its pid (stop()); every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from sm12x.mock.app import MODEL_ID
from sm12x.mock.server import free_port
from tests.support import http_client

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable

# Timings scaled down by 10 for tests, thresholds kept: health checks every
# 1 s instead of 10 s (3 misses to drop, 2 successes to rejoin, as in
# sm12x/deploy/router.py), and the circuit breaker, which keeps a rig that failed 10
# requests in a row out for 60 s by default even once /health is back, opens
# for 6 s.
FAST_HEALTH = (
    "--health-check-interval-secs",
    "1",
    "--health-check-timeout-secs",
    "2",
    "--cb-timeout-duration-secs",
    "6",
    "--worker-startup-check-interval",
    "1",
    "--log-level",
    "warn",
)


def wait_until(predicate, timeout: float, what: str, interval: float = 0.05) -> float:
    """Seconds until predicate() was true; AssertionError after timeout."""
    start = time.monotonic()
    while True:
        try:
            if predicate():
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _stop(proc: subprocess.Popen | None, sig: int = signal.SIGKILL) -> None:
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@dataclass
class Backend:
    """A mock sglang server process on a fixed port (so it can come back); its key,
    if any, in the environment (SM12X_API_KEY), as the mock server takes it."""

    port: int = field(default_factory=free_port)
    args: tuple[str, ...] = ()
    log: Path | None = None
    api_key: str | None = None
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Backend:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [PY, "-m", "sm12x.mock", "--port", str(self.port), *self.args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **({"SM12X_API_KEY": self.api_key} if self.api_key else {})},
        )
        return self

    def wait_ready(self, timeout: float = 120) -> Backend:
        # A stand-in imports sglang's serving code and DeepSeek-V4's tokenizer
        # before it listens: seconds each, and several start at once on 2 cores.
        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"mock server on {self.port} exited {self.proc.returncode}")
            return http_client.get(self.url + "/health", timeout=1).status_code == 200

        wait_until(up, timeout, f"the mock server on port {self.port}")
        return self

    def stop(self, sig: int = signal.SIGKILL) -> None:
        _stop(self.proc, sig)


@dataclass
class Router:
    """`sm12x router` (the compose router's entrypoint) in front of backends."""

    workers: list[str]
    extra: tuple[str, ...] = FAST_HEALTH
    env: dict[str, str] = field(default_factory=dict)
    log: Path | None = None
    port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self) -> Router:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SM12X_ROUTER_WORKERS": " ".join(self.workers),
            "SM12X_ROUTER_BIND": "127.0.0.1",
            "SM12X_ROUTER_PORT": str(self.port),
            "SM12X_ROUTER_METRICS_BIND": "127.0.0.1",
            "SM12X_ROUTER_METRICS_PORT": str(self.metrics_port),
            **self.env,
        }
        if "SM12X_API_KEY" not in self.env:
            env.pop("SM12X_API_KEY", None)  # the caller's own key must not leak in
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [PY, "-m", "sm12x.cli", "router", "--", *self.extra],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        return self

    @property
    def headers(self) -> dict[str, str]:
        key = self.env.get("SM12X_API_KEY")
        return {"Authorization": f"Bearer {key}"} if key else {}

    def workers_health(self) -> dict[str, bool]:
        # With an API key the router guards /workers too.
        body = http_client.get(self.url + "/workers", headers=self.headers, timeout=2).json()
        return {w["url"]: w["is_healthy"] for w in body["workers"]}

    def wait_ready(self, count: int, timeout: float = 60) -> float:
        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"the router exited {self.proc.returncode} (log: {self.log})")
            health = self.workers_health()
            return sum(health.values()) >= count

        return wait_until(ready, timeout, f"{count} healthy worker(s) behind the router")

    def outcomes(self, outcome: str) -> dict[str, int]:
        """Requests per worker with this outcome (success, failure), from the
        router's Prometheus metrics (its circuit breaker's counters)."""
        text = http_client.get(self.metrics_url, timeout=2).text
        pattern = rf'smg_worker_cb_outcomes_total\{{worker="([^"]+)",outcome="{outcome}"\}} (\d+)'
        return {url: int(value) for url, value in re.findall(pattern, text)}

    def successes(self) -> dict[str, int]:
        return self.outcomes("success")

    def stop(self) -> None:
        _stop(self.proc, signal.SIGTERM)


@dataclass(frozen=True)
class Outcome:
    start: float
    end: float
    ok: bool
    ttft: float | None
    tokens: int
    detail: str


def chat_body(client: int, n: int, max_tokens: int = 16, fresh: bool = False) -> dict:
    """One client's n-th request. Requests share a prefix (a cache-aware router
    keeps them on one rig) unless `fresh`: then each starts with new text, like
    new conversations, which the router places by cache size and load."""
    text = f"client {client} request {n}: say something"
    if fresh:
        text = f"{uuid.uuid4().hex} {text}"
    return {
        "model": MODEL_ID,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def one_request(
    client: httpx.AsyncClient, url: str, body: dict, headers: dict | None = None
) -> Outcome:
    start = time.monotonic()
    ttft, tokens, done, status = None, 0, False, None
    try:
        async with client.stream(
            "POST", url + "/v1/chat/completions", json=body, headers=headers
        ) as response:
            status = response.status_code
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    continue
                chunk = json.loads(data)
                if ttft is None and any(
                    c["delta"].get("content") or c["delta"].get("reasoning_content")
                    for c in chunk.get("choices") or []
                ):
                    ttft = time.monotonic() - start  # the first generated text
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
        ok = status == 200 and done
        return Outcome(
            start,
            time.monotonic(),
            ok,
            ttft,
            tokens,
            "" if ok else f"HTTP {status}, [DONE] {'seen' if done else 'missing'}",
        )
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        return Outcome(
            start, time.monotonic(), False, ttft, tokens, f"{type(exc).__name__}: {exc}"[:200]
        )


async def _load(
    url: str,
    concurrency: int,
    stop: asyncio.Event,
    outcomes: list[Outcome],
    max_tokens: int,
    requests: int | None,
    headers: dict | None,
    fresh: bool,
) -> None:
    counter = iter(range(10**9))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, connect=5), limits=limits) as client:

        async def worker(i: int) -> None:
            while not stop.is_set():
                n = next(counter)
                if requests is not None and n >= requests:
                    return
                body = chat_body(i, n, max_tokens, fresh)
                outcomes.append(await one_request(client, url, body, headers))

        await asyncio.gather(*(worker(i) for i in range(concurrency)))


def load(
    url: str,
    concurrency: int,
    seconds: float | None = None,
    requests: int | None = None,
    max_tokens: int = 16,
    during=None,
    headers: dict | None = None,
    fresh: bool = False,
) -> list[Outcome]:
    """Run a load for `seconds` (or `requests` in all); `during(stop_event)` runs
    in a thread alongside (e.g. kills a backend) and the load stops when it returns."""
    outcomes: list[Outcome] = []

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(
            _load(url, concurrency, stop, outcomes, max_tokens, requests, headers, fresh)
        )
        if during is not None:
            await asyncio.to_thread(during)
            stop.set()
        elif seconds is not None:
            await asyncio.sleep(seconds)
            stop.set()
        await asyncio.wait_for(task, timeout=120)

    asyncio.run(main())
    return outcomes
