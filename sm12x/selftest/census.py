"""Every sparse-MLA call shape DeepSeek-V4-Flash + DSpark produces, and where it lands.

Shapes come from the code that produces them, not from numbers copied here:
the draft's indices are built by sglang's own `ComputeDsparkWindowGather` and
`build_dspark_swa_page_indices` (torch paths, CPU), the alignment and window
constants are read from sglang's source, and head counts follow the padding
rules of deepseek_v4.py (target; from sglang 0.5.20 its own
`_kernel_num_heads`, run here, which asks flashinfer what its decode serves)
and deepseek_v4_dspark.py (draft). Each distinct call is made with and without
`topk_length` (the patch fills it when it pads a call that has none), on
sglang's real SWA pages (128 tokens up to 0.5.18, 256 in 0.5.23), so the real
page split to 64 runs before every flashinfer call. Calls go through sglang's
real `flash_mla_with_kvcache_sm120` with the kernels emulated (kernels.py for
flashinfer 0.6, envelope.py for 0.7's compiled module), in three
configurations:

- patched:   the dispatch patch active (the image's configuration);
- unpatched: SGLANG_SM120_FLASHMLA_TOPK_PAD=0, i.e. upstream's dispatch;
- triton:    SGLANG_SM120_FLASHMLA_BACKEND=triton, the public workaround.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

from sm12x.selftest.kernels import Emulator, KernelAbort

# DeepSeek-V4-Flash(-0731) config.json: num_attention_heads 64, index_topk 512.
MODEL_HEADS = 64
INDEX_TOPK = 512
# DeepSeekV4TokenToKVPool page size: C4 pages hold 256/4 = 64 entries, C128
# pages 256/128 = 2 (deepseek_v4_backend.py, `page_sizes`).
KV_PAGE_SIZE = 256
D_QK = D_V = 512

SCENARIOS = ("patched", "unpatched", "triton")
# A census dimension from the issue: draft depths, batches and TP sizes.
DEFAULT_GAMMAS = (3, 4, 5, 6, 7)
DEFAULT_BATCHES = tuple(range(1, 65))
DEFAULT_TPS = (1, 2, 4, 8)
DEFAULT_CONTEXTS = (1024, 8192, 65536, 327680)
DEFAULT_CHUNKS = (4096, 8192)


def _sglang_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin, "sglang is not importable"
    return Path(spec.origin).parent


@functools.cache
def source_attribute(relative: str, name: str) -> int:
    """An `self.NAME = <literal>` assignment in an sglang source file, without importing it."""
    tree = ast.parse((_sglang_dir() / relative).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Attribute) and t.attr == name for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            return int(node.value.value)  # type: ignore[arg-type]
    raise LookupError(f"self.{name} = <literal> not found in sglang/{relative}")


@functools.cache
def source_constant(relative: str, name: str) -> int:
    """A module-level `NAME = <literal>` of an sglang source file, without importing it."""
    tree = ast.parse((_sglang_dir() / relative).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise LookupError(f"{name} not found in sglang/{relative}")


def swa_window() -> int:
    return source_constant("srt/layers/attention/deepseek_v4_backend.py", "SWA_WINDOW")


@functools.cache
def swa_page_size() -> int:
    """Tokens per SWA page as the backend hands them to the kernel (`_flash_mla_flashinfer`
    splits them into the 64-token pages flashinfer takes): 0.5.16-0.5.18 set
    `self.swa_page_size = 128`; 0.5.23's backend asserts its one page size
    (`assert self.page_size == 256, "the system hardcodes page_size=256"`)."""
    relative = "srt/layers/attention/deepseek_v4_backend.py"
    try:
        return source_attribute(relative, "swa_page_size")
    except LookupError:
        pass
    tree = ast.parse((_sglang_dir() / relative).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.Assert) else None
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Attribute)
            and test.left.attr == "page_size"
            and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.Constant)
        ):
            return int(test.comparators[0].value)  # type: ignore[arg-type]
    raise LookupError(
        f"sglang/{relative}: neither self.swa_page_size = <literal> nor "
        "assert self.page_size == <literal>"
    )


def index_alignment() -> int:
    return source_constant("srt/layers/attention/deepseek_v4_backend.py", "PAGE_INDEX_ALIGNED_SIZE")


def draft_heads(tp: int) -> int:
    """DSparkAttention pads the local heads up to _PAD_NUM_HEADS (deepseek_v4_dspark.py)."""
    pad = source_constant("srt/models/deepseek_v4_dspark.py", "_PAD_NUM_HEADS")
    return max(MODEL_HEADS // tp, pad)


@functools.cache
def _kernel_num_heads():
    """sglang >= 0.5.20's MqaAttentionBase._kernel_num_heads, None where the model
    has none (0.5.16-0.5.18 pad every target call alike)."""
    relative = "srt/models/deepseek_v4.py"
    if "def _kernel_num_heads(" not in (_sglang_dir() / relative).read_text(encoding="utf-8"):
        return None
    from sglang.srt.models import deepseek_v4

    return deepseek_v4


def target_heads(tp: int, num_tokens: int) -> int:
    """The target's query heads as the kernel sees them at `num_tokens` tokens."""
    local = MODEL_HEADS // tp
    model = _kernel_num_heads()
    if model is None:
        # deepseek_v4.py up to 0.5.18: with tp > 1, pad to 64 when the local heads
        # fit, else all heads.
        if tp == 1:
            return local
        return 64 if local <= 64 else MODEL_HEADS
    # The real method, on an sm_120 (`get_platform().is_sm120`; the backend default
    # SGLANG_SM120_FLASHMLA_BACKEND=flashinfer is read from sglang's envs).
    layer = SimpleNamespace(attn_tp_size=tp, n_local_heads=local, n_heads=MODEL_HEADS)
    saved = model.get_platform
    model.get_platform = lambda: SimpleNamespace(is_sm120=True)
    try:
        return model.MqaAttentionBase._kernel_num_heads(layer, num_tokens)
    finally:
        model.get_platform = saved


def _metadata_module():
    try:  # sglang >= 0.5.17
        from sglang.kernels.ops.speculative.dspark import dspark_attn_metadata as md
    except ImportError:  # sglang 0.5.16
        from sglang.srt.speculative.dspark_components.kernels import dspark_attn_metadata as md
    return md


def draft_indices(gamma: int, batch: int, prefix: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft's SWA indices and topk_length, built by sglang's own code.

    Mirrors DeepseekV4AttnBackend.get_dspark_swa_page_indices: request i has
    `prefix` tokens cached and drafts `gamma` more; token slots are laid out
    contiguously, and the full->SWA mapping is the identity.
    """
    md = _metadata_module()
    window = swa_window()
    max_len = prefix + gamma
    req_to_token = torch.arange(batch * max_len, dtype=torch.int32).view(batch, max_len)
    seq_lens = (prefix + 1 + torch.arange(gamma, dtype=torch.int32)).repeat(batch)
    req_pool = torch.arange(batch, dtype=torch.int64).repeat_interleave(gamma)
    gather = md.ComputeDsparkWindowGather.torch(
        seq_lens_casual=seq_lens,
        req_pool_indices_repeated=req_pool,
        block_size=gamma,
        swa_window=window,
    )
    out_loc = (req_to_token[:, prefix : prefix + gamma]).reshape(-1).to(torch.int64)
    full_to_swa = torch.arange(batch * max_len, dtype=torch.int64)
    return md.BuildDsparkSwaPageIndices.torch(
        req_to_token=req_to_token,
        full_to_swa_mapping=full_to_swa,
        req_pool_indices_per_request=gather.req_pool_indices_per_request,
        offsets=gather.offsets,
        invalid=gather.invalid,
        out_loc=out_loc,
        context_lens=gather.context_lens,
        block_size=gamma,
        swa_window=window,
        page_index_aligned_size=index_alignment(),
    )


def _align(width: int) -> int:
    step = index_alignment()
    return math.ceil(width / step) * step


@dataclass(frozen=True)
class Shape:
    """One distinct call of flash_mla_with_kvcache_sm120, as the kernels see it."""

    phase: str  # draft | verify | extend
    layer: str  # swa (no extra cache) | c4 | c128
    num_tokens: int
    num_heads: int
    topk: int
    extra_topk: int
    extra_pbs: int
    # Whether the caller passes topk_length (without it the patch fills one
    # when it pads; the kernels then scan the original width).
    with_topk_length: bool = True

    @property
    def path(self) -> str:
        return "decode" if self.num_tokens <= 64 else "prefill"


@dataclass(frozen=True)
class Producer:
    """Where a shape comes from: the serving configuration that produces it."""

    gamma: int
    batch: int
    tp: int
    context: int


def _target_layers(context: int) -> Iterator[tuple[str, int, int]]:
    """(layer kind, extra topk, extra page block) of the target's attention layers."""
    yield "swa", 0, 0
    yield "c4", _align(INDEX_TOPK), KV_PAGE_SIZE // 4
    max_pages = math.ceil(context / KV_PAGE_SIZE)
    yield "c128", _align(2 * max_pages), KV_PAGE_SIZE // 128


def shapes(
    gammas: Iterable[int] = DEFAULT_GAMMAS,
    batches: Iterable[int] = DEFAULT_BATCHES,
    tps: Iterable[int] = DEFAULT_TPS,
    contexts: Iterable[int] = DEFAULT_CONTEXTS,
    chunks: Iterable[int] = DEFAULT_CHUNKS,
) -> dict[Shape, list[Producer]]:
    """Every distinct call shape, with the configurations that produce it."""
    found: dict[Shape, list[Producer]] = {}
    swa_topk = _align(swa_window())
    gammas, batches, tps, contexts = list(gammas), list(batches), list(tps), list(contexts)

    def add(shape: Shape, producer: Producer) -> None:
        for with_topk_length in (True, False):
            variant = dataclasses.replace(shape, with_topk_length=with_topk_length)
            found.setdefault(variant, []).append(producer)

    draft_width = {g: draft_indices(g, 1, swa_window())[0].shape[-1] for g in gammas}
    for gamma in gammas:
        for batch in batches:
            for tp in tps:
                producer = Producer(gamma, batch, tp, 0)
                add(
                    Shape("draft", "swa", batch * gamma, draft_heads(tp), draft_width[gamma], 0, 0),
                    producer,
                )
                tokens = batch * (gamma + 1)
                for context in contexts:
                    for layer, extra_topk, extra_pbs in _target_layers(context):
                        add(
                            Shape(
                                "verify",
                                layer,
                                tokens,
                                target_heads(tp, tokens),
                                swa_topk,
                                extra_topk,
                                extra_pbs,
                            ),
                            Producer(gamma, batch, tp, context),
                        )
    for chunk in chunks:
        for tp in tps:
            for context in contexts:
                for layer, extra_topk, extra_pbs in _target_layers(context):
                    add(
                        Shape(
                            "extend",
                            layer,
                            chunk,
                            target_heads(tp, chunk),
                            swa_topk,
                            extra_topk,
                            extra_pbs,
                        ),
                        Producer(0, 1, tp, context),
                    )
    return found


@dataclass
class Outcome:
    """Where one call landed, and whether the patch's arguments were right."""

    scenario: str
    route: str  # cutlass | cutlass-padded | triton | abort | error
    width: int  # index width the kernel saw
    detail: str = ""


@functools.cache
def _swa_cache(pages: int) -> torch.Tensor:
    """A [pages, 128, 1, 584] SWA cache in sglang's page layout, random bytes (the
    split's copy is checked byte for byte; the split never writes its source)."""
    from sm12x.selftest.numerics import make_kv_cache

    return make_kv_cache(pages, swa_page_size(), "cpu", seed=pages)


def _tensors(shape: Shape, producer: Producer) -> dict:
    """CPU tensors with the call's real shapes and dtypes; the draft's indices are the
    real builder's output, and the SWA cache is as large as they need."""
    page = swa_page_size()
    if shape.phase == "draft":
        indices, topk_length = draft_indices(producer.gamma, producer.batch, swa_window())
        indices = indices.view(shape.num_tokens, 1, -1)
        pages = math.ceil((int(indices.max()) + 1) / page)
    else:
        pages = 4
        indices = torch.randint(
            0, pages * page, (shape.num_tokens, 1, shape.topk), dtype=torch.int32
        )
        topk_length = torch.full((shape.num_tokens,), shape.topk, dtype=torch.int32)
    extra = {}
    if shape.extra_topk:
        extra = dict(
            extra_k_cache=torch.zeros(
                pages * 64 // shape.extra_pbs, shape.extra_pbs, 1, 584, dtype=torch.uint8
            ),
            extra_indices_in_kvcache=torch.full(
                (shape.num_tokens, 1, shape.extra_topk), -1, dtype=torch.int32
            ),
            extra_topk_length=torch.ones(shape.num_tokens, dtype=torch.int32),
        )
    return dict(
        q=torch.empty(shape.num_tokens, 1, shape.num_heads, D_QK, dtype=torch.bfloat16),
        k_cache=_swa_cache(pages),
        indices=indices,
        topk_length=topk_length if shape.with_topk_length else None,
        attn_sink=torch.zeros(shape.num_heads, dtype=torch.float32),
        head_dim_v=D_V,
        softmax_scale=D_QK**-0.5,
        **extra,
    )


def _split_kept_every_referenced_token(
    source: torch.Tensor, split: torch.Tensor, indices: torch.Tensor
) -> bool:
    """Every 64-token page the indices reference holds the bytes of its half of the
    128-token source page: the 64 tokens' data (576 bytes each), then their scales
    (8 bytes each). Token addressing is unchanged by the split: token t is slot
    t % 64 of page t // 64."""
    from sm12x.selftest.numerics import DATA_BYTES, SCALE_BYTES

    dst_page, ratio = split.shape[1], source.shape[1] // split.shape[1]
    touched = torch.zeros(split.shape[0], dtype=torch.bool)
    touched[indices[indices >= 0].long() // dst_page] = True
    src = torch.as_strided(source, (source.shape[0], source.stride(0)), (source.stride(0), 1))
    dst = torch.as_strided(split, (split.shape[0], split.stride(0)), (split.stride(0), 1))
    data, scales = dst_page * DATA_BYTES, dst_page * SCALE_BYTES
    for page in touched.nonzero().flatten().tolist():
        whole, sub = divmod(page, ratio)
        scale_at = source.shape[1] * DATA_BYTES + sub * scales
        if not (
            torch.equal(dst[page, :data], src[whole, sub * data : (sub + 1) * data])
            and torch.equal(
                dst[page, data : data + scales], src[whole, scale_at : scale_at + scales]
            )
        ):
            return False
    return True


def _check_arguments(call, args: dict, width: int, check_split: bool = True) -> str:
    """The patch's contract for the arguments a kernel got; '' when they are right."""
    original = args["indices"].squeeze(1)
    seen = call.indices.reshape(call.indices.shape[0], -1)
    if call.kernel == "triton" or width == original.shape[-1]:
        # Unchanged: the very tensors the caller passed (Triton: unpadded).
        if seen.data_ptr() != original.data_ptr() or seen.shape != original.shape:
            return "indices were copied or reshaped for an unchanged call"
        if call.topk_length is not args["topk_length"]:
            return "topk_length was replaced for an unchanged call"
    else:
        if not torch.equal(seen[:, : original.shape[-1]], original):
            return "padding changed the original indices"
        if not bool((seen[:, original.shape[-1] :] == -1).all()):
            return "padding is not -1"
        if args["topk_length"] is not None and call.topk_length is not args["topk_length"]:
            return "topk_length given but not passed through"
        if args["topk_length"] is None and (
            call.topk_length is None
            or call.topk_length.dtype != torch.int32
            or tuple(call.topk_length.shape) != (original.shape[0],)
            or not bool((call.topk_length == original.shape[-1]).all())
        ):
            return "topk_length missing, and not filled with the original width"
    if call.kernel != "triton" and check_split:
        if call.kv_cache.shape[1] != 64:
            return f"the kernel got {call.kv_cache.shape[1]}-token pages, not 64"
        if not _split_kept_every_referenced_token(args["k_cache"], call.kv_cache, seen):
            return "the page split lost a page the indices reference"
    return ""


def _poison_split_output() -> None:
    """Overwrite the page split's persistent output (sglang keeps it across calls and,
    from 0.5.17, copies only touched pages), so a page the split skipped cannot pass
    the byte check with an earlier call's copy."""
    from sglang.srt.runtime_context import get_resources

    buffer = get_resources().buffers.get("flash_mla_sm120_split:cpu")
    if buffer is not None:
        buffer.fill_(0xA5)


def run_shape(
    module, emulator: Emulator, shape: Shape, producer: Producer, scenario: str
) -> Outcome:
    args = _tensors(shape, producer)
    # The split's bytes are part of the patch's contract (it pads the indices
    # the split reads); upstream's own split is not what this census judges.
    check_split = scenario == "patched"
    if check_split:
        _poison_split_output()
    emulator.calls.clear()
    try:
        module.flash_mla_with_kvcache_sm120(
            q=args["q"],
            k_cache=args["k_cache"],
            indices=args["indices"],
            topk_length=args["topk_length"],
            attn_sink=args["attn_sink"],
            head_dim_v=args["head_dim_v"],
            softmax_scale=args["softmax_scale"],
            extra_k_cache=args.get("extra_k_cache"),
            extra_indices_in_kvcache=args.get("extra_indices_in_kvcache"),
            extra_topk_length=args.get("extra_topk_length"),
        )
    except KernelAbort as err:
        return Outcome(scenario, "abort", shape.topk, str(err).splitlines()[0])
    except ValueError as err:  # flashinfer's own Python rejection: also fatal at boot
        return Outcome(scenario, "error", shape.topk, str(err).splitlines()[0])
    (call,) = emulator.calls
    if call.kernel == "triton":
        route = "triton"
    else:
        route = "cutlass" if call.topk == shape.topk else "cutlass-padded"
    return Outcome(scenario, route, call.topk, _check_arguments(call, args, call.topk, check_split))


class Configure:
    """Puts the live module in one scenario's configuration, then back."""

    def __init__(self, module, scenario: str):
        self.module, self.scenario = module, scenario

    def __enter__(self):
        m = self.module
        self.saved = (m._sm120_default_backend, getattr(m, "_SM12X_TOPK_PAD", None))
        # Both are read from the environment once, at import; setting the
        # attributes is what a fresh process with the variable set would do.
        m._sm120_default_backend = "triton" if self.scenario == "triton" else "flashinfer"
        if hasattr(m, "_SM12X_TOPK_PAD"):
            m._SM12X_TOPK_PAD = self.scenario == "patched"
        elif self.scenario == "patched":
            raise RuntimeError("this sglang is not patched: run scripts/apply-patches first")
        return m

    def __exit__(self, *exc):
        m = self.module
        m._sm120_default_backend = self.saved[0]
        if self.saved[1] is not None:
            m._SM12X_TOPK_PAD = self.saved[1]


def run(
    emulator: Emulator, found: dict[Shape, list[Producer]], scenarios: Iterable[str] = SCENARIOS
) -> list[tuple[Shape, Outcome]]:
    from sglang.kernels.ops.attention import flash_mla_sm120 as module

    results = []
    for scenario in scenarios:
        with Configure(module, scenario):
            for shape, producers in found.items():
                outcome = run_shape(module, emulator, shape, producers[0], scenario)
                results.append((shape, outcome))
    return results


def summary(results: list[tuple[Shape, Outcome]]) -> dict[str, Counter]:
    table: dict[str, Counter] = {}
    for _, outcome in results:
        table.setdefault(outcome.scenario, Counter())[outcome.route] += 1
    return table


def as_records(results: list[tuple[Shape, Outcome]]) -> list[dict]:
    return [{**asdict(shape), "path": shape.path, **asdict(outcome)} for shape, outcome in results]
