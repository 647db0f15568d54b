"""The engine behind sglang's serving layer under DSPARK, as far as a CPU can have it.

sglang's OpenAI handler (`OpenAIServingChat`) talks to a tokenizer manager that
streams back, for each request, dicts with the *cumulative* text so far. Behind
it the scheduler hands out the tokens each decode step accepted (1 to gamma+1
under DSPARK speculative decoding) and the detokenizer turns each step's ids
into text incrementally. What runs here:

- the scheduler: a script gives the output token ids and how they arrive, as a
  list of deliveries, each a list of decode steps (token counts); the steps of
  one delivery reach the detokenizer one by one but the serving loop only wakes
  once for them, as when the tokenizer manager has queued several outputs
  under load (`_wait_one_response` keeps `out_list[-1]` and the text so far);
- the detokenizer: sglang's own `DetokenizerManager._decode_batch_token_id_output`
  with `DecodeStatus`, `trim_matched_stop` and `_grouped_batch_decode`, lifted
  from the tree's detokenizer_manager.py by `ast` and run unchanged (its module
  imports the scheduler's IPC stack), so the hold-back of incomplete UTF-8 and
  the stop-token trim are sglang's, version by version. Its inputs follow the
  scheduler's output streamer: the first step carries the last 5 prompt ids as
  surrogate context (`INIT_INCREMENTAL_DETOKENIZATION_OFFSET`), a finished
  request carries `finish_reason.to_json()`, the EOS id as `matched`;
- the tokenizer manager: `generate_request` yields one dict per delivery with
  the cumulative text, `meta_info` as `_handle_batch_output` fills it.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import sys
import time
import types
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Union

from sm12x.recipe.lines import DEFAULT_LINE, LINES

MODEL_ID = "deepseek-ai/DeepSeek-V4-Flash-0731"
SURROGATE_PROMPT_IDS = 5  # schedule_batch.INIT_INCREMENTAL_DETOKENIZATION_OFFSET

_LIFTED_MODULE = "sm12x_sglang_detokenizer"
_LIFTED_METHODS = (
    "trim_matched_stop",
    "_clamp_decode_ids",
    "_grouped_batch_decode",
    "_decode_batch_token_id_output",
)


def _lift_detokenizer(source: Path, find_printable_text: Callable) -> type:
    """DecodeStatus and the incremental-decode methods of DetokenizerManager,
    compiled from sglang's own source into a class of their own."""
    module = ast.parse(source.read_text(encoding="utf-8"))
    decode_status = next(
        (n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "DecodeStatus"), None
    )
    manager = next(
        (n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "DetokenizerManager"),
        None,
    )
    if decode_status is None or manager is None:
        raise RuntimeError(
            f"{source}: no DecodeStatus / DetokenizerManager class: sglang's "
            "detokenizer changed; update sm12x/mock/engine.py"
        )
    methods = {n.name: n for n in manager.body if isinstance(n, ast.FunctionDef)}
    missing = [m for m in _LIFTED_METHODS if m not in methods]
    if missing:
        raise RuntimeError(
            f"{source}: DetokenizerManager has no {missing}: sglang's "
            "detokenizer changed; update sm12x/mock/engine.py"
        )
    lifted = ast.ClassDef(
        name="LiftedDetokenizer",
        bases=[],
        keywords=[],
        decorator_list=[],
        body=[methods[m] for m in _LIFTED_METHODS],
    )
    if "type_params" in ast.ClassDef._fields:  # Python >= 3.12
        lifted.type_params = []  # type: ignore[attr-defined]
    tree = ast.Module(body=[decode_status, lifted], type_ignores=[])
    ast.fix_missing_locations(tree)
    # dataclasses looks the defining module up in sys.modules
    module_obj = sys.modules.setdefault(_LIFTED_MODULE, types.ModuleType(_LIFTED_MODULE))
    namespace: dict[str, Any] = module_obj.__dict__
    namespace.update(
        {
            "dataclasses": dataclasses,
            "defaultdict": defaultdict,
            "List": list,
            "Dict": dict,
            "Optional": Optional,
            "Tuple": tuple,
            "Union": Union,
            "find_printable_text": find_printable_text,
            "DETOKENIZER_MAX_STATES": 1 << 16,
            "decode_without_hf_kwargs": None,  # only for slow tokenizers; V4's is fast
        }
    )
    exec(compile(tree, str(source), "exec"), namespace)  # noqa: S102 (sglang's own code)
    return namespace["LiftedDetokenizer"]


class Detokenizer:
    """One detokenizer process's state, fed one scheduler step at a time."""

    def __init__(self, serving, tokenizer, tool_call_parser: str | None = None):
        cls = _lift_detokenizer(serving.detokenizer_source, serving.utils.find_printable_text)
        self._impl = cls()
        # What DetokenizerManager.init_running_status sets, for this server.
        self._impl.tokenizer = tokenizer
        self._impl.vocab_size = len(tokenizer)
        self._impl.decode_status = {}
        self._impl.disable_tokenizer_batch_decode = False
        self._impl.is_tool_call_parser_gpt_oss = tool_call_parser == "gpt-oss"
        # sglang >= 0.5.23 keeps a tool call's closing token (its own function).
        self._impl.tool_close_token_ids = frozenset()
        try:
            from sglang.srt.parser.response_template import tool_close_token_ids
        except ImportError:
            pass
        else:
            self._impl.tool_close_token_ids = tool_close_token_ids(tool_call_parser, tokenizer)

    def step(
        self,
        rid: str,
        ids: list[int],
        *,
        first: bool,
        prompt_ids: list[int],
        finished: dict | None,
        skip_special_tokens: bool,
        spaces_between_special_tokens: bool = True,
        no_stop_trim: bool = False,
    ) -> str:
        surrogate = prompt_ids[-SURROGATE_PROMPT_IDS:] if first else []
        batch = SimpleNamespace(
            rids=[rid],
            decoded_texts=[""],
            decode_ids=[surrogate + list(ids)],
            read_offsets=[len(surrogate)],
            finished_reasons=[finished],
            no_stop_trim=[no_stop_trim],
            skip_special_tokens=[skip_special_tokens],
            spaces_between_special_tokens=[spaces_between_special_tokens],
        )
        return self._impl._decode_batch_token_id_output(batch)[0]


@dataclass
class Plan:
    """What the scripted model generates for one request, and how it arrives."""

    output_ids: list[int]
    deliveries: list[list[int]]  # each delivery: the token counts of its decode steps
    finish: dict  # finish_reason.to_json() of the last step

    def __post_init__(self):
        if sum(sum(d) for d in self.deliveries) != len(self.output_ids):
            raise ValueError("the deliveries do not add up to the output")
        if any(n <= 0 for d in self.deliveries for n in d) or any(not d for d in self.deliveries):
            raise ValueError("empty decode step or delivery")


Script = Callable[[Any], Plan]  # adapted request (GenerateReqInput) -> Plan


@dataclass
class ServerArgsView:
    """The server arguments the serving layer reads, as `sglang serve` sets them
    for the recipes (--reasoning-parser deepseek-v4 --tool-call-parser deepseekv4)."""

    reasoning_parser: str | None = "deepseek-v4"
    tool_call_parser: str | None = "deepseekv4"
    default_chat_template_kwargs: dict | None = None
    incremental_streaming_output: bool = False
    stream_response_default_include_usage: bool = False
    enable_cache_report: bool = False
    context_length: int | None = None
    allow_auto_truncate: bool = False
    tokenizer_metrics_allowed_custom_labels: list | None = None
    tokenizer_metrics_custom_labels_header: str = "x-custom-labels"
    speculative_algorithm: str | None = "DSPARK"
    revision: str | None = None


@dataclass
class TemplateManagerView:
    """sglang's TemplateManager for DeepSeek-V4: no Jinja template (the encoder
    renders the prompt), no forced reasoning, no template reasoning config."""

    chat_template_name: str | None = None
    jinja_template_content_format: str = "string"
    force_reasoning: bool = False
    reasoning_config: Any = None


class HfConfigView(SimpleNamespace):
    def to_dict(self) -> dict:
        return dict(vars(self))


@dataclass
class ModelConfigView:
    hf_config: Any = field(
        default_factory=lambda: HfConfigView(
            architectures=["DeepseekV4ForCausalLM"], model_type="deepseek_v4"
        )
    )
    is_multimodal: bool = False

    def get_default_sampling_params(self) -> dict:
        return {}


def model_id(line: str = DEFAULT_LINE) -> str:
    """The served model id of a line's stand-in (its first checkpoint's)."""
    return LINES[line].hf_ids[0]


def server_args_for(line: str = DEFAULT_LINE, **kw) -> ServerArgsView:
    """The server arguments of a line's recipes: its own parsers (sm12x.recipe.lines)."""
    known = LINES[line]
    return ServerArgsView(
        **{
            "reasoning_parser": known.reasoning_parser,
            "tool_call_parser": known.tool_call_parser,
            **kw,
        }
    )


def model_config_for(line: str = DEFAULT_LINE) -> ModelConfigView:
    """What sglang's ModelConfig says of a line's checkpoint: the architecture and
    model_type its chat-encoding dispatch reads, and whether it takes images
    (ModelConfig.is_multimodal: V4.1's vision tower; the serving layer refuses
    media input for a model that is not)."""
    known = LINES[line]
    config = HfConfigView(architectures=[known.architectures[0]], model_type=known.model_type)
    return ModelConfigView(hf_config=config, is_multimodal=known.vision_tower)


class TokenizerManagerStandIn:
    """What `OpenAIServingChat` calls on sglang's TokenizerManager."""

    def __init__(
        self,
        serving,
        tokenizer,
        script: Script,
        *,
        server_args: ServerArgsView | None = None,
        on_delivery: Callable[[], Any] | None = None,
        on_finished: Callable[..., Any] | None = None,
        line: str = DEFAULT_LINE,
    ):
        self.serving = serving
        self.tokenizer = tokenizer
        self.script = script
        self.server_args = server_args or server_args_for(line)
        self.model_config = model_config_for(line)
        self.served_model_name = model_id(line)
        self.request_logger = SimpleNamespace(log_requests=False, log_requests_level=0)
        self.detokenizer = Detokenizer(serving, tokenizer, self.server_args.tool_call_parser)
        # awaited between deliveries (the stand-in server paces its stream here)
        self.on_delivery = on_delivery
        # called once a request's last token is out (the stand-in's /metrics)
        self.on_finished = on_finished
        # sglang >= 0.5.23 reads its configuration from the published context.
        serving.publish(self.server_args)

    def config_value(self, name: str):
        """sglang >= 0.5.18 reads server configuration through this."""
        return getattr(self.server_args, name)

    @property
    def model_path(self) -> str:
        return self.served_model_name

    def create_abort_task(self, obj):
        return None

    async def generate_request(self, obj, request=None):
        prompt_ids = list(
            obj.input_ids
            if getattr(obj, "input_ids", None) is not None
            else self.tokenizer.encode(obj.text)
        )
        plan = self.script(obj)
        params = obj.sampling_params or {}
        skip = params.get("skip_special_tokens", True)
        spaces = params.get("spaces_between_special_tokens", True)
        no_stop_trim = bool(params.get("no_stop_trim", False))
        rid = getattr(obj, "rid", None) or uuid.uuid4().hex
        text, done, first = "", 0, True
        started, first_at = time.monotonic(), None
        last_delivery = len(plan.deliveries) - 1
        for number, delivery in enumerate(plan.deliveries):
            for step_number, count in enumerate(delivery):
                ids = plan.output_ids[done : done + count]
                done += count
                finished = (
                    plan.finish
                    if number == last_delivery and step_number == len(delivery) - 1
                    else None
                )
                text += self.detokenizer.step(
                    rid,
                    ids,
                    first=first,
                    prompt_ids=prompt_ids,
                    finished=finished,
                    skip_special_tokens=skip,
                    spaces_between_special_tokens=spaces,
                    no_stop_trim=no_stop_trim,
                )
                first = False
            finished = plan.finish if number == last_delivery else None
            first_at = first_at or time.monotonic()
            if finished and self.on_finished is not None:
                # Counted before the last yield: a non-streamed request's consumer
                # takes the finished delivery and never resumes this generator.
                now = time.monotonic()
                self.on_finished(
                    prompt_tokens=len(prompt_ids),
                    completion_tokens=done,
                    streaming=bool(obj.stream),
                    ttft_s=first_at - started,
                    e2e_s=now - started,
                )
            if obj.stream or finished:
                yield {
                    "text": text,
                    "output_ids": plan.output_ids[:done],
                    "meta_info": {
                        "id": rid,
                        "finish_reason": finished,
                        "prompt_tokens": len(prompt_ids),
                        "completion_tokens": done,
                        "reasoning_tokens": 0,
                        "cached_tokens": 0,
                        "weight_version": "default",
                    },
                }
            if self.on_delivery is not None and number != last_delivery:
                await self.on_delivery()


def serving_chat(serving, tokenizer, script: Script, **kw):
    """An `OpenAIServingChat` over the stand-in tokenizer manager."""
    manager = TokenizerManagerStandIn(serving, tokenizer, script, **kw)
    return serving.OpenAIServingChat(manager, TemplateManagerView())


async def collect_stream(response) -> list[str]:
    """The SSE events of a StreamingResponse, as the client receives them."""
    events = []
    async for piece in response.body_iterator:
        events.append(piece if isinstance(piece, str) else piece.decode())
    return events


def run(coro):
    return asyncio.run(coro)
