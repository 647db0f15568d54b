"""The qualify bundle: result.json (its model and JSON Schema here) and the
folder it is written to, resumable.

A bundle is one folder of JSON and PNG only: result.json and the charts.
While a run is under way its finished steps (and a step's finished
concurrencies) are kept under `.work/` of the folder, one file each, written
atomically; a run started again on the folder skips what is there, so a
resumed bundle holds each step once. The finished run assembles result.json
from them and removes `.work/`.

The schema (sm12x/qualify/result.schema.json) is generated from these models
and embeds bench's result (sm12x-bench/1) for the bench steps; regenerate
with `python -m tools.regen` (or `python -m sm12x.qualify.bundle --write`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sm12x import generated
from sm12x.bench.result import BenchResult, Environment
from sm12x.qualify.load import RequestRecord

SCHEMA_ID: Literal["sm12x-qualify/1"] = "sm12x-qualify/1"
SCHEMA_FILE = Path(__file__).with_name("result.schema.json")
RESULT = "result.json"
WORK = ".work"

Verdict = Literal["pass", "fail", "skipped", "not-run"]
Phase = Literal["baseline", "throughput"]
Kind = Literal["doctor", "verify", "full-load", "bench", "long-context", "tune", "relaunch"]
Summary = Literal["qualified", "qualified, slow", "not qualified"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunRecords(_Model):
    """One load run: its workload, every request's record, and the figures
    computed from them (load.figures; `--check` computes them again)."""

    concurrency: int = Field(ge=1)
    input_len: int
    output_len: int
    num_prompts: int | None = Field(description="requests sent; null for a timed closed loop")
    records: list[RequestRecord]
    figures: dict[str, float | None]
    accept_length: float | None = Field(
        description="the server's avg_spec_accept_length after the run (a server reading: "
        "not recomputable from the records)"
    )


class Sample(_Model):
    t_s: float
    running: list[int] = Field(description="num_running_reqs per DP rank, rank order")


class FullLoadReading(_Model):
    per_rank_limit: int
    dp_ranks: int
    hold_s: float = Field(description="seconds every rank had to stay at its limit")
    samples: list[Sample]
    held_s: float = Field(description="the longest stretch every rank was at its limit")


class Step(_Model):
    name: str = Field(description="PHASE/KIND, e.g. baseline/bench")
    phase: Phase
    kind: Kind
    verdict: Verdict
    problems: list[str] = Field(default_factory=list)
    started: str | None = None
    finished: str | None = None
    runs: list[RunRecords] = Field(default_factory=list)
    bench: BenchResult | None = Field(default=None, description="bench's result (sm12x-bench/1)")
    full_load: FullLoadReading | None = None
    junit: str | None = Field(default=None, description="verify's JUnit XML")
    checks: dict[str, str] = Field(default_factory=dict, description="check -> verdict")
    table: dict[str, Any] | None = Field(
        default=None, description="tune's table and its sidecar, as written"
    )


class NodeFacts(_Model):
    rank: int = Field(description="0: the head, which serves the API")
    gpus: list[str] = Field(description="GPU names as nvidia-smi prints them")
    gpu_count: int
    driver: str | None
    unknown: str | None = Field(default=None, description="why its GPUs are not known")


class Provenance(_Model):
    mock: bool = Field(description="the server was `sm12x mock-server`: never a rig's result")
    environment: Environment = Field(description="bench's provenance (one code path)")
    track: str
    patch_series: dict[str, str] = Field(description="track -> sha256 of its patch series")
    model_revision: str | None
    weights_index_sha256: str | None
    driver: str | None
    cuda: str | None
    gpu_count: int
    pcie: list[dict[str, str]] = Field(description="per GPU: link generation and width")
    p2p: str | None = Field(description="nvidia-smi topo -p2p r, the matrix without names")
    iommu: str | None
    power_limits_w: list[float]
    unknown: dict[str, str] = Field(
        default_factory=dict, description="field -> why it could not be found"
    )
    nodes: list[NodeFacts] = Field(
        default_factory=list, description="multi-node recipes: every node's GPUs"
    )


class RecipeRef(_Model):
    name: str
    hash: str = Field(description="sha256 over the rendered argv and env, every track")
    track: str


class Verdicts(_Model):
    summary: Summary
    correctness: Literal["pass", "fail"]
    throughput: Literal["at or above", "slow", "not measured"]
    tolerance: float = Field(description="below anchor x (1 - tolerance) reads slow")
    lines: list[str] = Field(description="why, naming the step")


class QualifyResult(_Model):
    schema_: Literal["sm12x-qualify/1"] = Field(alias="schema", default=SCHEMA_ID)
    sm12x_version: str
    started: str
    finished: str | None
    recipe: RecipeRef
    provenance: Provenance
    settings: dict[str, Any]
    plan: list[str] = Field(description="every step this run was to take, in order")
    steps: list[Step]
    verdict: Verdicts | None
    charts: list[str] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def dump(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2) + "\n"


def generate_schema() -> str:
    return generated.json_schema(
        QualifyResult,
        "https://sm12x.invalid/schemas/qualify-result-1.json",
        "sm12x.qualify.bundle",
        "sm12x/qualify/bundle.py",
    )


def schema_problems(data: Any) -> list[str]:
    import jsonschema
    from pydantic import ValidationError

    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    problems = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message}"
        for e in sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    ]
    if problems:
        return problems
    try:
        QualifyResult.model_validate(data)
    except ValidationError as exc:
        return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return []


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class Folder:
    """The bundle folder and its work state (finished steps and concurrencies)."""

    def __init__(self, root: Path, identity: dict[str, Any], fresh: bool) -> None:
        self.root = root
        self.work = root / WORK
        if (root / RESULT).exists() and not self.work.exists() and not fresh:
            raise FileExistsError(str(root / RESULT))
        if fresh and root.exists():
            shutil.rmtree(root)
        self.work.mkdir(parents=True, exist_ok=True)
        ident = self.work / "identity.json"
        if ident.exists() and json.loads(ident.read_text()) != identity:
            raise ValueError("identity")
        write_atomic(ident, json.dumps(identity, sort_keys=True))

    def _step_path(self, name: str) -> Path:
        return self.work / "steps" / (name.replace("/", "--") + ".json")

    def step(self, name: str) -> Step | None:
        path = self._step_path(name)
        if not path.exists():
            return None
        return Step.model_validate_json(path.read_text())

    def save_step(self, step: Step) -> None:
        write_atomic(self._step_path(step.name), step.model_dump_json())

    def part(self, name: str, key: str) -> dict | None:
        path = self.work / "parts" / f"{name.replace('/', '--')}--{key}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def save_part(self, name: str, key: str, data: dict) -> None:
        write_atomic(
            self.work / "parts" / f"{name.replace('/', '--')}--{key}.json", json.dumps(data)
        )

    def finish(self, result: QualifyResult) -> Path:
        path = self.root / RESULT
        write_atomic(path, result.dump())
        shutil.rmtree(self.work, ignore_errors=True)
        return path


def main(argv: list[str]) -> int:
    return generated.main(argv, generate_schema, SCHEMA_FILE, "sm12x.qualify.bundle")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
