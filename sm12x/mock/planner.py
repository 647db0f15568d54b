"""The served wheel's DSpark verify planner, run on a CPU for the stand-in's scheduler.

sm12x.mock.sps asks this module, for every decode step of every DP rank, which
verify layout sglang's planner picks, and prices the step from it. The planner
is the wheel's own: `dspark_planner.py` of the sglang tree the mock serves (the
patched wheel on each track, or a copy of it), executed as a module whose
`sglang.*` imports resolve to that tree. Each rank builds the real
`DSparkVerifyPlanner` (its __init__ calls the wheel's `build_sps_cost_table`
and `is_uninitialized_sps_table` and sets `_is_verify_all`), pins the off-
diagonal fraction through its `set_forced_budget_frac` (what sglang's
/set_internal_state calls), gets the step's budget from its
`compute_budget_sync` (the real `HostConfidenceBudgetPlanner.compute_budget`)
and the layout from `schedule_layout`, the method that returns the full-width
uniform layout under verify-all, else the confidence top-k's verify lengths in
the graph tier that covers them (CPU tensors; its top-k has a torch path).

What stands in, and why (each enforces what the planner reads of it):

- `sglang.srt.managers.schedule_batch` (ScheduleBatch),
  `sglang.srt.speculative.dflash_info_v2` (DFlashDraftInputV2) and
  `sglang.srt.speculative.dflash_utils`: importing them pulls the whole runtime
  (multimodal configs that need torchvision and a CUDA torch). The planner
  names the first two in annotations only and calls the third only when it
  adjusts verify logits, never while it plans; the stand-ins exist only while
  the planner's module executes, and building or calling them raises.
- the runtime context (`get_spec`, `get_schedule`, `get_parallel`,
  `get_disagg`; 0.5.17 also takes a `server_args`): sglang publishes it from
  the resolved ServerArgs in the scheduler process; here it is the mock
  server's launch arguments, a namespace that raises on any field it lacks.
- the model runner: what the planner reads of it, the decode CUDA-graph
  runner's compact-verify token buckets (`capture_num_tokens`, sglang's
  `_build_ragged_verify_token_buckets`: bs x (gamma + 1) per captured bs;
  `ragged_verify_mode` on in compact mode only), its `max_bs`, and the request
  pool's `req_generation` and `req_to_token` (real CPU tensors, indexed by the
  requests' pool slots, so an index outside the pool fails as it would there).
- the draft model: its confidence head cannot run here (no weights), so each
  step's per-position confidence is a constant tensor (`CONFIDENCE`); with a
  pinned fraction the budget does not depend on it.
- torch.distributed: the TP group the planner broadcasts verify lengths over
  (`SpecTpSync`, 0.5.23) is one rank, and DP attention is not initialised, so
  each rank keys its graph tier off its own batch (the dynamic tier); the
  profiler's rounds spread requests evenly, so the DP-gathered tier is the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

PLANNER_MODULE = "sglang/srt/speculative/dspark_components/dspark_planner.py"
# The per-position survival confidence the stand-in's draft reports.
CONFIDENCE = 0.7


class _NotHere:
    """A runtime class the planner names but never builds while it plans."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"{type(self).__name__} is not stood up in the mock (sm12x.mock.planner)"
        )


def _not_here(name: str):
    def call(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"{name} is not stood up in the mock (sm12x.mock.planner)")

    return call


def _stand_ins(source: str) -> dict[str, dict[str, Any]]:
    server_args = {}
    if "from sglang.srt.server_args import ServerArgs" in source:  # 0.5.17
        server_args = {
            "sglang.srt.server_args": {"ServerArgs": type("ServerArgs", (_NotHere,), {})}
        }
    torchvision: dict[str, dict[str, Any]] = {}
    if "torchvision" not in sys.modules and importlib.util.find_spec("torchvision") is None:
        # transformers decides at its first import whether torchvision exists:
        # it must see none, not the stand-in.
        import transformers  # noqa: F401

        io = types.ModuleType("torchvision.io")
        io.decode_jpeg = _not_here("torchvision.io.decode_jpeg")  # type: ignore[attr-defined]
        torchvision = {"torchvision": {"io": io, "__path__": []}, "torchvision.io": vars(io)}
    return {
        **server_args,
        **torchvision,
        "sglang.srt.managers.schedule_batch": {
            "ScheduleBatch": type("ScheduleBatch", (_NotHere,), {})
        },
        "sglang.srt.speculative.dflash_info_v2": {
            "DFlashDraftInputV2": type("DFlashDraftInputV2", (_NotHere,), {})
        },
        "sglang.srt.speculative.dflash_utils": {
            "apply_dflash_verify_logits_adjustments": _not_here(
                "apply_dflash_verify_logits_adjustments"
            )
        },
    }


def _use_tree(site: Path) -> None:
    """`sglang` in this process as the bare package of `site` (serving.load
    registers it the same way; sglang/__init__.py imports the whole runtime)."""
    existing = sys.modules.get("sglang")
    if existing is not None and getattr(existing, "__sm12x_tree__", None) == str(site):
        return
    if existing is not None:
        if any(n.startswith("sglang.srt.entrypoints") for n in sys.modules):
            raise RuntimeError(
                f"this process serves sglang from {getattr(existing, '__sm12x_tree__', '?')}; "
                f"plan with {site} in another process"
            )
        for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
            del sys.modules[name]
    from sm12x.mock.serving import tree_package

    tree_package(site)


def load(site: Path, source: Path | None = None) -> types.ModuleType:
    """The planner module: `source` (default the tree's own dspark_planner.py)
    executed with its imports from the sglang tree at `site`."""
    site = Path(site)
    path = Path(source) if source is not None else site / PLANNER_MODULE
    _use_tree(site)
    digest = hashlib.sha256(str(site).encode() + b"\0" + path.read_bytes()).hexdigest()
    name = "sm12x_mock_dspark_planner_" + digest[:12]
    if name in sys.modules:
        return sys.modules[name]
    _unload_planners()
    stood = []
    for module_name, attrs in _stand_ins(path.read_text(encoding="utf-8")).items():
        if module_name not in sys.modules:
            stand_in = types.ModuleType(module_name)
            stand_in.__dict__.update({k: v for k, v in attrs.items() if k != "__name__"})
            sys.modules[module_name] = stand_in
            stood.append(module_name)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # msgspec resolves the Structs' annotations here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        for module_name in stood:
            sys.modules.pop(module_name, None)
    missing = [
        n
        for n in ("DSparkVerifyPlanner", "build_sps_cost_table", "is_uninitialized_sps_table")
        if not hasattr(module, n)
    ]
    if missing or not hasattr(module.DSparkVerifyPlanner, "schedule_layout"):
        raise RuntimeError(
            f"{path} has no {', '.join(missing) or 'DSparkVerifyPlanner.schedule_layout'}: "
            "the mock cannot run this sglang's verify planner"
        )
    return module


def _unload_planners() -> None:
    """Drop the planner modules loaded before: executing the module registers
    its invariants by name in sglang's registry (utils/invariants.py), which
    refuses a second one, so a process holds one planner module at a time
    (planners built from an older one keep working)."""
    invariants: Any = sys.modules.get("sglang.srt.utils.invariants")
    registry: dict[str, Any] = getattr(invariants, "_REGISTRY", {})
    for name in [n for n in sys.modules if n.startswith("sm12x_mock_dspark_planner_")]:
        old = sys.modules.pop(name)
        for value in vars(old).values():
            if any(value is v for v in registry.values()):
                del registry[value.name]


@contextlib.contextmanager
def _mode(mode: str):
    """SGLANG_RAGGED_VERIFY_MODE as the server's environment sets it, while the
    planner reads it (read_ragged_verify_mode, in its __init__)."""
    before = os.environ.get("SGLANG_RAGGED_VERIFY_MODE")
    os.environ["SGLANG_RAGGED_VERIFY_MODE"] = mode
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SGLANG_RAGGED_VERIFY_MODE", None)
        else:
            os.environ["SGLANG_RAGGED_VERIFY_MODE"] = before


class RankPlanner:
    """One DP rank's DSparkVerifyPlanner, as the wheel builds it."""

    def __init__(self, module: types.ModuleType, config: Any) -> None:
        import torch

        self.torch = torch
        self.gamma = config.gamma
        width = config.gamma + 1
        compact = config.mode == "compact"
        pool = config.max_running_per_dp + 1
        graphs = SimpleNamespace(
            ragged_verify_mode=compact,
            capture_num_tokens=config.token_buckets if compact else None,
            max_bs=config.cuda_graph_max_bs,
        )
        self.model_runner = SimpleNamespace(
            decode_cuda_graph_runner=graphs,
            req_to_token_pool=SimpleNamespace(
                req_generation=torch.zeros(pool, dtype=torch.int64),
                req_to_token=torch.zeros((pool, 1), dtype=torch.int32),
            ),
        )
        args = SimpleNamespace(
            speculative_dspark_sps_table_path=config.sps_table_path,
            speculative_dspark_align_verify_tokens_to_graph_tier=False,
            speculative_dspark_confidence_sts_path=None,
            speculative_skip_dp_mlp_sync=False,
            max_running_requests=config.max_running_per_dp * config.dp,
            disable_overlap_schedule=False,
            tp_size=1,
            pp_size=1,
        )
        for getter in ("get_spec", "get_schedule", "get_parallel", "get_disagg"):
            if hasattr(module, getter):
                setattr(module, getter, lambda: args)
        # One rank of a TP group: nothing to broadcast verify lengths to.
        group = SimpleNamespace(
            world_size=1, rank_in_group=0, broadcast=_not_here("a TP group's broadcast")
        )
        if hasattr(module, "get_tp_group"):  # 0.5.17
            module.get_tp_group = lambda: group  # type: ignore[attr-defined]
        kwargs: dict[str, Any] = {
            "draft_model": SimpleNamespace(confidence_head=object()),
            "gamma": config.gamma,
            "model_runner": self.model_runner,
            "device": torch.device("cpu"),
            "tp_rank": 0,
            "verify_num_draft_tokens": width,
        }
        params = inspect.signature(module.DSparkVerifyPlanner.__init__).parameters
        if "server_args" in params:  # 0.5.17
            kwargs["server_args"] = args
        if "tp_sync" in params:  # 0.5.23
            kwargs["tp_sync"] = module.SpecTpSync(group)
        with _mode(config.mode):
            self.planner = module.DSparkVerifyPlanner(**kwargs)

    @property
    def verifies_all(self) -> bool:
        return bool(self.planner.is_verify_all) and self.planner.is_compact_mode

    def pin(self, frac: float | None) -> None:
        self.planner.set_forced_budget_frac(frac)

    def admit(self, slot: int) -> None:
        """A request takes pool slot `slot`: the slot's generation moves on."""
        self.model_runner.req_to_token_pool.req_generation[slot] += 1

    def layout(self, slots: list[int]) -> Any:
        """The planner's layout for a decode step of the requests in `slots`
        (None: static verify, or past the captured grid)."""
        torch = self.torch
        indices = torch.tensor(slots, dtype=torch.int64)
        prefix = torch.zeros(len(slots), dtype=torch.int64)
        confidence = torch.full((len(slots), self.gamma), CONFIDENCE, dtype=torch.float32)
        budget = self.planner.compute_budget_sync(
            confidence=confidence, prefix_lens=prefix, req_pool_indices=indices
        )
        return self.planner.schedule_layout(
            req_pool_indices=indices,
            prefix_lens=prefix,
            device=torch.device("cpu"),
            confidence=confidence,
            budget=budget,
        )
