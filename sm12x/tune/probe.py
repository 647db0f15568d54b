"""Is the server in the mode sglang's SPS profiler needs, and does it run the recipe?

The rules are the profiler's own (sglang/benchmark/dspark_sps_profiler.py,
`fetch_server_context`, the same in sglang 0.5.17 and 0.5.23), read from what
the server answers on /server_info:

- `speculative_algorithm` is DSPARK and CUDA graphs are on;
- every DP rank's internal state carries `dspark_info_record` (sglang's
  scheduler adds it when the DSpark worker's info dumper is on:
  SGLANG_DSPARK_ENABLE_SPS_RECORD=1, dspark_observability.py), with the
  `core` and `step_cpu_time` components, a ragged verify mode (`compact` or
  `cap-accept`: the off-diagonal `--fracs` sweep tune runs; the profiler
  allows only `static` without `--fracs`) and `simulate_acc_len` exactly 1.0
  (SGLANG_SIMULATE_ACC_LEN);
- the decode CUDA graphs' batch sizes are reported (`cuda_graph_config`).

They are checked here first so the user gets one line that says how to boot
the server in that mode, not the profiler's traceback after minutes of work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sm12x.bench import provenance
from sm12x.errors import UserError
from sm12x.recipe.model import Recipe
from sm12x.sps.tables import Layout, layout

RECORD_KEY = "dspark_info_record"
REQUIRED_COMPONENTS = ("core", "step_cpu_time")
REQUIRED_SIMULATE_ACC_LEN = 1.0
# The modes the profiler's off-diagonal sweep accepts (fetch_server_context's
# allowed_modes when --fracs is given); its diagonal sweep (no --fracs, tune's
# phase 1) accepts only static.
OFFDIAG_MODES = ("compact", "cap-accept")
KNOWN_MODES = ("static", *OFFDIAG_MODES)
HOW_TO_BOOT = (
    "boot it with `sm12x tune` (without --url), or start it with `sm12x launch --sps-profile`"
)


class NotProfiling(UserError):
    pass


def whole(value: Any, name: str) -> int:
    """A whole number from /server_info, or one line naming the field: a server
    that answers `"x"`, `1e999` or `"NaN"` is not sglang (or is broken)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise UserError(
            f"/server_info's {name} is {shown}, not a whole number: is this an sglang "
            "server? (tune reads only sglang's own answer)"
        )
    return value


def _mapping(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserError(
            f"/server_info's {name} is a {type(value).__name__}, not an object: is this an "
            "sglang server?"
        )
    return value


@dataclass(frozen=True)
class ServerFacts:
    """What tune needs from the server, read once."""

    sglang: str
    gamma: int
    parallel: Layout
    dp_ranks: int
    cuda_graph_max_bs: int
    max_running_per_dp: int | None
    tokenizer_path: str | None
    # The server says it is `sm12x mock-server` (its /server_info's sm12x_mock):
    # tune may then run the profiler from the release's wheel (sm12x.mock.wheel_python).
    mock: bool = False
    # The ragged verify mode of the per-step records, the table the server loaded
    # (server_args' speculative_dspark_sps_table_path; None: none), and the decode
    # batch sizes captured in CUDA graphs (compact verify's token tiers are
    # these x (gamma + 1): decode_cuda_graph_runner._build_ragged_verify_token_buckets).
    mode: str = "compact"
    sps_table: str | None = None
    captured: tuple[int, ...] = ()

    def token_tiers(self) -> list[int]:
        return sorted({bs * (self.gamma + 1) for bs in self.captured})


def fetch(base_url: str, timeout: float) -> dict[str, Any]:
    """/server_info, or one line saying why there is none (sglang's profiler
    sends no API key: a server that wants one cannot be profiled)."""
    info, problem = provenance.get_json(f"{base_url}/server_info", None, timeout)
    if info is None:
        if problem and ("401" in problem or "authentication" in problem or "403" in problem):
            raise UserError(
                f"{base_url} wants an API key ({problem}), and sglang's SPS profiler "
                f"sends none: profile a server without SM12X_API_KEY on 127.0.0.1; "
                f"{HOW_TO_BOOT}"
            )
        raise UserError(
            f"no sglang server answers at {base_url} ({problem}): start it in "
            f"profiling mode ({HOW_TO_BOOT}), or check --url"
        )
    if not isinstance(info, dict):
        raise UserError(
            f"{base_url}/server_info is not sglang's server info (a router?): "
            "profile one sglang server directly"
        )
    return info


def profiling_problem(info: dict[str, Any]) -> str | None:
    """Why the profiler would refuse this server, or None."""
    algorithm = info.get("speculative_algorithm")
    if algorithm != "DSPARK":
        return (
            f"the server runs speculative_algorithm={algorithm!r}, not DSPARK: the table is "
            "measured from DSPARK verify steps"
        )
    if info.get("disable_cuda_graph"):
        return "the server runs with CUDA graphs disabled: a table measured so is useless"
    states = info.get("internal_states") or []
    if not states:
        return "/server_info has no internal_states (is this a router?)"
    if not isinstance(states, list):
        raise UserError("/server_info's internal_states is not a list: is this an sglang server?")
    for rank, state in enumerate(states):
        state = _mapping(state, f"internal_states[{rank}]")
        record = state.get(RECORD_KEY)
        if record is not None:
            record = _mapping(record, f"internal_states[{rank}].{RECORD_KEY}")
            components = record.get("components") or []
            if not isinstance(components, list):
                raise UserError(
                    f"/server_info's internal_states[{rank}].{RECORD_KEY}.components is not "
                    "a list: is this an sglang server?"
                )
        if record is None:
            return (
                f"DP rank {rank} keeps no per-step DSPARK records ({RECORD_KEY} is missing: "
                "the server was started without SGLANG_DSPARK_ENABLE_SPS_RECORD=1)"
            )
        missing = sorted(set(REQUIRED_COMPONENTS) - set(record.get("components") or []))
        if missing:
            return (
                f"DP rank {rank} records no {', '.join(missing)} (needs "
                "SGLANG_DSPARK_ENABLE_SPS_RECORD=1)"
            )
        if record.get("mode") not in KNOWN_MODES:
            return (
                f"DP rank {rank} verifies in {record.get('mode')!r} mode: the profiler's "
                "diagonal needs static verify, its off-diagonal sweep compact"
            )
        if record.get("simulate_acc_len") != REQUIRED_SIMULATE_ACC_LEN:
            return (
                f"DP rank {rank} runs simulate_acc_len={record.get('simulate_acc_len')!r}: the "
                "profiler needs exactly SGLANG_SIMULATE_ACC_LEN=1.0"
            )
    if cuda_graph_max_bs(states[0]) is None:
        return "the server reports no decode CUDA-graph batch sizes (cuda_graph_config)"
    return None


def cuda_graph_max_bs(state: dict[str, Any]) -> int | None:
    """The largest decode batch captured in CUDA graphs, as the profiler reads it
    (resolve_cuda_graph_max_bs): the captured list, else max_bs."""
    config = _mapping(state.get("cuda_graph_config") or {}, "cuda_graph_config")
    decode = config.get("decode")
    if not isinstance(decode, dict):
        return None
    where = "cuda_graph_config.decode"
    captured = decode.get("bs")
    if isinstance(captured, list) and captured:
        return max(whole(bs, f"{where}.bs[{i}]") for i, bs in enumerate(captured))
    if decode.get("max_bs") is None:
        return None
    return whole(decode["max_bs"], f"{where}.max_bs")


def facts(info: dict[str, Any], base_url: str) -> ServerFacts:
    """The server's facts, refusing a server that is not in profiling mode."""
    problem = profiling_problem(info)
    if problem:
        raise NotProfiling(f"{base_url} is not in SPS profiling mode: {problem}; {HOW_TO_BOOT}")
    states = info["internal_states"]
    record = states[0][RECORD_KEY]
    state = states[0]
    max_running = state.get("effective_max_running_requests_per_dp")
    return ServerFacts(
        sglang=str(info.get("version") or ""),
        gamma=whole(record["gamma"], f"{RECORD_KEY}.gamma")
        if record.get("gamma")
        else whole(record.get("verify_num_draft_tokens"), f"{RECORD_KEY}.verify_num_draft_tokens")
        - 1,
        parallel=Layout(
            whole(info.get("tp_size") or 1, "tp_size"),
            whole(info.get("dp_size") or 1, "dp_size"),
            whole(info.get("ep_size") or 1, "ep_size"),
        ),
        dp_ranks=len(states),
        cuda_graph_max_bs=cuda_graph_max_bs(state) or 0,
        # JSON's true is a Python int too: only a whole number is a request limit.
        max_running_per_dp=max_running if type(max_running) is int and max_running > 0 else None,
        tokenizer_path=tokenizer
        if isinstance(tokenizer := info.get("tokenizer_path"), str)
        else None,
        mock=provenance.is_mock(info),
        mode=str(record.get("mode")),
        sps_table=table
        if isinstance(table := info.get("speculative_dspark_sps_table_path"), str) and table
        else None,
        captured=captured_sizes(state),
    )


def captured_sizes(state: dict[str, Any]) -> tuple[int, ...]:
    """cuda_graph_config.decode.bs, the batch sizes captured (empty when not said)."""
    decode = (state.get("cuda_graph_config") or {}).get("decode")
    sizes = decode.get("bs") if isinstance(decode, dict) else None
    if not isinstance(sizes, list):
        return ()
    return tuple(
        sorted(whole(bs, f"cuda_graph_config.decode.bs[{i}]") for i, bs in enumerate(sizes))
    )


def recipe_problems(server: ServerFacts, recipe: Recipe) -> list[str]:
    """Where the server does not run what the recipe says: its table would be keyed
    by the recipe yet measured for something else."""
    problems = []
    if server.gamma != recipe.dspark.block_size:
        problems.append(f"gamma {server.gamma} (recipe {recipe.name}: {recipe.dspark.block_size})")
    if server.parallel != layout(recipe):
        problems.append(f"{server.parallel} (recipe {recipe.name}: {layout(recipe)})")
    return problems
