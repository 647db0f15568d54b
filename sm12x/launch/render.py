"""Recipe + launch context -> the sglang command line and its environment.

This is the one function that turns a recipe into argv/env (render), which
the launch plan (sm12x.launch.plan) holds: `sm12x launch` (the image
entrypoint, hence every compose service), `sm12x render` and tune's
profiling boot all go through it, so a flag is written once, in the recipe.

Values the site supplies at launch time (API key, head address, NIC names)
are EnvRef placeholders: printed as "$NAME" so a dry run never shows a
secret and stays ready to paste, and resolved from the environment only
when the launcher execs.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from sm12x.errors import UserError
from sm12x.recipe.model import Recipe
from sm12x.recipe.tracks import chosen_track
from sm12x.settings import Loaded
from sm12x.sps.tables import relative_path

SGLANG_MODULE = "sglang.launch_server"
# With an API key, sglang is started through sm12x.keyed, which hands it the
# key in memory: never on a command line (sm12x/keyed.py says why).
KEYED_MODULE = "sm12x.keyed"
# The per-node settings a multi-node recipe needs (sm12x.settings names).
NODE_RANK_ENV = "SM12X_NODE_RANK"
HEAD_ADDR_ENV = "SM12X_HEAD_ADDR"


@dataclass(frozen=True)
class EnvRef:
    """A value taken from the environment when the launcher execs."""

    name: str
    suffix: str = ""

    def shell(self) -> str:
        return f'"${{{self.name}}}{self.suffix}"' if self.suffix else f'"${self.name}"'

    def resolve(self, environ: Mapping[str, str]) -> str | None:
        value = environ.get(self.name, "")
        return value + self.suffix if value else None


Value = str | EnvRef


@dataclass(frozen=True)
class RenderedArg:
    flag: str
    value: Value | None
    why: str


@dataclass(frozen=True)
class RenderedEnv:
    name: str
    value: Value
    why: str
    # True when the recipe fixes the value: it replaces what the host set.
    fixed: bool


@dataclass(frozen=True)
class LaunchContext:
    """What varies per machine and per node; everything else is the recipe.

    from_settings() reads it from the settings (sm12x.settings: flags, the
    environment, .env): SM12X_NODE_RANK, SM12X_HEAD_ADDR, SM12X_MODEL_DIR,
    SM12X_HOST/SM12X_BIND, SM12X_PORT, SM12X_API_KEY, SM12X_CACHE_DIR, and
    the recipe's site variables (host_env).
    """

    node_rank: int | None = None
    head_addr: str | None = None
    model_path: str | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    api_key: bool = False
    cache_dir: str | None = None
    host_env: Mapping[str, str] = field(default_factory=dict)
    # False renders the recipe without speculative decoding (`--no-spec`):
    # the reference `verify --compare-url` holds the speculative server to.
    speculative: bool = True
    # The track (SM12X_TRACK): a tuned SPS table is stored per track's image.
    track: str | None = None
    # True renders the mode sglang's SPS profiler needs (`sm12x tune`; see
    # PROFILING_ENV): per-step records; static verify without a table (phase 1,
    # the diagonal), compact verify with sps_table (phase 2: the diagonal's 1-D
    # table, without which sglang verifies every row and ignores the pins).
    sps_profile: bool = False
    sps_table: str | None = None

    @classmethod
    def from_settings(cls, loaded: Loaded) -> LaunchContext:
        s = loaded.settings
        return cls(
            node_rank=s.node_rank,
            head_addr=s.head_addr,
            model_path=s.model_dir,
            host=s.listen_host,
            port=s.port,
            api_key=s.key() is not None,
            cache_dir=s.cache_dir,
            host_env=loaded.variables(),
            track=s.track_name,
        )


# Where JIT and compile caches go when SM12X_CACHE_DIR names a persistent
# volume: without it every container start recompiles flashinfer/Triton
# kernels (minutes on a cold boot).
CACHE_ENV = {
    "XDG_CACHE_HOME": (
        "",
        "tools that follow the XDG convention (tvm-ffi, cutlass-dsl) cache here",
    ),
    "FLASHINFER_WORKSPACE_BASE": (
        "",
        "flashinfer JIT kernels and cubins (under .cache/flashinfer)",
    ),
    "TRITON_CACHE_DIR": ("/triton", "compiled Triton kernels"),
    "TORCHINDUCTOR_CACHE_DIR": ("/torchinductor", "torch.compile artefacts"),
    "SGLANG_DG_CACHE_DIR": ("/deep_gemm", "DeepGEMM JIT kernels"),
    # sglang's own JIT kernels (DSV4 compressor, top-k, fp8 GEMM) expand "~", not
    # XDG: 0.5.17 reads TVM_FFI_CACHE_DIR (kernels/jit/utils/compile.py), 0.5.23
    # SGLANG_JIT_CACHE_DIR (compile/sailify.py); unset, they land in $HOME, off
    # the volume, and recompile on every container start.
    "TVM_FFI_CACHE_DIR": ("/tvm-ffi", "sglang 0.5.17's JIT kernels (tvm-ffi builds)"),
    "SGLANG_JIT_CACHE_DIR": ("/sglang-jit", "sglang 0.5.23's JIT kernels"),
    "CUDA_CACHE_PATH": ("/nv", "the driver's PTX-to-SASS cache"),
}


def value_of(value: Value, environ: Mapping[str, str] | None) -> str:
    if isinstance(value, EnvRef):
        if environ is None:
            return value.shell().strip('"')
        resolved = value.resolve(environ)
        if resolved is None:
            raise UserError(f"{value.name} is not set: the recipe needs it at launch")
        return resolved
    return value


def shell_of(value: Value) -> str:
    return value.shell() if isinstance(value, EnvRef) else shlex.quote(value)


def _flag_value(value: str | float) -> str:
    return value if isinstance(value, str) else repr(value)


RAGGED_VERIFY_ENV = "SGLANG_RAGGED_VERIFY_MODE"
# What sglang's SPS profiler (sglang/benchmark/dspark_sps_profiler.py,
# fetch_server_context) requires of the server it measures: the per-step
# records on /server_info (dspark_observability.py: the `core` and
# `step_cpu_time` components), every step committing exactly the bonus token
# (spec_utils/dspark_worker_v2: SGLANG_SIMULATE_ACC_LEN, which must be
# exactly 1.0) and, for the off-diagonal sweep (`--fracs`) that fits the
# additive table compact verify prices with, a ragged verify mode: the
# profiler refuses a static server then (allowed_modes compact/cap-accept),
# because only ragged verify schedules the budget each round pins.
PROFILING_ENV = {
    "SGLANG_DSPARK_ENABLE_SPS_RECORD": (
        "1",
        "sm12x tune: the per-step decode records the SPS profiler reads on /server_info",
    ),
    "SGLANG_SIMULATE_ACC_LEN": (
        "1.0",
        "sm12x tune: every step commits exactly the bonus token, so the profiled "
        "batches are deterministic (the profiler refuses any other value)",
    ),
}
# The ragged verify mode of each phase of `sm12x tune` (docs/tune.md): the
# profiler's diagonal sweep (no --fracs) accepts only static verify; its
# off-diagonal sweep only ragged verify, and compact verify honours the budget
# each round pins only with an SPS table loaded (without one sglang's planner
# verifies every row: dspark_planner `_is_verify_all`), so phase 2 loads the
# diagonal's 1-D table.
PROFILING_MODES = {
    False: (
        "static",
        "sm12x tune, phase 1: the profiler's diagonal sweep (the 1-D table phase 2 "
        "loads) needs static verify",
    ),
    True: (
        "compact",
        "sm12x tune, phase 2: the off-diagonal sweep (--fracs) pins a verify budget per "
        "round, which compact verify honours only with a table loaded; it fits the "
        "additive table compact verify prices with",
    ),
}


def tuned_table_path(recipe: Recipe, ctx: LaunchContext) -> Value:
    """Where `sm12x tune` stores this recipe's table for the context's track
    (sm12x.sps.tables): under SM12X_CACHE_DIR, a placeholder when it is unset."""
    relative = relative_path(recipe, chosen_track(recipe, ctx.track))
    if ctx.cache_dir:
        return f"{ctx.cache_dir.rstrip('/')}/{relative}"
    return EnvRef("SM12X_CACHE_DIR", f"/{relative}")


def speculative_args(recipe: Recipe, ctx: LaunchContext | None = None) -> list[RenderedArg]:
    """Every flag the recipe's dspark section renders; `--no-spec` drops them all.
    Profiling (`sm12x tune`) renders only the table tune's phase 2 names
    (ctx.sps_table): phase 1 measures without one."""
    ctx = ctx or LaunchContext()
    args = [
        RenderedArg(
            "--speculative-algorithm",
            "DSPARK",
            "DSpark speculative decoding, drafted by the module bundled in the checkpoint",
        ),
        RenderedArg(
            "--speculative-dspark-block-size", str(recipe.dspark.block_size), recipe.dspark.why
        ),
    ]
    if ctx.sps_profile:
        if ctx.sps_table:
            args.append(
                RenderedArg(
                    "--speculative-dspark-sps-table-path",
                    ctx.sps_table,
                    "sm12x tune's phase 2: the diagonal's 1-D table, so compact verify "
                    "honours the pinned budgets (without a table sglang verifies every row)",
                )
            )
        return args
    if recipe.dspark.sps_table_path:
        args.append(
            RenderedArg(
                "--speculative-dspark-sps-table-path",
                recipe.dspark.sps_table_path,
                "profiled SPS cost table",
            )
        )
    elif recipe.dspark.sps_table == "tuned":
        args.append(
            RenderedArg(
                "--speculative-dspark-sps-table-path",
                tuned_table_path(recipe, ctx),
                "the SPS cost table `sm12x tune` profiled on this rig for this recipe, image, "
                "depth and layout (without one the verify budget degenerates to verify-all)",
            )
        )
    return args


def speculative_env(recipe: Recipe, ctx: LaunchContext) -> list[RenderedEnv]:
    """The variables the dspark section renders: the verify mode always, static
    included (sglang's default, rendered so that no inherited variable decides it);
    `--no-spec` drops them, profiling replaces them."""
    if not ctx.speculative:
        return []
    if ctx.sps_profile:
        mode, why = PROFILING_MODES[bool(ctx.sps_table)]
        return [
            *(RenderedEnv(n, v, w, fixed=True) for n, (v, w) in PROFILING_ENV.items()),
            RenderedEnv(RAGGED_VERIFY_ENV, mode, why, fixed=True),
        ]
    mode = recipe.dspark.ragged_verify
    why = (
        "dspark.ragged_verify: static verify (sglang's default, written out so that no "
        "inherited variable decides it)"
        if mode == "static"
        else f"dspark.ragged_verify: {mode} verify, budgeted by the SPS table"
    )
    return [RenderedEnv(RAGGED_VERIFY_ENV, mode, why, fixed=True)]


def render(
    recipe: Recipe, context: LaunchContext | None = None
) -> tuple[LaunchContext, tuple[RenderedArg, ...], tuple[RenderedEnv, ...]]:
    """The sglang argv and environment for one node of a recipe (the launch plan,
    sm12x.launch.plan, holds them)."""
    ctx = context or LaunchContext()
    args: list[RenderedArg] = []

    # Model: a local folder (the container mounts one at /model), or the Hub
    # id pinned to the recipe's revision.
    model_path = ctx.model_path or recipe.model.hf_id
    args.append(
        RenderedArg(
            "--model-path",
            model_path,
            "the checkpoint: SM12X_MODEL_DIR, a local folder, else model.hf_id",
        )
    )
    if model_path == recipe.model.hf_id and recipe.model.revision is not None:
        args.append(
            RenderedArg(
                "--revision",
                recipe.model.revision,
                "the checkpoint revision the recipe was written for",
            )
        )
    args.append(
        RenderedArg(
            "--served-model-name",
            recipe.model.served_model_name,
            "clients see the same model id wherever the weights come from",
        )
    )

    for name, flag in recipe.flags.items():
        value = None if flag.value is None else _flag_value(flag.value)
        args.append(RenderedArg(name, value, flag.why))

    if ctx.speculative:
        args += speculative_args(recipe, ctx)

    if recipe.is_multinode:
        assert recipe.multinode is not None
        rank: Value = str(ctx.node_rank) if ctx.node_rank is not None else EnvRef(NODE_RANK_ENV)
        if ctx.node_rank is not None and ctx.node_rank >= recipe.hardware.nodes:
            raise UserError(
                f"{NODE_RANK_ENV}={ctx.node_rank} but {recipe.name} has {recipe.hardware.nodes} "
                f"nodes: use 0 on the head and 1..{recipe.hardware.nodes - 1} on the others"
            )
        port = recipe.multinode.dist_init_port
        if ctx.head_addr is None:
            head: Value = EnvRef(HEAD_ADDR_ENV, f":{port}")
        else:
            head = ctx.head_addr if ":" in ctx.head_addr else f"{ctx.head_addr}:{port}"
        args += [
            RenderedArg("--nnodes", str(recipe.hardware.nodes), "hardware.nodes"),
            RenderedArg("--node-rank", rank, f"this node's rank ({NODE_RANK_ENV}: 0 on the head)"),
            RenderedArg("--dist-init-addr", head, recipe.multinode.why),
        ]

    args.append(
        RenderedArg(
            "--host",
            ctx.host,
            "SM12X_HOST, else SM12X_BIND: 0.0.0.0 inside a bridged container, 127.0.0.1 by default",
        )
    )
    args.append(
        RenderedArg("--port", str(ctx.port or recipe.serve.port), "SM12X_PORT, else serve.port")
    )

    env: list[RenderedEnv] = []
    for name, var in recipe.env.items():
        if var.from_host:
            # The site's value, else the recipe's default, else a placeholder
            # the launcher refuses to exec with.
            site: Value = ctx.host_env.get(name) or var.default or EnvRef(name)
            env.append(RenderedEnv(name, site, var.why, fixed=False))
        else:
            assert var.value is not None
            env.append(RenderedEnv(name, var.value, var.why, fixed=True))
    env += speculative_env(recipe, ctx)
    if ctx.cache_dir:
        for name, (sub, why) in CACHE_ENV.items():
            env.append(
                RenderedEnv(
                    name, ctx.cache_dir.rstrip("/") + sub, f"SM12X_CACHE_DIR: {why}", fixed=True
                )
            )
    return ctx, tuple(args), tuple(env)
