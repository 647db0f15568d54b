"""The typed recipe: what one rig runs, and why each setting is there.

A recipe is the single source of truth for one topology. The launcher turns
it into the sglang command line (sm12x.launch.render), compose names it by
SM12X_RECIPE, verify reads its expectations and bench its reference figures. Every
model rejects unknown keys (extra="forbid") so a typo never passes silently,
and every server flag and environment variable carries a `why`.

Structure checks live here (types, ranges, one-of rules); checks of the
known field traps (depth 5, KV dtype, MoE runner, TP, ...) are lints in
sm12x.recipe.lints, so each has its own code and message.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_validator,
)

from sm12x.recipe.lines import DEFAULT_LINE, Line, LineName, line_named

# The GPUs sm12x has recipes for. sm12x.launch.gpus maps each to the names
# nvidia-smi prints; adding a GPU means adding it in both places.
GpuModel = Literal["rtx-pro-6000", "rtx-5090", "gb10"]
ComputeCapability = Literal["12.0", "12.1"]
CpuArch = Literal["x86_64", "aarch64"]

# Long enough to be a reason, not a placeholder.
Why = Annotated[str, StringConstraints(strip_whitespace=True, min_length=12)]
FlagName = Annotated[str, StringConstraints(pattern=r"^--[a-z0-9][a-z0-9-]*$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Z_][A-Z0-9_]*$")]
# Recipe names become Kubernetes names (sm12x-<name>, a 63-character DNS label).
RECIPE_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
RECIPE_NAME_MAX = 57
RecipeName = Annotated[
    str, StringConstraints(pattern=RECIPE_NAME_PATTERN, max_length=RECIPE_NAME_MAX)
]


class _Strict(BaseModel):
    # allow_inf_nan=False: no recipe number means nan or inf (YAML's .nan/.inf).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Status(_Strict):
    """Whether anyone ran this exact recipe on the hardware, and who."""

    state: Literal["untested", "verified"] = Field(
        description="verified: booted and passed `sm12x verify` on the named hardware; "
        "untested: flags assembled from public reports, not run by sm12x."
    )
    note: Why
    verified_by: str | None = None
    verified_on: datetime.date | None = None

    @model_validator(mode="after")
    def _verified_names_who_and_when(self) -> Status:
        if self.state == "verified" and (self.verified_by is None or self.verified_on is None):
            raise ValueError("state: verified needs verified_by and verified_on")
        if self.state == "untested" and (self.verified_by or self.verified_on):
            raise ValueError("verified_by/verified_on only go with state: verified")
        return self


class Hardware(_Strict):
    gpu: GpuModel
    compute_capability: ComputeCapability = Field(
        description="As nvidia-smi prints compute_cap: 12.0 is sm_120, 12.1 is sm_121."
    )
    gpus_per_node: Annotated[int, Field(ge=1, le=8)]
    nodes: Annotated[int, Field(ge=1, le=8)] = 1
    memory_gib_per_gpu: Annotated[int, Field(ge=1)] = Field(
        description="GPU memory per GPU; on unified-memory machines the whole system memory."
    )
    unified_memory: bool = Field(
        default=False,
        description="GPU and CPU share one memory (DGX Spark): loader page cache and the "
        "OS compete with the KV cache.",
    )
    cpu_arch: CpuArch
    gpu_p2p: Literal["needed", "not-used"] | None = Field(
        default=None,
        description="needed: TP or EP spans the GPUs of one node, so every layer's "
        "all-reduce goes GPU to GPU over PCIe; without P2P (GeForce cards) NCCL copies it "
        "through host memory, slower. not-used: one GPU per node. Omitted: needed when "
        "gpus_per_node > 1. `sm12x doctor` reads the rig's P2P matrix against it.",
    )
    interconnect: str = Field(
        description="How the GPUs talk: e.g. 'PCIe 5.0, no NVLink', 'RoCE 200 GbE (ConnectX-7)'."
    )

    @property
    def sm(self) -> str:
        """sm_120 / sm_121, the name used in kernels and bug reports."""
        return "sm_" + self.compute_capability.replace(".", "")

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def needs_p2p(self) -> bool:
        """The all-reduce runs GPU to GPU inside a node (gpu_p2p, else gpus_per_node > 1)."""
        if self.gpu_p2p is not None:
            return self.gpu_p2p == "needed"
        return self.gpus_per_node > 1

    @model_validator(mode="after")
    def _p2p_needs_gpus_to_share(self) -> Hardware:
        if self.gpu_p2p == "needed" and self.gpus_per_node == 1:
            raise ValueError("gpu_p2p: needed, but one GPU per node has no peer to reach")
        return self


class Model(_Strict):
    """The checkpoint a recipe serves, and which model line it belongs to.

    `line` selects what sm12x.recipe.lines knows about the line (architectures,
    the first sglang that serves it, the vision tower, its parsers); omitted, the
    recipe serves DeepSeek-V4-Flash-0731, as every recipe did before V4.1.
    """

    line: LineName = Field(
        default=DEFAULT_LINE,
        description="The model line: v4-flash-0731 (DeepSeek-V4-Flash-0731, the default) or "
        "v4.1-flash (DeepSeek-V4.1-Flash: vision, engram layers; sglang >= 0.5.23).",
    )
    hf_id: Annotated[str, StringConstraints(pattern=r"^[\w.-]+/[\w.-]+$")]
    revision: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")] | None = Field(
        description="The full commit hash of the checkpoint the recipe was written for; "
        "null only where no public commit is known yet (then revision_why says so, the "
        "launcher passes no --revision, and a verified recipe must pin one)."
    )
    revision_why: Why | None = Field(
        default=None, description="Why `revision` is null (required then, refused otherwise)."
    )
    architecture: str | None = Field(
        default=None,
        description="config.json's architectures[0]; omitted: the line's first "
        "(DeepseekV4ForCausalLM for 0731, DeepseekV41ForCausalLM for V4.1).",
    )
    vision: bool = Field(
        default=False,
        description="Serve the checkpoint's vision tower (image inputs); only lines that "
        "have one (v4.1-flash). verify then checks an image input.",
    )
    served_model_name: str = Field(
        description="The id clients send and /v1/models returns; the same whether the "
        "weights come from a local folder or the Hub."
    )

    @model_validator(mode="after")
    def _fits_its_line(self) -> Model:
        known = line_named(self.line)
        if (self.revision is None) == (self.revision_why is None):
            raise ValueError(
                "set `revision` to the checkpoint's commit hash, or `revision: null` with "
                "`revision_why` saying why no commit is pinned (not both)"
            )
        arch = self.architecture
        if arch is not None and arch in known.refused_architectures:
            raise ValueError(f"architecture {arch}: {known.refused_architectures[arch]}")
        if arch is not None and arch not in known.architectures:
            raise ValueError(
                f"architecture {arch!r} is not a {known.title} architecture sglang serves: "
                f"use one of {', '.join(known.architectures)}"
            )
        if self.vision and not known.vision_tower:
            raise ValueError(
                f"vision: true, but {known.title} has no vision tower: drop it, or set "
                "line: v4.1-flash"
            )
        return self

    @property
    def model_line(self) -> Line:
        return line_named(self.line)

    @property
    def resolved_architecture(self) -> str:
        return self.architecture or self.model_line.architectures[0]

    def download_command(self, local_dir: str = "DIR") -> str:
        """The `hf download` line that fetches this checkpoint (pinned where it can be)."""
        pin = f" --revision {self.revision}" if self.revision else ""
        return f"hf download {self.hf_id}{pin} --local-dir {local_dir}"


class Serve(_Strict):
    # StrictInt: YAML's `port: true` is not port 1.
    port: Annotated[StrictInt, Field(ge=1, le=65535)] = 30000


class DSpark(_Strict):
    """DSpark speculative decoding: the draft is bundled in the checkpoint."""

    block_size: Annotated[int, Field(ge=1, le=16)] = Field(
        description="gamma, rendered as --speculative-dspark-block-size. Always written: "
        "omitted, sglang takes 5 from the checkpoint, the depth that corrupts on sm_12x."
    )
    why: Why
    acknowledge_block_size_5: Why | None = Field(
        default=None,
        description="Required to run block size 5: say why you accept the known "
        "corruption under load on sm_12x (e.g. reproducing the bug).",
    )
    acknowledge_compact_full_rank: Why | None = Field(
        default=None,
        description="Required for compact ragged verify on a track whose sglang has no "
        "fix for a DP rank that fills its largest decode graph (the lint "
        "compact-full-rank): say why you accept it until the fix lands.",
    )
    sps_table_path: str | None = Field(
        default=None,
        description="--speculative-dspark-sps-table-path: a profiled SPS cost table.",
    )
    ragged_verify: RaggedVerifyMode = Field(
        default="static",
        description="SGLANG_RAGGED_VERIFY_MODE: static verifies every draft row; cap-accept "
        "and compact let the scheduler verify fewer rows per request, budgeted by the SPS "
        "table (without one the budget degenerates to verify-all).",
    )
    sps_table: Literal["tuned"] | None = Field(
        default=None,
        description="tuned: the launcher passes the SPS table `sm12x tune` profiled on this "
        "rig for this recipe, image, depth and layout (from the cache volume).",
    )


RaggedVerifyMode = Literal["static", "cap-accept", "compact"]
ConfigurationKind = Literal["baseline", "throughput"]


class Configuration(_Strict):
    """Which configuration of which rig this recipe is.

    A rig (one machine kind and GPU count) can have several recipes: the
    baseline (tensor parallel, static verify: boots correct with nothing to
    prepare) and a throughput configuration (DP attention, expert parallel,
    ragged verify with a profiled SPS table). They share `rig`, the name of
    the rig's baseline recipe, which is also its compose profile.
    """

    rig: RecipeName = Field(description="The rig's baseline recipe name.")
    kind: ConfigurationKind
    why: Why


# What sglang resolves a field to: a number, a word, a switch's state.
SglangValue = StrictBool | StrictInt | StrictFloat | StrictStr

SGLANG_DEFAULT_HELP = (
    "What sglang resolves this to for this recipe when the recipe does not set it (its "
    "own resolution of the rest of the recipe's argv: model-specific overrides "
    "included). A why or note that speaks of sglang's default states it here; "
    "tests/unit/test_sglang_validates_recipes.py checks it against each track's real "
    "ServerArgs (a flag) or environ default (a variable)."
)


class Flag(_Strict):
    """One sglang server flag. No value means a switch (--enable-metrics)."""

    value: StrictInt | StrictFloat | StrictStr | None = None
    sglang_default: SglangValue | None = Field(default=None, description=SGLANG_DEFAULT_HELP)
    why: Why


class LeftAtDefault(_Strict):
    """A flag or variable the recipe leaves to sglang on purpose (a peer sets it, or a
    note speaks of it), with what sglang resolves it to."""

    sglang_default: SglangValue = Field(description=SGLANG_DEFAULT_HELP)
    why: Why


class EnvVar(_Strict):
    """One environment variable for the server.

    Either the recipe fixes it (`value`), or the site supplies it
    (`from_host: true`, e.g. a NIC name): then the launcher takes it from its
    environment (.env through compose), falling back to `default`; without a
    default it is required and `example` shows what one looks like.
    """

    value: StrictStr | None = None
    from_host: bool = False
    default: StrictStr | None = None
    example: StrictStr | None = None
    sglang_default: StrictStr | None = Field(default=None, description=SGLANG_DEFAULT_HELP)
    why: Why

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if self.from_host == (self.value is not None):
            raise ValueError(
                "set exactly one of `value` (the recipe fixes it) or `from_host: true` "
                '(the site supplies it); quote numbers, e.g. value: "1"'
            )
        if not self.from_host and (self.default is not None or self.example is not None):
            raise ValueError("`default` and `example` only go with `from_host: true`")
        return self


class MultiNode(_Strict):
    """How the nodes of a multi-node recipe find each other."""

    dist_init_port: Annotated[StrictInt, Field(ge=1, le=65535)] = Field(
        description="Port on the head node for torch.distributed init; the launcher "
        "renders --dist-init-addr SM12X_HEAD_ADDR:port."
    )
    why: Why


class Container(_Strict):
    """What the container needs beyond the shared compose settings.

    compose.yaml and the Kubernetes renderer read this; the tests prove the
    compose services match it.
    """

    host_network: bool = False
    devices: list[str] = Field(default_factory=list)
    cap_add: list[str] = Field(default_factory=list)
    why: Why | None = None

    @model_validator(mode="after")
    def _explained(self) -> Container:
        if (self.host_network or self.devices or self.cap_add) and self.why is None:
            raise ValueError("say `why` the container needs host networking, devices or caps")
        return self


class Reference(_Strict):
    """A published throughput figure, with where it comes from.

    `comparable` says whether it ran this recipe's configuration (engine,
    parallelism, DSPARK depth); bench judges only against comparable ones and
    shows the rest as context.
    """

    concurrency: Annotated[int, Field(ge=1)]
    output_tokens_per_s: Annotated[float, Field(gt=0)]
    output_tokens_per_s_max: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="Upper end when the source gives a range."
    )
    mean_itl_ms: Annotated[float, Field(gt=0)] | None = None
    p99_itl_ms: Annotated[float, Field(gt=0)] | None = None
    mean_ttft_ms: Annotated[float, Field(gt=0)] | None = None
    p99_ttft_ms: Annotated[float, Field(gt=0)] | None = None
    accept_length: Annotated[float, Field(ge=1)] | None = None
    input_len: Annotated[int, Field(ge=1)] = 1024
    output_len: Annotated[int, Field(ge=1)] = 512
    engine: Literal["sglang", "vllm"] = "sglang"
    comparable: bool = Field(description="True only if the source ran this recipe's configuration.")
    config: str = Field(description="What the source ran, in a few words.")
    source: str
    url: str | None = None


class AccuracyReference(_Strict):
    """A published benchmark score of this rig, shown beside `verify --accuracy`."""

    correct: Annotated[int, Field(ge=0)]
    total: Annotated[int, Field(ge=1)]
    config: str = Field(description="What the source ran, in a few words (rig, engine, protocol).")
    source: str
    url: str | None = None

    @model_validator(mode="after")
    def _at_most_all(self) -> AccuracyReference:
        if self.correct > self.total:
            raise ValueError(f"correct ({self.correct}) is more than total ({self.total})")
        return self


class Accuracy(_Strict):
    """The accuracy gate of `sm12x verify --accuracy` (lm-eval)."""

    task: str = Field(
        default="sm12x_gsm8k",
        description="The lm-eval task the floor is for (sm12x_gsm8k: GSM8K's test set, "
        "zero-shot chat, thinking on, graded on the last number).",
    )
    floor: Annotated[float, Field(gt=0, le=1)] = Field(
        description="Fail below this accuracy (a fraction of the questions)."
    )
    why: Why
    references: list[AccuracyReference] = Field(default_factory=list)


class Verify(_Strict):
    """What `sm12x verify` expects from a healthy deployment of this recipe."""

    min_accept_length: Annotated[float, Field(ge=1)] = Field(
        description="DSPARK mean acceptance length floor (the bonus token counts, so 1.0 "
        "means no draft token is ever accepted)."
    )
    why: Why
    accuracy: Accuracy | None = None


class Recipe(_Strict):
    name: RecipeName
    summary: str
    status: Status
    configuration: Configuration | None = Field(
        default=None,
        description="Omitted: the baseline configuration of a rig named after this recipe.",
    )
    tracks: list[str] | None = Field(
        default=None,
        description="The image tracks (versions.env SM12X_TRACKS) whose sglang has what this "
        "recipe needs; omitted: every track.",
    )
    hardware: Hardware
    model: Model
    serve: Serve = Serve()
    dspark: DSpark
    flags: dict[FlagName, Flag] = Field(
        description="sglang server flags in the order they are rendered, each with why. "
        "Flags derived from other sections (model, serve, dspark, hardware.nodes) are "
        "not written here."
    )
    env: dict[EnvName, EnvVar] = Field(default_factory=dict)
    sglang_defaults: dict[FlagName | EnvName, LeftAtDefault] = Field(
        default_factory=dict,
        description="Flags and variables left to sglang on purpose, each with the value "
        "sglang resolves it to for this recipe: where a note says a peer's setting is "
        "already sglang's default, the claim is here, and checked.",
    )
    multinode: MultiNode | None = None
    container: Container = Container()
    references: list[Reference] = Field(default_factory=list)
    verify: Verify

    @model_validator(mode="after")
    def _multinode_matches_nodes(self) -> Recipe:
        if self.hardware.nodes > 1 and self.multinode is None:
            raise ValueError(
                f"hardware.nodes is {self.hardware.nodes}: add a `multinode` section "
                "(dist_init_port, why)"
            )
        if self.hardware.nodes == 1 and self.multinode is not None:
            raise ValueError("`multinode` only goes with hardware.nodes > 1")
        return self

    @model_validator(mode="after")
    def _configuration_names_its_rig(self) -> Recipe:
        c = self.configuration
        if c is not None and c.kind == "baseline" and c.rig != self.name:
            raise ValueError(
                f"configuration.rig is {c.rig!r}: a baseline recipe is its rig, so it must be "
                f"{self.name!r} (its own name)"
            )
        if c is not None and c.kind != "baseline" and c.rig == self.name:
            raise ValueError(
                f"configuration.rig names this recipe: a {c.kind} configuration names the "
                "rig's baseline recipe"
            )
        if self.tracks is not None and len(set(self.tracks)) != len(self.tracks):
            raise ValueError("tracks: each track once")
        return self

    @model_validator(mode="after")
    def _verified_pins_its_checkpoint(self) -> Recipe:
        if self.status.state == "verified" and self.model.revision is None:
            raise ValueError(
                "status verified: name model.revision, the commit of the checkpoint that ran"
            )
        return self

    # --- conveniences for the launcher, verify, bench, compose, k8s ---------

    @property
    def rig(self) -> str:
        """The rig this recipe configures (its baseline recipe's name)."""
        return self.configuration.rig if self.configuration else self.name

    @property
    def configuration_kind(self) -> ConfigurationKind:
        return self.configuration.kind if self.configuration else "baseline"

    @property
    def gpu_count_per_node(self) -> int:
        return self.hardware.gpus_per_node

    @property
    def is_multinode(self) -> bool:
        return self.hardware.nodes > 1

    def flag_value(self, name: str) -> str | int | float | None:
        """The value of a flag, None if absent or a switch."""
        flag = self.flags.get(name)
        return None if flag is None else flag.value

    def has_flag(self, name: str) -> bool:
        return name in self.flags

    @property
    def max_running_requests(self) -> int:
        """Effective --max-running-requests: sglang sets 256 for DeepSeek-V4 when unset."""
        value = self.flag_value("--max-running-requests")
        return int(value) if value is not None else DEEPSEEK_V4_DEFAULT_MAX_RUNNING_REQUESTS

    @property
    def comparable_references(self) -> list[Reference]:
        return [r for r in self.references if r.comparable]


# What sglang resolves max_running_requests to when it is not given, for both lines
# and both tracks: arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults sets 256
# for DeepSeek-V4 before the DSpark hook's 48 (speculative_hook.py) could apply.
# tests/unit/test_sglang_validates_recipes.py holds it to sglang's resolution.
DEEPSEEK_V4_DEFAULT_MAX_RUNNING_REQUESTS = 256
