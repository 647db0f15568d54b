"""The JSON result of `sm12x bench`: what a run writes and what others submit back.

The JSON Schema (sm12x/bench/result.schema.json) is generated from these
models; tests/unit/test_bench_result.py proves the committed file equals
what this module generates. Regenerate with `scripts/regen` (or
`python -m sm12x.bench.result --write`).

Nothing here is a judgement of the hardware: `runs` hold what sglang
measured, `comparisons` put each beside the recipe's published figures with
`comparable` saying whether the source ran the same configuration.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sm12x import generated

SCHEMA_ID: Literal["sm12x-bench/1"] = "sm12x-bench/1"
SCHEMA_FILE = Path(__file__).with_name("result.schema.json")

Status = Literal["ok", "partial", "failed"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Metrics(_Model):
    """sglang's figures for one run; null when sglang wrote none (see `problems`)."""

    output_tokens_per_s: float | None = Field(description="sglang output_throughput")
    mean_itl_ms: float | None
    p99_itl_ms: float | None
    mean_ttft_ms: float | None
    p99_ttft_ms: float | None
    accept_length: float | None = Field(
        description="sglang accept_length: the server's avg_spec_accept_length after the run"
    )
    median_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    mean_e2e_latency_ms: float | None = None
    request_throughput: float | None = None
    duration_s: float | None = None
    total_output_tokens: float | None = None


class Run(_Model):
    concurrency: int = Field(ge=1, description="--max-concurrency")
    num_prompts: int | None = Field(description="requests sent; null when unknown")
    completed: int | None = Field(description="requests that succeeded")
    status: Status = Field(
        description="ok: every request completed; partial: some failed (figures cover "
        "the rest); failed: no usable result"
    )
    problems: list[str] = Field(default_factory=list)
    missing_fields: list[str] = Field(
        default_factory=list, description="fields sglang's line lacked"
    )
    accept_length_scope: Literal["per-run", "server-lifetime"] | None = Field(
        default=None,
        description="per-run: sm12x reset the server's acceptance counters before the run; "
        "server-lifetime: sglang's average since the server started (or the last reset)",
    )
    metrics: Metrics
    exit_code: int | None = Field(default=None, description="the benchmark process's exit code")
    wall_s: float | None = Field(default=None, description="seconds the benchmark process ran")
    log: str | None = Field(default=None, description="the run's log, relative to the result")
    sglang_line: dict[str, Any] | None = Field(
        default=None, description="sglang's own JSON line for the run, without server_info"
    )


class FigureComparison(_Model):
    metric: str
    measured: float | None
    reference: float
    reference_max: float | None = Field(default=None, description="upper end of a range")
    ratio: float | None = Field(
        description="measured / reference (against the range's lower end); for latencies "
        "below 1 is better"
    )
    ratio_max: float | None = Field(default=None, description="measured / reference_max")


class Comparison(_Model):
    concurrency: int
    source: str
    url: str | None = None
    config: str
    engine: str
    comparable: bool = Field(
        description="the source ran this recipe's configuration; false: context only, "
        "the ratio says nothing about this deployment"
    )
    figures: list[FigureComparison]


class Image(_Model):
    ref: str | None = Field(description="e.g. ghcr.io/sm12x/sm12x:0.1.0")
    id: str | None = Field(description="the local image id (sha256 of its config)")
    digest: str | None = Field(description="the registry digest (repo@sha256:...)")
    version: str | None = Field(description="the image's sm12x version (label or tag)")


class Environment(_Model):
    image: Image
    sglang_version: str | None
    flashinfer_version: str | None
    torch_version: str | None
    gpus: list[str] = Field(description="GPU names as nvidia-smi prints them, one per GPU")
    compute_capability: str | None
    gpu_driver: str | None
    sources: dict[str, str] = Field(
        description="how each value was found (server, container, this machine, flag)"
    )


class Client(_Model):
    sm12x_version: str
    python: str
    sglang_version: str | None = Field(description="the sglang whose benchmark ran")


class RecipeInfo(_Model):
    name: str
    summary: str
    status: str
    dspark_block_size: int
    gpu: str
    gpus_per_node: int
    nodes: int


class Workload(_Model):
    backend: str
    dataset_name: Literal["random-ids", "random"]
    dataset_path: str | None = Field(
        description="file name of the dataset given (--dataset-path), never its folder"
    )
    input_len: int
    output_len: int
    range_ratio: float
    concurrencies: list[int]
    extra_args: list[str] = Field(default_factory=list)


class BenchResult(_Model):
    schema_: Literal["sm12x-bench/1"] = Field(alias="schema", default=SCHEMA_ID)
    sm12x_version: str
    started: str | None = Field(description="ISO 8601, UTC")
    finished: str | None
    recipe: RecipeInfo
    environment: Environment
    client: Client
    server: dict[str, Any] = Field(
        description="sglang's server arguments that shape performance, from /server_info"
    )
    workload: Workload
    runs: list[Run]
    comparisons: list[Comparison]
    warnings: list[str] = Field(default_factory=list)
    passed: bool = Field(description="every run completed every request")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def dump(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2) + "\n"


def generate_schema() -> str:
    return generated.json_schema(
        BenchResult,
        "https://sm12x.invalid/schemas/bench-result-1.json",
        "sm12x.bench.result",
        "sm12x/bench/result.py",
    )


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def validate(data: Any) -> list[str]:
    """Problems of a submitted result, one line each; [] when it is valid."""
    import jsonschema
    from pydantic import ValidationError

    validator = jsonschema.Draft202012Validator(load_schema())
    problems = [
        f"{'.'.join(str(p) for p in error.absolute_path) or '(top level)'}: {error.message}"
        for error in sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    ]
    if problems:
        return problems
    try:
        BenchResult.model_validate(data)
    except ValidationError as exc:
        return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return []


def main(argv: list[str]) -> int:
    return generated.main(argv, generate_schema, SCHEMA_FILE, "sm12x.bench.result")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
