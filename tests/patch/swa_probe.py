"""Run in a subprocess by test_swa_eviction.py, with one sglang tree first on sys.path.

A long DSPARK generation driven through sglang's real scheduler-side
bookkeeping on CPU: the real DeepSeek-V4 KV pool, SWA allocator, req_to_token
pool and radix cache (built as the scheduler builds them, small), the real
admission (`PrefillAdder`), `ScheduleBatch.prepare_for_extend`, the decode-memory
check the scheduler runs before every decode step (`check_decode_mem`) and
`ScheduleBatch.prepare_for_decode`, which for DSPARK reaches
`DFlashDraftInputV2.prepare_for_decode` and, where it is called, the real
eviction (`maybe_evict_swa` -> `free_swa_out_of_window_slots` -> `free_swa`).
The allocator's Triton kernels run under TRITON_INTERPRET=1.

Stand-ins, only for what the GPU would do between two scheduler steps: the
forward pass is not run; each step every request accepts all gamma drafts plus
the bonus token, committed the way the result processor commits a verified
run (`kv_committed_len += n`, `output_ids.extend(...)`). The scheduler's step
counter is advanced as `Scheduler.run_batch` does.

Prints one JSON object: the configuration and one record per decode step.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from array import array
from types import SimpleNamespace

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 first"

from sm12x.selftest.env import stub_torchvision  # noqa: E402

stub_torchvision()

import torch  # noqa: E402
from sglang.srt import runtime_context  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

PAGE = 256  # sglang's DSV4 pool builder requires 256-token SWA pages on CUDA
WINDOW = 128  # DeepSeek-V4-Flash sliding window
GAMMA = 7  # DSPARK depth of the reference 4x RTX PRO 6000 deployment
FULL_TOKENS = 64 * PAGE
SWA_TOKENS = 10 * PAGE
PROMPTS = (300, 337)
STEPS = 200
EVICTION_INTERVAL = int(os.environ["SGLANG_SWA_EVICTION_INTERVAL"])
VOCAB = 129280


def server_args() -> ServerArgs:
    """The resolved config the scheduler publishes, for a DSPARK launch with the
    radix cache on (the recipes' setting). Fields this path does not read keep
    their declared defaults: ServerArgs.__post_init__ would need the checkpoint."""
    args = object.__new__(ServerArgs)
    for field in dataclasses.fields(ServerArgs):
        if field.default is not dataclasses.MISSING:
            setattr(args, field.name, field.default)
        elif field.default_factory is not dataclasses.MISSING:
            setattr(args, field.name, field.default_factory())
    args.model_path = "deepseek-ai/DeepSeek-V4-Flash-0731"
    args.device = "cpu"
    args.page_size = PAGE
    args.chunked_prefill_size = 4096
    args.disable_radix_cache = False
    args.speculative_algorithm = "DSPARK"
    args.speculative_dspark_block_size = GAMMA
    args.speculative_num_draft_tokens = GAMMA + 1
    return args


def build(args: ServerArgs):
    """Pools, allocator and tree cache, as kv_cache_configurator and
    kv_cache_builder build them for DeepSeek-V4 on CUDA (small sizes)."""
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache

    max_reqs = 4
    req_to_token = ReqToTokenPool(
        size=max_reqs, max_context_len=FULL_TOKENS + PAGE, device="cpu", enable_memory_saver=False
    )
    kv_pool = DeepSeekV4TokenToKVPool(
        max_num_reqs=max_reqs,
        num_req_slots=req_to_token.req_to_token.shape[0],
        swa_size=SWA_TOKENS,
        c4_size=FULL_TOKENS // 4,
        c128_size=FULL_TOKENS // 128,
        c4_state_pool_size=max_reqs * 8,
        c128_state_pool_size=max_reqs * 8,
        page_size=PAGE,
        swa_page_size=PAGE,
        sliding_window=WINDOW,
        dtype=torch.float8_e4m3fn,
        c4_state_dtype=torch.float32,
        c128_state_dtype=torch.float32,
        qk_nope_head_dim=448,
        qk_rope_head_dim=64,
        indexer_head_dim=128,
        layer_num=3,
        device="cpu",
        enable_memory_saver=False,
        compression_ratios=[0, 4, 128],
    )  # one layer of each kind: SWA-only, C4, C128
    allocator = SWATokenToKVPoolAllocator(
        FULL_TOKENS,
        SWA_TOKENS,
        page_size=PAGE,
        dtype=torch.float8_e4m3fn,
        device="cpu",
        kvcache=kv_pool,
        need_sort=False,
    )
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=req_to_token,
        token_to_kv_pool_allocator=allocator,
        page_size=PAGE,
        chunked_prefill_size=args.chunked_prefill_size,
        sliding_window_size=WINDOW,
    )
    tree = create_tree_cache(
        TreeCacheBuildContext(
            server_args=args,
            params=params,
            is_hybrid_swa=True,
            is_hybrid_ssm=False,
            enable_hierarchical_cache=False,
            disable_radix_cache=False,
            effective_chunked_prefill_size=args.chunked_prefill_size,
            tp_worker=None,
            model_config=None,
            tp_size=1,
            tp_rank=0,
            tp_group=None,
            full_tokens_per_layer=FULL_TOKENS,
        )
    )
    return req_to_token, allocator, tree


def main() -> None:
    args = server_args()
    runtime_context.publish(args, role="test")

    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.schedule_policy import PrefillAdder
    from sglang.srt.mem_cache.common import maybe_cache_unfinished_req
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.speculative.draft_worker_common import make_draft_input_v2
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    req_to_token, allocator, tree = build(args)
    out = {
        "tree_cache": type(tree).__name__,
        "allocator": type(allocator).__name__,
        "page": PAGE,
        "window": WINDOW,
        "gamma": GAMMA,
        "swa_tokens": SWA_TOKENS,
        "full_tokens": FULL_TOKENS,
        "eviction_interval": EVICTION_INTERVAL,
        "prompts": list(PROMPTS),
        "steps": [],
    }

    # Admission and prefill, as the scheduler does them.
    adder = PrefillAdder(PAGE, tree, allocator, None, 0.0, FULL_TOKENS, 4096)
    reqs = []
    for i, length in enumerate(PROMPTS):
        sampling = SamplingParams(max_new_tokens=1 << 20, temperature=0.0)
        sampling.normalize(None)
        req = Req(
            f"r{i}",
            "",
            array("q", [(31 * i + j) % 997 + 3 for j in range(length)]),
            sampling,
            vocab_size=VOCAB,
        )
        req.init_next_round_input(tree)
        adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
        reqs.append(req)
    assert adder.can_run_list == reqs, "admission refused a request"
    batch = ScheduleBatch.init_new(
        reqs,
        req_to_token,
        allocator,
        tree,
        SimpleNamespace(vocab_size=VOCAB, is_encoder_decoder=False),
        enable_overlap=True,
        spec_algorithm=SpeculativeAlgorithm.from_string("DSPARK"),
    )
    batch.prepare_for_extend()
    forward_ct = 1
    batch.forward_iter = forward_ct
    for req in reqs:  # the prefill's result: one token, prompt cached in the tree
        req.output_ids.append(5)
        maybe_cache_unfinished_req(req, tree)
    batch.spec_info = make_draft_input_v2(
        bonus_tokens=torch.zeros(len(reqs), dtype=torch.int64), new_seq_lens=batch.seq_lens.clone()
    )

    for step in range(1, STEPS + 1):
        record = {"step": step, "forward_iter": batch.forward_iter}
        # Scheduler.update_running_batch: the memory check, then the preparation.
        if not batch.check_decode_mem():
            record["stop"] = "check_decode_mem: the KV pool cannot hold the next step (retract)"
        else:
            try:
                batch.prepare_for_decode()
            except RuntimeError as err:  # the allocation itself failed
                record["stop"] = f"prepare_for_decode: {str(err).splitlines()[0]}"
        record.update(
            swa_available=allocator.swa_available_size(),
            full_available=allocator.full_available_size(),
            generated=[len(r.output_ids) for r in reqs],
            seqlen=[r.seqlen for r in reqs],
            allocated=[r.kv.kv_allocated_len for r in reqs],
            swa_evicted=[r.kv.swa_evicted_seqlen for r in reqs],
            decode_batch_idx=[r.decode_batch_idx for r in reqs],
            # Every in-window position must still map to a live SWA slot.
            window_intact=[window_intact(r, req_to_token, allocator) for r in reqs],
        )
        out["steps"].append(record)
        if "stop" in record:
            break
        # Scheduler.run_batch, then the verify's result: every draft accepted.
        forward_ct += 1
        batch.forward_iter = forward_ct
        for req in reqs:
            req.kv_committed_len += GAMMA + 1
            req.output_ids.extend([7] * (GAMMA + 1))
    json.dump(out, sys.stdout)


def window_intact(req, req_to_token, allocator) -> bool:
    """The KV positions attention still reads, [seqlen-1-window, committed), all
    map to a live SWA slot."""
    start = max(0, req.seqlen - 1 - WINDOW)
    locs = req_to_token.req_to_token[req.req_pool_idx, start : req.kv_committed_len].long()
    return bool((allocator.full_to_swa_index_mapping[locs] > 0).all())


if __name__ == "__main__":
    main()
