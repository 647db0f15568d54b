"""Run in a subprocess by test_tool_choice_under_dspark.py, one sglang tree per process.

A chat request with tools and a `tool_choice`, taken through sglang's real code
from the OpenAI layer to the scheduler's admission check, on the server a
recipe launches (DSPARK on):

1. the server: a real `ServerArgs`, from the rtx-pro-6000-tp4 recipe's rendered
   flags through sglang's own CLI parser (`prepare_server_args`), plus
   `--device cuda` (auto-detection needs a GPU) and a config.json carrying the
   DeepSeek-V4 fields argument resolution reads (`dspark_block_size` marks the
   draft bundled in the checkpoint, as in DeepSeek-V4-Flash-0731);
2. the OpenAI layer (serving_chat.py `_process_messages`): the real
   `FunctionCallParser(tools, "deepseekv4").get_structure_constraint(...)` and
   serving_chat's own fallback, `get_json_schema_constraint`, for required or
   named when the detector gives none; then `ChatCompletionRequest.to_sampling_params`;
3. the tokenizer manager (`_create_tokenized_object`): the real
   `SamplingParams(**...)`, `.normalize()`, `.verify()`, and a real
   `TokenizedGenerateReqInput`;
4. the scheduler: the real `Scheduler.handle_generate_request`. A Scheduler
   cannot be constructed here (its __init__ loads the model onto GPUs), so the
   attributes the method reads are set as __init__ sets them from the
   ServerArgs above (`spec_algorithm = SpeculativeAlgorithm.from_string(
   server_args.speculative_algorithm)`, `enable_overlap`, ...), sglang >= 0.5.17's
   runtime context is published from them, and what lies past the admission
   checks stands in: the grammar manager and the waiting queue record what
   reaches them.

Prints one JSON object: per case, whether the request reached the grammar
manager (accepted) or was queued finished with an abort, and the reason.

With --dflash-check, step 4 is only the scheduler's DFLASH-family admission
check itself (`validate_dflash_request`, what `handle_generate_request` calls
for DSPARK), given the request's real SamplingParams: sglang 0.5.23's request
path reads scheduler state its __init__ builds (tree cache, KV-event publisher,
output streamer) that the stand-in above does not, so there the check is
called directly.
"""

from __future__ import annotations

import json
import sys
import tempfile
import types
from pathlib import Path

from sm12x.launch.plan import build_launch
from sm12x.recipe import load_all
from sm12x.selftest.env import stub_torchvision

stub_torchvision()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sglang.srt import runtime_context  # noqa: E402
from sglang.srt.entrypoints.openai import protocol  # noqa: E402
from sglang.srt.function_call import function_call_parser as fcp  # noqa: E402
from sglang.srt.function_call.utils import get_json_schema_constraint  # noqa: E402
from sglang.srt.managers import scheduler as scheduler_module  # noqa: E402
from sglang.srt.managers.io_struct import TokenizedGenerateReqInput  # noqa: E402
from sglang.srt.managers.schedule_batch import FINISH_ABORT  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from tools import golden  # noqa: E402

TOOLS = [
    protocol.Tool(
        type="function",
        function=protocol.Function(
            name="get_weather",
            description="Current weather in a city",
            parameters={
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        ),
    )
]
# A vocabulary size: only SamplingParams.verify's token-id bounds read it here.
VOCAB = 129280


def sampling_params_for(tool_choice) -> tuple[SamplingParams, str | None]:
    """What the OpenAI layer and the tokenizer manager hand the scheduler."""
    request = protocol.ChatCompletionRequest(
        model="deepseek-ai/DeepSeek-V4-Flash-0731",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=TOOLS,
        tool_choice=tool_choice,
        stream=True,
        max_tokens=64,
    )
    constraint = None
    if request.tool_choice != "none":
        parser = fcp.FunctionCallParser(TOOLS, "deepseekv4")
        constraint = parser.get_structure_constraint(
            request.tool_choice, parallel_tool_calls=request.parallel_tool_calls
        )
        if constraint is None and (
            request.tool_choice == "required"
            or isinstance(request.tool_choice, protocol.ToolChoice)
        ):
            constraint = (
                "json_schema",
                get_json_schema_constraint(
                    TOOLS, request.tool_choice, parallel_tool_calls=request.parallel_tool_calls
                ),
            )
    raw = request.to_sampling_params(
        stop=[], model_generation_config={}, tool_call_constraint=constraint
    )
    params = SamplingParams(**raw)
    params.normalize(None)
    params.verify(VOCAB)
    return params, constraint[0] if constraint else None


class Recorder:
    """The scheduler's grammar manager and waiting queue: records what reaches them."""

    def __init__(self):
        self.grammar, self.queued = [], []

    def process_req_with_grammar(self, req) -> bool:
        self.grammar.append(req)
        return True


RECIPE = "rtx-pro-6000-tp4"
# What argument resolution reads from config.json (DeepSeek-V4-Flash's values
# where the reference notes give them; the rest only has to exist).
CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "num_attention_heads": 64,
    "index_topk": 512,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "sliding_window": 128,
    "compress_ratios": [0, 4, 128, 4],
    "dspark_block_size": 5,
    "num_hidden_layers": 4,
    "hidden_size": 1024,
    "num_key_value_heads": 1,
    "vocab_size": VOCAB,
    "max_position_embeddings": 1048576,
    "torch_dtype": "bfloat16",
}


def server_args(algorithm: str):
    """The recipe's server, through sglang's own parser and argument resolution."""
    recipe = next(r for r in load_all() if r.name == RECIPE)
    model = Path(tempfile.mkdtemp(prefix="sm12x-dsv4-config-"))
    (model / "config.json").write_text(json.dumps(CONFIG))
    argv: list[str] = []
    for arg in build_launch(recipe, golden.context(recipe, 0)).args:
        if arg.flag == "--api-key":  # an environment reference; not needed here
            continue
        if arg.flag.startswith("--speculative") and algorithm != "DSPARK":
            continue  # the control: the same server without speculation
        value = str(model) if arg.flag == "--model-path" else arg.value
        argv += [arg.flag] + ([str(value)] if value is not None else [])
    return prepare_server_args(argv + ["--device", "cuda"])


def scheduler(args, recorder: Recorder):
    Scheduler = scheduler_module.Scheduler
    sched = object.__new__(Scheduler)
    # As Scheduler.__init__ sets them from ServerArgs.
    sched.server_args = args
    sched.spec_algorithm = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
    sched.enable_overlap = not args.disable_overlap_schedule
    sched.enable_session_radix_cache = getattr(args, "enable_session_radix_cache", False)
    sched.disaggregation_mode = scheduler_module.DisaggregationMode(args.disaggregation_mode)
    sched.disable_radix_cache = args.disable_radix_cache
    sched.max_new_tokens_limit = None
    sched.page_size = args.page_size
    # The process-wide server args, as the scheduler process installs them at
    # start (0.5.17: publish(); 0.5.16: the context's set_server_args()).
    if hasattr(runtime_context, "publish"):
        runtime_context.publish(args, role="scheduler")
    else:
        runtime_context.get_context().set_server_args(args)
    # Past boot, for a request without a session, metrics or multimodal input.
    sched.session_controller = {}
    sched.model_config = types.SimpleNamespace(hf_eos_token_id={1}, vocab_size=VOCAB)
    sched.metrics_reporter = types.SimpleNamespace(enable_metrics=False)
    sched.metrics_collector = None
    sched.dllm_config = None
    sched.tokenizer = None
    # KV pool sizes come from the model runner (GPU memory); one TP4 server's.
    sched.max_total_num_tokens = sched.max_req_len = 1_000_000
    sched.max_req_input_len = sched.max_req_len - 1
    sched.grammar_manager = recorder
    sched._add_request_to_queue = lambda req, is_retracted=False: recorder.queued.append(req)
    return sched


def admit(args, tool_choice) -> dict:
    params, constraint = sampling_params_for(tool_choice)
    recorder = Recorder()
    recv = TokenizedGenerateReqInput(
        rid="r1",
        input_text="Weather in Paris?",
        input_ids=[0, 1, 2, 3],
        input_embeds=None,
        mm_inputs=None,
        token_type_ids=None,
        sampling_params=params,
        return_logprob=False,
        logprob_start_len=-1,
        top_logprobs_num=0,
        token_ids_logprob=None,
        stream=True,
    )
    # This process is TP rank 0 (sglang's own override; no process group here).
    with runtime_context.get_parallel().override(tp_rank=0, tp_size=args.tp_size):
        scheduler(args, recorder).handle_generate_request(recv)
    finished = [
        r for r in recorder.queued if isinstance(r.to_finish or r.finished_reason, FINISH_ABORT)
    ]
    return {
        "constraint": constraint,
        "grammar_keys": sorted(
            k
            for k in ("json_schema", "regex", "ebnf", "structural_tag")
            if getattr(params, k, None) is not None
        ),
        "accepted": bool(recorder.grammar) and not finished,
        "reached_grammar_manager": len(recorder.grammar),
        "aborted": [(r.to_finish or r.finished_reason).message for r in finished],
    }


def dflash_check() -> dict:
    """The DFLASH-family admission check on each tool_choice's request."""
    from sglang.srt.speculative.dflash_utils import validate_dflash_request

    named = {"type": "function", "function": {"name": "get_weather"}}
    args = server_args("DSPARK")
    spec = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
    overlap = getattr(spec, "supports_grammar_overlap", None)
    out = {
        "speculative_algorithm": args.speculative_algorithm,
        "is_dflash_family": spec.is_dflash_family(),
        "supports_grammar_overlap": overlap() if overlap else None,
    }
    for label, choice in (("required", "required"), ("named", named), ("auto", "auto")):
        params, constraint = sampling_params_for(choice)
        # What the check reads of a Req (set as Req.__init__ sets them from the input).
        req = types.SimpleNamespace(
            sampling_params=params, return_logprob=False, return_hidden_states=False
        )
        out[label] = {
            "constraint": constraint,
            "grammar_keys": sorted(
                k
                for k in ("json_schema", "regex", "ebnf", "structural_tag")
                if getattr(params, k, None) is not None
            ),
            "rejection": validate_dflash_request(req, not args.disable_overlap_schedule),
        }
    return out


def main() -> None:
    if sys.argv[1:] == ["--dflash-check"]:
        json.dump(dflash_check(), sys.stdout)
        return
    named = {"type": "function", "function": {"name": "get_weather"}}
    out = {}
    for algorithm in ("DSPARK", "NONE"):
        args = server_args(algorithm)
        spec = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
        # 0.5.17: whether the worker advances the grammar inside verify (absent in 0.5.16).
        overlap = getattr(spec, "supports_grammar_overlap", None)
        out[algorithm] = {
            "speculative_algorithm": args.speculative_algorithm,
            "is_dflash_family": spec.is_dflash_family(),
            "supports_grammar_overlap": overlap() if overlap else None,
        }
        for label, choice in (("required", "required"), ("named", named), ("auto", "auto")):
            out[algorithm][label] = admit(args, choice)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
