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
checkpoint cannot run here). Up to 0.5.18 sglang renders the prompt as text with
the encoder it vendors: the stand-in's tokenizer turns that text into its code
points, so the string is recovered exactly from the request's ids. sglang 0.5.23
renders DeepSeek-V4 prompts to token ids with deepseek-recipe (DeepSeek's own
renderer) and vendors no encoder: there the tokenizer is DeepSeek-V4's
(tests/support/tokenizer_v4.py), the served prompt is its decoding of the
request's ids (and the ids must equal the reference text's tokens), the
reference encoder the pinned track's copy (the serving configuration is
published as sglang 0.5.23 reads it, from its real ServerArgs).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from sm12x.selftest.env import stub_torchvision

stub_torchvision()

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest  # noqa: E402
from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat  # noqa: E402

# Whether this sglang renders the prompt as text with the encoder it vendors.
VENDORED = importlib.util.find_spec("sglang.srt.entrypoints.openai.encoding_dsv4") is not None
if VENDORED:
    from sglang.srt.entrypoints.openai import encoding_dsv4
else:
    from sm12x.mock import serving as sglang_serving
    from sm12x.mock import tokenizer_v4

    encoding_dsv4 = sglang_serving.reference_encoder()


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
    if not VENDORED:
        from sglang.srt.runtime_context import publish
        from sglang.srt.server_args import prepare_server_args

        publish(
            prepare_server_args(
                [
                    "--model-path",
                    "dummy",
                    "--tool-call-parser",
                    "deepseekv4",
                    "--reasoning-parser",
                    "deepseek-v4",
                ]
            ),
            role="tokenizer",
        )
    manager = SimpleNamespace(
        server_args=server_args,
        model_config=model_config,
        tokenizer=CodePointTokenizer() if VENDORED else tokenizer_v4.load(),
        model_path="deepseek-ai/DeepSeek-V4-Flash-0731",
        config_value=lambda name: getattr(server_args, name),
    )
    template_manager = SimpleNamespace(
        chat_template_name=None, jinja_template_content_format="string", reasoning_config=None
    )
    chat = OpenAIServingChat(manager, template_manager)
    assert chat.chat_encoding_spec == "dsv4", chat.chat_encoding_spec
    return chat


def served(chat: OpenAIServingChat, body: dict) -> tuple[str, list[int]]:
    request = ChatCompletionRequest.model_validate(copy.deepcopy(body))
    internal, _ = chat._convert_to_internal_request(request)
    ids = list(internal.input_ids)
    if VENDORED:
        return "".join(map(chr, ids)), ids
    return chat.tokenizer_manager.tokenizer.decode(ids, skip_special_tokens=False), ids


def reference(body: dict) -> str:
    """The reference encoder's convention: tools ride on the system message
    (an empty one leads when the conversation has none)."""
    messages = copy.deepcopy(body["messages"])
    if messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": ""})
    if body.get("tools"):
        messages[0]["tools"] = copy.deepcopy(body["tools"])
    thinking = body["chat_template_kwargs"]["thinking"]  # every case states it
    # sglang 0.5.23 renders a thinking request that names no reasoning_effort at
    # deepseek-recipe's default, "max" (SGLANG_DSV4_REASONING_EFFORT unset); the
    # vendored encoders of 0.5.17-0.5.18 at none. The oracle is asked for the same.
    effort = "max" if thinking and not VENDORED else None
    return encoding_dsv4.encode_messages(
        messages, thinking_mode="thinking" if thinking else "chat", reasoning_effort=effort
    )


def main(path: str) -> None:
    cases = json.loads(Path(path).read_text(encoding="utf-8"))
    chat = serving()
    out = {}
    for name, body in cases.items():
        want = reference(body)
        try:
            text, ids = served(chat, body)
        except ValueError as err:  # the serving code refusing the request (a 400)
            out[name] = {"refused": str(err), "reference": want}
            continue
        out[name] = {"served": text, "reference": want}
        if not VENDORED:  # token for token too: the ids are what the model reads
            tokens = chat.tokenizer_manager.tokenizer.encode(want, add_special_tokens=False)
            out[name]["same_ids"] = ids == tokens
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1])
