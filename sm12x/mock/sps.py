"""The stand-in's DSpark scheduler as sglang's SPS profiler sees it.

What sglang does, read from its code (0.5.17 and 0.5.23 agree), and what
this enforces:

- The DSpark worker keeps per-step decode records only when its info dumper
  is on (`SGLANG_DSPARK_ENABLE_SPS_RECORD=1`, or SGLANG_DSPARK_DEBUG_DUMP
  naming `core,step_cpu_time`: dspark_observability.resolve_enabled_components),
  one dumper per DP rank (attention-TP rank 0); the scheduler then adds
  `dspark_info_record` = {mode, gamma, verify_num_draft_tokens (gamma + 1),
  components, records, simulate_acc_len} to that rank's internal state on
  /server_info. Off, the key is absent.
- `simulate_acc_len` is SGLANG_SIMULATE_ACC_LEN when > 0, else None; a value
  other than 1.0 needs a verify-all schedule (static), or the worker refuses
  to start (dspark_worker_v2). At 1.0 every step commits exactly the bonus
  token, so a request with `ignore_eos` lives exactly max_new_tokens steps.
- A record per decode step: forward_ct, num_running_reqs (the rank's
  batch), num_verify_tokens (the replayed CUDA-graph tier x (gamma + 1):
  the smallest captured batch >= the batch), step_cpu_ms (None for the first
  decode step after a prefill: the dumper's clock restarts on a non-decode
  step). DP ranks step in lockstep (DP attention), so forward_ct is shared.
- /flush_cache refuses (400) while requests run or wait; /abort_request
  {"abort_all": true} ends every request, and /generate then answers.
- /generate takes a batch of `input_ids`, requests spread over the DP ranks
  (round robin), at most effective_max_running_requests_per_dp running per
  rank, the rest waiting.
- The off-diagonal sweep (`--fracs`, sglang 0.5.23): POST /set_internal_state
  {"server_args": {"dspark_force_budget_frac": f}} pins the fraction on every
  DP rank's planner (internal_state.py accepts f in (0, 1] or null, only on a
  DSpark worker, and answers one `updated` bool per DP rank; any other key is
  "not supported": false).
- Each step's verify layout is the served wheel's own planner's
  (sm12x.mock.planner: DSparkVerifyPlanner, built per DP rank from the
  tree's dspark_planner.py, with what stands in for the runtime named there).
  The planner reads the pin only through its budget planner
  (compute_budget: int(f x bs x gamma) above the one-row floor), and its
  schedule_layout decides whether that budget is used: static verify has no
  layout; compact verify with an uninitialized SPS table (no
  --speculative-dspark-sps-table-path: build_sps_cost_table's one-sample
  placeholder, or a one-sample file) is verify-all, the full-width uniform
  layout whatever the pin; otherwise the confidence top-k's verify lengths in
  the smallest captured token bucket (bs x (gamma + 1) per captured bs) that
  covers them. A step's record carries the width the step replays: the
  layout's graph tier in compact mode, else the batch's full tier (cap-accept
  caps acceptance inside the static graph). The mock prices the step from
  that width, never from the pin.

The step time is a model (a fixed cost, a cost per running request and one per
verify token), the real time between steps a small sleep, so a profile runs in
seconds.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sm12x.mock import planner
from sm12x.mock.planner import RankPlanner


@dataclass
class SpsConfig:
    """The server's launch settings that matter to the profiler."""

    gamma: int = 7
    tp: int = 4
    dp: int = 4
    ep: int = 4
    cuda_graph_max_bs: int = 64
    max_running_per_dp: int = 64
    record: bool = False
    simulate_acc_len: float | None = None
    mode: str = "static"
    step_interval_s: float = 0.004
    # A /generate of exactly this many requests never makes progress (a wedged round).
    stall_batch: int | None = None
    token_capacity: int = 800_000
    # --speculative-dspark-sps-table-path (None: the launch names no table).
    sps_table_path: str | None = None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **launch: Any) -> SpsConfig:
        """The env variables sglang reads, as sglang reads them (environ.py: EnvBool,
        EnvFloat, EnvTuple, EnvStr)."""
        env = os.environ if environ is None else environ
        dump = {t.strip() for t in env.get("SGLANG_DSPARK_DEBUG_DUMP", "").split(",") if t.strip()}
        record = env.get("SGLANG_DSPARK_ENABLE_SPS_RECORD", "").lower() in ("1", "true", "yes")
        record = record or "all" in dump or {"core", "step_cpu_time"} <= dump
        simulate = float(env.get("SGLANG_SIMULATE_ACC_LEN", "-1"))
        mode = env.get("SGLANG_RAGGED_VERIFY_MODE", "static")
        if mode not in ("static", "cap-accept", "compact"):
            raise ValueError(
                f"invalid SGLANG_RAGGED_VERIFY_MODE={mode!r}; expected one of "
                "'static', 'cap-accept', 'compact'"
            )
        if simulate > 0 and simulate != 1.0 and mode != "static":
            raise ValueError(
                "SGLANG_SIMULATE_ACC_LEN>1.0 with DSpark requires a verify-all "
                f"schedule; got mode={mode!r}, simulate_acc_len={simulate}"
            )
        return cls(
            record=record, simulate_acc_len=simulate if simulate > 0 else None, mode=mode, **launch
        )

    @property
    def captured(self) -> list[int]:
        """Decode batch sizes captured in CUDA graphs (sglang's default shape)."""
        sizes = [1, 2, 4, 8, *range(16, self.cuda_graph_max_bs + 1, 8)]
        return sorted({s for s in sizes if s <= self.cuda_graph_max_bs} | {self.cuda_graph_max_bs})

    @property
    def token_buckets(self) -> list[int]:
        """Compact verify's captured graph sizes in tokens (sglang's
        _build_ragged_verify_token_buckets)."""
        return sorted({bs * (self.gamma + 1) for bs in self.captured})

    def step_ms(self, verify_tokens: int, running: int = 0) -> float:
        return round(12.0 + 0.04 * verify_tokens + 0.05 * running, 4)


@dataclass
class _Req:
    rank: int
    max_new_tokens: int
    done: asyncio.Event
    generated: int = 0
    slot: int = -1  # its row in the rank's request pool, while it runs


@dataclass
class Scheduler:
    config: SpsConfig
    forward_ct: int = 0
    running: list[list[_Req]] = field(default_factory=list)
    waiting: list[_Req] = field(default_factory=list)
    records: list[list[dict]] = field(default_factory=list)
    fresh: list[bool] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)  # the size of every /generate seen
    stalled: list[_Req] = field(default_factory=list)
    task: asyncio.Task | None = None
    forced_frac: float | None = None  # dspark_force_budget_frac (the off-diagonal pin)
    # One wheel planner per DP rank (plan()); none: static verify's full tier.
    planners: list[RankPlanner] = field(default_factory=list)
    spare: RankPlanner | None = None  # one more, for priced()

    def __post_init__(self) -> None:
        ranks = self.config.dp
        self.running = [[] for _ in range(ranks)]
        self.records = [[] for _ in range(ranks)]
        self.fresh = [True] * ranks

    def plan(self, site: Path, source: Path | None = None) -> Scheduler:
        """Lay out every step with the planner of the sglang tree at `site`
        (`source`: a copy of its dspark_planner.py instead)."""
        module = planner.load(site, source)
        self.planners = [RankPlanner(module, self.config) for _ in range(self.config.dp)]
        self.spare = RankPlanner(module, self.config)
        for rank_planner in self.planners:
            rank_planner.pin(self.forced_frac)
        return self

    @property
    def verifies_all(self) -> bool:
        """The wheel's planner verifies every row (compact verify with an
        uninitialized SPS table): the pin is never read."""
        return any(p.verifies_all for p in self.planners)

    def busy(self) -> bool:
        return bool(self.waiting) or any(self.running)

    def admit(self) -> None:
        still = []
        for req in self.waiting:
            if len(self.running[req.rank]) < self.config.max_running_per_dp:
                taken = {r.slot for r in self.running[req.rank]}
                req.slot = next(s for s in range(self.config.max_running_per_dp) if s not in taken)
                if self.planners:
                    self.planners[req.rank].admit(req.slot)
                self.running[req.rank].append(req)
                self.fresh[req.rank] = True  # a prefill step: the dumper's clock restarts
            else:
                still.append(req)
        self.waiting = still

    def tier(self, batch: int) -> int:
        return (
            next(s for s in self.config.captured if s >= batch)
            if batch <= self.config.cuda_graph_max_bs
            else batch
        )

    def step(self) -> None:
        self.admit()
        if not any(self.running):
            return
        self.forward_ct += 1
        for rank, reqs in enumerate(self.running):
            if not reqs:
                continue
            tokens = self.verify_tokens(reqs, rank)
            if self.config.record:
                self.records[rank].append(
                    {
                        "forward_ct": self.forward_ct,
                        "bs": len(reqs),
                        "mode": self.config.mode,
                        "num_running_reqs": len(reqs),
                        "num_verify_tokens": tokens,
                        "step_cpu_ms": None
                        if self.fresh[rank]
                        else self.config.step_ms(tokens, len(reqs)),
                    }
                )
            self.fresh[rank] = False
            for req in reqs:
                req.generated += 1 if self.config.simulate_acc_len == 1.0 else self.config.gamma
            finished = [r for r in reqs if r.generated >= r.max_new_tokens]
            for req in finished:
                reqs.remove(req)
                req.done.set()

    def verify_tokens(self, reqs: list[_Req], rank: int) -> int:
        """The graph width a step of `reqs` replays on `rank`, in tokens: the
        layout the wheel's planner returns for it. Compact verify replays the
        layout's graph tier (its verify lengths rounded up to a captured token
        bucket); without a layout (static verify, or a batch past the captured
        grid) and in cap-accept mode (whose layout caps acceptance inside the
        static graph) the step replays the batch's full-width tier."""
        batch = len(reqs)
        full = self.tier(batch) * (self.config.gamma + 1)
        if not self.planners:
            return full
        layout = self.planners[rank].layout([r.slot for r in reqs])
        if layout is None or self.config.mode != "compact":
            return full
        verified = int(layout.verify_lens.sum())
        if not batch <= verified <= layout.graph_num_tokens:
            raise RuntimeError(
                f"the planner's layout verifies {verified} tokens for {batch} requests "
                f"in a {layout.graph_num_tokens}-token graph"
            )
        return int(layout.graph_num_tokens)

    def priced(self, batch: int, frac: float | None) -> int:
        """The tokens a step of `batch` requests replays at pinned fraction
        `frac`, laid out by a spare planner built with the running ones (at
        boot, as sglang loads its table then), so their state is untouched."""
        reqs = [_Req(0, 1, asyncio.Event(), slot=i) for i in range(batch)]
        probe = Scheduler(self.config, forced_frac=frac)
        if self.spare is not None:
            probe.planners = [self.spare]
            self.spare.pin(frac)
            for req in reqs:
                self.spare.admit(req.slot)
        return probe.verify_tokens(reqs, 0)

    async def loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            self.step()
            # The interval is the step's period: the planners' CPU time counts.
            spent = loop.time() - started
            await asyncio.sleep(max(0.0005, self.config.step_interval_s - spent))

    def ensure_running(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.loop())

    def abort_all(self) -> None:
        for req in self.waiting + self.stalled + [r for reqs in self.running for r in reqs]:
            req.done.set()
        self.waiting, self.stalled = [], []
        self.running = [[] for _ in self.running]

    def internal_state(self, rank: int, base: dict) -> dict:
        state = {
            **base,
            "dp_size": self.config.dp,
            "cuda_graph_config": {
                "decode": {
                    "backend": "full",
                    "max_bs": self.config.cuda_graph_max_bs,
                    "bs": self.config.captured,
                }
            },
            "effective_max_running_requests_per_dp": self.config.max_running_per_dp,
            "memory_usage": {"weight": 71.2, "token_capacity": self.config.token_capacity},
        }
        if self.config.record:
            state["dspark_info_record"] = {
                "mode": self.config.mode,
                "gamma": self.config.gamma,
                "verify_num_draft_tokens": self.config.gamma + 1,
                "components": ["core", "step_cpu_time"],
                "records": list(self.records[rank]),
                "simulate_acc_len": self.config.simulate_acc_len,
            }
        return state

    def server_args(self) -> dict:
        return {
            "tp_size": self.config.tp,
            "dp_size": self.config.dp,
            "ep_size": self.config.ep,
            "enable_dp_attention": self.config.dp > 1,
            "speculative_dspark_block_size": self.config.gamma,
            "disable_cuda_graph": False,
            "cuda_graph_max_bs": self.config.cuda_graph_max_bs,
            "speculative_dspark_sps_table_path": self.config.sps_table_path,
        }

    # --- routes -------------------------------------------------------------------

    async def generate(self, request: Request) -> Response:
        body = await request.json()
        ids = body.get("input_ids")
        if not isinstance(ids, list) or not ids:
            return JSONResponse(
                {"error": {"message": "input_ids: a list is required"}}, status_code=400
            )
        batch = ids if isinstance(ids[0], list) else [ids]
        params = body.get("sampling_params") or {}
        max_new = int(params.get("max_new_tokens") or 128)
        self.batches.append(len(batch))
        reqs = [_Req(i % self.config.dp, max_new, asyncio.Event()) for i in range(len(batch))]
        if len(batch) == self.config.stall_batch:
            self.stalled.extend(reqs)  # a wedged round: accepted, never scheduled
        else:
            self.waiting.extend(reqs)
            self.ensure_running()
        await asyncio.gather(*(r.done.wait() for r in reqs))
        out = [
            {
                "text": "",
                "output_ids": [0] * r.generated,
                "meta_info": {
                    "id": uuid.uuid4().hex,
                    "completion_tokens": r.generated,
                    "finish_reason": {
                        "type": "length" if r.generated >= r.max_new_tokens else "abort"
                    },
                },
            }
            for r in reqs
        ]
        return JSONResponse(out if isinstance(ids[0], list) else out[0])

    async def flush_cache(self, request: Request) -> Response:
        if self.busy():
            return Response("Flush cache failed.\n", status_code=400)
        return Response(
            "Cache flushed.\nPlease check backend logs for more details. (When there "
            "are running or waiting requests, the operation will not be performed.)\n"
        )

    async def set_internal_state(self, request: Request) -> Response:
        body = await request.json()
        wanted = body.get("server_args") if isinstance(body, dict) else None
        ok = isinstance(wanted, dict) and bool(wanted)
        for key, value in (wanted or {}).items():
            if key != "dspark_force_budget_frac":
                ok = False  # "Updating {key} is not supported."
            elif value is not None and not (
                isinstance(value, (int, float)) and 0.0 < float(value) <= 1.0
            ):
                ok = False  # "must be in (0, 1] or null"
        if ok:
            value = wanted["dspark_force_budget_frac"]  # type: ignore[index]
            self.forced_frac = None if value is None else float(value)
            for rank_planner in self.planners:  # what sglang's internal_state calls
                rank_planner.pin(self.forced_frac)
        return JSONResponse([ok] * self.config.dp)

    async def abort_request(self, request: Request) -> Response:
        body = await request.json()
        if body.get("abort_all"):
            self.abort_all()
        return Response(status_code=200)
