"""Reading what `python -m sglang.benchmark.serving --output-file F` writes.

sglang appends one JSON object per run to F (serving.py, `benchmark()`,
sglang 0.5.16). The fields sm12x reads, as sglang names them:

    output_throughput        output tokens/s over the run
    mean_itl_ms, p99_itl_ms  inter-token latency
    mean_ttft_ms, p99_ttft_ms, median_ttft_ms
    mean_tpot_ms, mean_e2e_latency_ms, duration, request_throughput
    completed                requests that succeeded
    total_output_tokens
    accept_length            the server's `avg_spec_accept_length` read from
                             /server_info after the run (null when sglang could
                             not read it or speculative decoding is off)
    max_concurrency, random_input_len, random_output_len, random_range_ratio,
    dataset_name, backend, tag, server_info

Two traps in sglang's writer, both handled here:
- when every request fails it still writes a line: `completed: 0` and NaN
  latencies (json.dumps writes NaN, which strict JSON parsers refuse);
- a field a release does not write is simply absent.
A run is `failed` with no usable line or no completed request, `partial`
when fewer requests completed than were sent, and `ok` otherwise; a missing
or null metric is reported, never filled in.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from sm12x import bounded

# (our name, sglang's field, label, unit). The order is the table's.
METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("output_tokens_per_s", "output_throughput", "output throughput", "tok/s"),
    ("mean_itl_ms", "mean_itl_ms", "mean ITL", "ms"),
    ("p99_itl_ms", "p99_itl_ms", "p99 ITL", "ms"),
    ("mean_ttft_ms", "mean_ttft_ms", "mean TTFT", "ms"),
    ("p99_ttft_ms", "p99_ttft_ms", "p99 TTFT", "ms"),
    ("accept_length", "accept_length", "acceptance length", ""),
)
# Kept in the result beside METRICS, not compared with references.
EXTRA_FIELDS: tuple[tuple[str, str], ...] = (
    ("median_ttft_ms", "median_ttft_ms"),
    ("mean_tpot_ms", "mean_tpot_ms"),
    ("mean_e2e_latency_ms", "mean_e2e_latency_ms"),
    ("request_throughput", "request_throughput"),
    ("duration_s", "duration"),
    ("total_output_tokens", "total_output_tokens"),
)
# Without these a line says nothing about throughput: the run counts as failed.
REQUIRED_FIELDS = ("completed", "output_throughput")

# `--tag` sm12x passes to sglang, dumped back in the line: lets a recorded
# file say how many requests each run sent (sglang does not write that).
TAG_PREFIX = "sm12x"
_TAG = re.compile(rf"^{TAG_PREFIX}:c(?P<concurrency>\d+):n(?P<num_prompts>\d+)$")


def make_tag(concurrency: int, num_prompts: int) -> str:
    return f"{TAG_PREFIX}:c{concurrency}:n{num_prompts}"


def parse_tag(tag: Any) -> tuple[int, int] | None:
    match = _TAG.match(tag) if isinstance(tag, str) else None
    return (int(match["concurrency"]), int(match["num_prompts"])) if match else None


class LineError(ValueError):
    pass


def parse_line(text: str) -> dict[str, Any]:
    """One line as a dict; NaN/Infinity (sglang writes them) become None."""
    try:
        bounded.check_depth(text)
        data = json.loads(text, parse_constant=lambda _name: None)
    except bounded.TooBig as exc:
        raise LineError(f"not a line of sglang's benchmark ({exc})") from None
    except json.JSONDecodeError as exc:
        raise LineError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise LineError("not a JSON object")
    return data


def read_lines(text: str) -> list[dict[str, Any] | LineError]:
    """Every non-empty line of a .jsonl file, parsed or the error saying why not."""
    out: list[dict[str, Any] | LineError] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            out.append(parse_line(raw))
        except LineError as exc:
            out.append(LineError(f"line {number}: {exc}"))
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass
class Outcome:
    """One run as sm12x judges it."""

    concurrency: int
    status: Literal["ok", "partial", "failed"]
    metrics: dict[str, float | None] = field(default_factory=dict)
    extra: dict[str, float | None] = field(default_factory=dict)
    completed: int | None = None
    num_prompts: int | None = None
    problems: list[str] = field(default_factory=list)
    missing_fields: list[str] = field(default_factory=list)
    line: dict[str, Any] | None = None


def judge(line: dict[str, Any] | None, concurrency: int, num_prompts: int | None) -> Outcome:
    """Classify one run from its line (None: the benchmark wrote none)."""
    outcome = Outcome(concurrency=concurrency, status="ok", num_prompts=num_prompts, line=line)
    if line is None:
        outcome.status = "failed"
        outcome.problems.append("the benchmark wrote no result line")
        return outcome
    for name, source, *_ in METRICS:
        if source not in line:
            outcome.missing_fields.append(source)
        outcome.metrics[name] = _number(line.get(source))
    for name, source in EXTRA_FIELDS:
        outcome.extra[name] = _number(line.get(source))
    completed = line.get("completed")
    outcome.completed = completed if isinstance(completed, int) else None
    missing_required = [f for f in REQUIRED_FIELDS if f not in line]
    if missing_required:
        outcome.status = "failed"
        outcome.problems.append(
            f"sglang's line has no {', '.join(missing_required)}: not a serving-benchmark "
            "result, or a release that names its fields differently"
        )
        return outcome
    if not outcome.completed:
        outcome.status = "failed"
        outcome.problems.append(
            "no request completed (sglang: 'All requests failed'); the server's error is in "
            "the benchmark's output"
        )
        # sglang's NaN latencies and 0 throughput of a failed run are not figures.
        outcome.metrics = {name: None for name in outcome.metrics}
        outcome.extra = {name: None for name in outcome.extra}
        return outcome
    if num_prompts is not None and outcome.completed < num_prompts:
        outcome.status = "partial"
        outcome.problems.append(
            f"only {outcome.completed} of {num_prompts} requests completed: the figures "
            "cover the successful ones only"
        )
    for source in outcome.missing_fields:
        outcome.problems.append(f"sglang's line has no {source} field: shown as n/a")
    if "accept_length" not in outcome.missing_fields and outcome.metrics["accept_length"] is None:
        outcome.problems.append(
            "accept_length is null: sglang could not read avg_spec_accept_length from "
            "/server_info (speculative decoding off, or a router in front)"
        )
    return outcome


def concurrency_of(line: dict[str, Any]) -> int | None:
    tagged = parse_tag(line.get("tag"))
    if tagged:
        return tagged[0]
    value = line.get("max_concurrency")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def num_prompts_of(line: dict[str, Any]) -> int | None:
    tagged = parse_tag(line.get("tag"))
    return tagged[1] if tagged else None
