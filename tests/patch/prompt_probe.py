"""Run in a subprocess by test_prompt_encoding.py, with one sglang tree first on sys.path.

Usage: prompt_probe.py CASES.json. Each case is a chat request body as a client
sends it (plain JSON). For each, prints (one JSON object on stdout):

- served: the prompt sglang's real serving path builds for the request:
  `ChatCompletionRequest.model_validate(body)` (what FastAPI does with the
  body), then `OpenAIServingChat._convert_to_internal_request`, the real
  request-to-prompt code, down to the `GenerateReqInput` the engine would get;
- reference: the DeepSeek-V4 reference encoder (`encode_messages` of the
  encoding script sglang vendors from the checkpoint) given the same messages
  and tools as the plain dicts the client sent.

Only the tokenizer manager is a stand-in (the engine and the 150 GB
checkpoint's tokenizer cannot run here): its tokenizer turns the prompt into
its code points, so the string is recovered exactly from the request's ids.
"""

from __future__ import annotations

import copy
import json
import sys
from types import SimpleNamespace

from sm12x.selftest.env import stub_torchvision

stub_torchvision()

from sglang.srt.entrypoints.openai import encoding_dsv4  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest  # noqa: E402
from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat  # noqa: E402


class CodePointTokenizer:
    """One id per character: the prompt string survives tokenization unchanged."""

    chat_template = None

    def encode(self, text: str, **kwargs) -> list[int]:
        return [ord(c) for c in text]


def serving() -> OpenAIServingChat:
    """The chat server as sm12x's recipes launch it: DeepSeek-V4 architecture,
    `--tool-call-parser deepseekv4 --reasoning-parser deepseek-v4`."""
    server_args = SimpleNamespace(
        tool_call_parser="deepseekv4",
        reasoning_parser="deepseek-v4",
        default_chat_template_kwargs=None,
        tokenizer_metrics_allowed_custom_labels=None,
        tokenizer_metrics_custom_labels_header=None,
        revision=None,
    )
    # 0.5.18 picks the encoder's reasoning-effort profile from the checkpoint's
    # own script (a download): name it, as a config override, to stay offline.
    # "preview" is what 0.5.17 vendors and the oracle's default.
    hf_config = SimpleNamespace(
        architectures=["DeepseekV4ForCausalLM"],
        model_type="deepseek_v4",
        to_dict=lambda: {"dsv4_reasoning_effort_profile": "preview"},
    )
    model_config = SimpleNamespace(
        hf_config=hf_config, is_multimodal=False, get_default_sampling_params=lambda: {}
    )
    manager = SimpleNamespace(
        server_args=server_args,
        model_config=model_config,
        tokenizer=CodePointTokenizer(),
        model_path="deepseek-ai/DeepSeek-V4-Flash-0731",
        config_value=lambda name: getattr(server_args, name),
    )
    template_manager = SimpleNamespace(
        chat_template_name=None, jinja_template_content_format="string", reasoning_config=None
    )
    chat = OpenAIServingChat(manager, template_manager)
    assert chat.chat_encoding_spec == "dsv4", chat.chat_encoding_spec
    return chat


def served(chat: OpenAIServingChat, body: dict) -> str:
    request = ChatCompletionRequest.model_validate(copy.deepcopy(body))
    internal, _ = chat._convert_to_internal_request(request)
    return "".join(map(chr, internal.input_ids))


def reference(body: dict) -> str:
    """The reference encoder's convention: tools ride on the system message
    (an empty one leads when the conversation has none)."""
    messages = copy.deepcopy(body["messages"])
    if messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": ""})
    if body.get("tools"):
        messages[0]["tools"] = copy.deepcopy(body["tools"])
    thinking = body["chat_template_kwargs"]["thinking"]  # every case states it
    return encoding_dsv4.encode_messages(messages, thinking_mode="thinking" if thinking else "chat")


def main(path: str) -> None:
    cases = json.loads(open(path, encoding="utf-8").read())
    chat = serving()
    out = {
        name: {"served": served(chat, body), "reference": reference(body)}
        for name, body in cases.items()
    }
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1])
