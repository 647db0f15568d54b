"""The DSPARK streaming census: sglang's real chat streaming path, chunked as DSPARK chunks.

For every assistant output of the corpus (`cases()`): render it with sglang's
own DeepSeek-V4 encoder (the completion the model writes after the prompt),
tokenize it with DeepSeek-V4's tokenizer, and stream it through
`OpenAIServingChat.handle_request` (real reasoning parser `deepseek-v4`, real
tool-call detector `deepseekv4`, real SSE serialisation) over the stand-in
engine of sm12x/mock/engine.py, in every chunking mode DSPARK produces
(`MODES`). Each stream is merged back as a client merges it and compared with
two oracles: the intended output, and the non-streamed response to the same
text. What differs is named (`FAILURES`).

Run one sglang tree per process (`python -m tests.support.stream_census
--site DIR --json OUT`); scripts/stream-census runs the versions and prints
the table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sm12x.mock import engine as dspark_engine  # noqa: E402
from sm12x.mock import serving as sglang_serving  # noqa: E402
from sm12x.mock import tokenizer_v4, tokenizer_v41  # noqa: E402
from verify.stream import merge  # noqa: E402

DSML = "｜DSML｜"

# What can go wrong in a stream, in the order the table shows them.
FAILURES = {
    "prose-cut": 'content cut short: its end lost (before a call, or a reply ending in "<")',
    "prose-lost": "content lost entirely",
    "separator-in-content": "the blank line before the tool-call block streamed as content",
    "markup-in-content": "DSML or think markup in content",
    "content-differs": "content otherwise different",
    "reasoning-in-content": "reasoning streamed as content",
    "content-in-reasoning": "content streamed as reasoning",
    "reasoning-differs": "reasoning otherwise different",
    "call-missing": "fewer tool calls than written",
    "extra-call": "more tool calls than written",
    "name-or-id-missing": "a call without its name or id",
    "arguments-differ": "arguments differ (or are not JSON)",
    "finish-reason": "finish_reason not tool_calls/stop as expected",
    "exception": "the handler raised or streamed an error",
}

# ---------------------------------------------------------------------------
# The corpus: tools and assistant outputs.

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search documents.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": "integer"},
                    "exact": {"type": "boolean"},
                    "score": {"type": "number"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "filters": {"type": "object"},
                    "cursor": {"type": ["string", "null"]},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The current time (no arguments).",
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "configure",
            "description": "Set nested configuration.",
            "parameters": {
                "type": "object",
                "properties": {
                    "settings": {"type": "object"},
                    "matrix": {"type": "array"},
                    "ratio": {"type": "number"},
                    "enabled": {"type": "boolean"},
                },
            },
        },
    },
]

CODE = (
    'def f(a, b):\n    """Say "hi" & <b>bold</b>."""\n    if a < b and b > 0:\n'
    '        return {"path": "C:\\\\tmp\\\\x", "tab": "\\t"}\n    return None\n'
)

CALLS = {
    "weather": ("get_weather", {"city": "Paris", "unit": "celsius"}),
    "weather-tokyo": ("get_weather", {"city": "東京", "unit": "celsius"}),
    "search-types": (
        "search",
        {
            "query": 'sm_120 <sparse> "MLA"',
            "limit": 5,
            "exact": False,
            "score": -0.25,
            "tags": ["gpu", "näive", "😀"],
            "filters": {"year": 2026, "lang": ["en", "zh"], "deep": {"a": None}},
            "cursor": None,
        },
    ),
    "search-edge": (
        "search",
        {
            "query": "a < b > c </x> 'q' \\ back\\slash\ttab",
            "limit": 0,
            "exact": True,
            "score": 1e-05,
            "tags": [],
            "filters": {},
        },
    ),
    "write-code": ("write_file", {"path": "src/ü.py", "content": CODE}),
    "write-markup": (
        "write_file",
        {"path": "index.html", "content": '<html>\n<body class="x">a &lt; b</body>\n</html>'},
    ),
    "time": ("get_time", {}),
    "configure": (
        "configure",
        {
            "settings": {
                "retries": 3,
                "backoff": [0.5, 1, 2.5],
                "names": {"en": "x", "zh": "中文"},
                "ok": True,
            },
            "matrix": [[1, 2], [3, [4, {"k": "v"}]], []],
            "ratio": 3.14159,
            "enabled": False,
        },
    ),
    "search-numbers": (
        "search",
        {"query": "42", "limit": -7, "score": 12345678901234567890, "tags": ["1", "2"]},
    ),
}

PROSE = {
    "plain": "Let me check that for you.",
    "angles": "Comparing: if x < 3 and y > 2 then <b>bold</b>; a <- b; 1<2.",
    "unicode": "Überprüfe das Wetter 🌦️ für 東京 — „gleich“.",
    "multiline": "Two steps:\n\n1. look it up\n2. answer `<ok>`",
    "ends-angle": "Vectors are written <v",
    "quotes": "She said \"hi\" and 'bye' \\ then left.",
    "trailing-angle": "Remember: 1 <",
}

REASONING = {
    "short": "The user wants the weather; I will call the tool.",
    "tricky": "Check a < b, then <tag> is not a tool here? Use 東京 😀.\nSecond line.",
}


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict
    form: str = "params"  # params | json (a JSON body) | self-closing (zero arguments)


@dataclass(frozen=True)
class Case:
    name: str
    thinking: bool
    reasoning: str | None
    before: str  # content before the calls (all of it when there are none)
    calls: tuple[Call, ...] = ()
    after: str = ""  # text after the tool-call block (the model went on writing)

    @property
    def content(self) -> str:
        """The intended content: everything outside the tool-call block, less the
        blank line the encoder writes between the prose and the block."""
        return self.before + self.after

    @property
    def in_format(self) -> bool:
        """Whether this output is one DeepSeek-V4's own format allows: its encoder's
        parameter form, and nothing after the tool-call block (the turn ends there).
        The JSON-body and self-closing invokes are shapes sglang's DSML detector
        (the DeepSeek-V3.2 one, up to 0.5.18) also accepts; 0.5.23 parses V4's
        output with DeepSeek's own parser (deepseek-recipe) instead."""
        return not self.after and all(c.form == "params" for c in self.calls)


def cases() -> list[Case]:
    out: list[Case] = []

    def add(name, *, thinking, reasoning=None, before="", calls=(), after=""):
        out.append(
            Case(name, thinking, reasoning if thinking else None, before, tuple(calls), after)
        )

    for thinking in (False, True):
        tag = "think" if thinking else "chat"
        reasoning = REASONING["short"]
        # prose only (tools offered, none called)
        for key, prose in PROSE.items():
            add(f"{tag}/prose:{key}", thinking=thinking, reasoning=reasoning, before=prose)
        # one call, every prose before it, and none
        for key, prose in [("none", ""), *PROSE.items()]:
            add(
                f"{tag}/{key}+weather",
                thinking=thinking,
                reasoning=reasoning,
                before=prose,
                calls=[Call(*CALLS["weather"])],
            )
        # every argument set, in both parameter forms
        for key, (name, args) in CALLS.items():
            if not args:
                continue
            for form in ("params", "json"):
                add(
                    f"{tag}/plain+{key}[{form}]",
                    thinking=thinking,
                    reasoning=reasoning,
                    before=PROSE["plain"],
                    calls=[Call(name, args, form)],
                )
        # zero-argument calls, all three shapes
        for form in ("params", "json", "self-closing"):
            add(
                f"{tag}/time[{form}]",
                thinking=thinking,
                reasoning=reasoning,
                before=PROSE["angles"],
                calls=[Call("get_time", {}, form)],
            )
        # two and three calls, mixed forms
        add(
            f"{tag}/unicode+2calls",
            thinking=thinking,
            reasoning=REASONING["tricky"],
            before=PROSE["unicode"],
            calls=[Call(*CALLS["weather"]), Call(*CALLS["weather-tokyo"], "json")],
        )
        add(
            f"{tag}/none+3calls",
            thinking=thinking,
            reasoning=reasoning,
            calls=[
                Call(*CALLS["search-types"]),
                Call("get_time", {}, "self-closing"),
                Call(*CALLS["write-code"]),
            ],
        )
        add(
            f"{tag}/multiline+3calls",
            thinking=thinking,
            reasoning=reasoning,
            before=PROSE["multiline"],
            calls=[
                Call(*CALLS["configure"], "json"),
                Call(*CALLS["write-markup"]),
                Call(*CALLS["search-edge"], "json"),
            ],
        )
        # prose after the calls
        add(
            f"{tag}/plain+weather+after",
            thinking=thinking,
            reasoning=reasoning,
            before=PROSE["plain"],
            calls=[Call(*CALLS["weather"])],
            after="\n\nI asked for the weather in Paris.",
        )
        add(
            f"{tag}/none+2calls+after",
            thinking=thinking,
            reasoning=reasoning,
            calls=[Call(*CALLS["time"]), Call(*CALLS["weather"])],
            after="\n\nDone <ok>.",
        )
    return out


# ---------------------------------------------------------------------------
# Rendering the completion text with sglang's encoder.


def render(enc, case: Case) -> str:
    """The text the model writes for `case`: the encoder's rendering of the
    assistant turn after the prompt it renders for the turns before."""
    mode = "thinking" if case.thinking else "chat"
    system = {"role": "system", "content": "", "tools": TOOLS}
    user = {"role": "user", "content": "Help me."}
    assistant = {
        "role": "assistant",
        "content": case.before,
        "reasoning_content": case.reasoning or "",
        "tool_calls": [
            {
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": json.dumps(c.arguments, ensure_ascii=False),
                },
            }
            for c in case.calls
        ]
        or None,
    }
    prompt = enc.encode_messages([system, user], thinking_mode=mode)
    full = enc.encode_messages([system, user, assistant], thinking_mode=mode)
    if not full.startswith(prompt):
        raise AssertionError(f"{case.name}: the encoder's turn does not extend its prompt")
    text = full[len(prompt) :]
    eos = enc.eos_token
    if not text.endswith(eos):
        raise AssertionError(f"{case.name}: the encoder's turn does not end with EOS")
    text = text[: -len(eos)]
    for call in case.calls:
        text = _reform(enc, text, call)
    return text + case.after + eos


def _reform(enc, text: str, call: Call) -> str:
    """The JSON-body and self-closing invoke shapes sglang's detector accepts
    (its docstring's "Format 2", and the zero-argument shape), made from the
    encoder's parameter form of the same call."""
    if call.form == "params":
        return text
    dsml = enc.dsml_token
    opener = f'<{dsml}invoke name="{call.name}">\n'
    closer = f"\n</{dsml}invoke>"
    body = enc.encode_arguments_to_dsml({"name": call.name, "arguments": call.arguments})
    block = opener + body + closer
    start = text.find(block)
    if start < 0:
        raise AssertionError(f"cannot find the encoder's invoke of {call.name}")
    if call.form == "json":
        new = opener + json.dumps(call.arguments, ensure_ascii=False) + closer
    elif call.form == "self-closing":
        if call.arguments:
            raise AssertionError("self-closing invokes have no arguments")
        new = f'<{dsml}invoke name="{call.name}"/>'
    else:
        raise AssertionError(f"unknown form {call.form}")
    return text[:start] + new + text[start + len(block) :]


class RecipeText:
    """deepseek-recipe's rendering of a line's turns (DeepSeek's own encoder, the one
    sglang 0.5.23 serves V4.1 with: parser/deepseek_recipe_renderer.py), behind the
    part of the reference encoder's interface `render` uses. The assistant turn is
    the text between the prompt and its EOS: a turn with calls is rendered with its
    tool results after it (recipe requires them) and cut at its EOS; one without is
    rendered as the prompt's continuation (`prefix`, sglang's continue_final_message),
    which keeps its reasoning, and closed with EOS as the model closes it."""

    eos_token = "<｜end▁of▁sentence｜>"
    dsml_token = DSML

    def __init__(self, model_name: str = "DeepSeek-V4.1-Flash"):
        import deepseek_recipe

        self._recipe = deepseek_recipe
        # sglang's spelling of the image token (deepseek_recipe_renderer.IMAGE_TOKEN)
        tokens = deepseek_recipe.SpecialTokens(image="<｜deepseek_image｜>")
        self._options = deepseek_recipe.ConversionOptions().with_special_tokens(tokens)
        self._encoding = deepseek_recipe.DeepseekV41Encoding().with_special_tokens(tokens)
        self._model = model_name

    def _render(self, messages: list[dict], thinking: bool, tools) -> str:
        body = {
            "model": self._model,
            "messages": messages,
            "thinking": {"type": "enabled" if thinking else "disabled"},
        }
        if tools:
            body["tools"] = tools
        converted = self._recipe.ChatCompletionRequest(body).convert(self._options)
        return self._encoding.render_conversation(converted.conversation).prompt

    def encode_messages(self, messages: list[dict], thinking_mode: str) -> str:
        thinking = thinking_mode == "thinking"
        tools = next((m.get("tools") for m in messages if m["role"] == "system"), None)
        turns = [
            {k: v for k, v in m.items() if k != "tools"}
            for m in messages
            if m["role"] != "system" or m.get("content")
        ]
        if turns[-1]["role"] != "assistant":
            return self._render(turns, thinking, tools)
        last = {k: v for k, v in turns[-1].items() if v is not None}
        if not thinking:
            last.pop("reasoning_content", None)
        calls = last.get("tool_calls") or []
        # recipe refuses tools with a prefix turn; they only change the system
        # prompt, not the text of a turn without calls
        asked = self._render(turns[:-1], thinking, tools)
        tools = tools if calls else None
        prompt = self._render(turns[:-1], thinking, tools)
        if calls:
            for number, call in enumerate(calls):
                call.setdefault("id", f"call_{number}")
            results = [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
            full = self._render(turns[:-1] + [last] + results, thinking, tools)
            end = full.find(self.eos_token, len(prompt))
            if end < 0:
                raise AssertionError("recipe's assistant turn has no EOS")
            full = full[: end + len(self.eos_token)]
        else:
            full = (
                self._render(turns[:-1] + [{**last, "prefix": True}], thinking, tools)
                + self.eos_token
            )
        if not full.startswith(prompt):
            raise AssertionError("recipe's assistant turn does not extend its prompt")
        return asked + full[len(prompt) :]


# ---------------------------------------------------------------------------
# Chunkings: deliveries of decode steps (see dspark_engine.Plan).

MODES = [
    "one-token",
    "gamma3",
    "gamma4",
    "gamma5",
    "gamma6",
    "gamma7",
    "ragged7",
    "burst16",
    "split",
]
SPLIT_MAX_TOKENS = 120  # "short outputs": every split point of outputs up to this long


def _steps(n: int, rng: random.Random, gamma: int) -> list[int]:
    """DSPARK decode steps: each accepts 1..gamma+1 tokens."""
    out, left = [], n
    while left:
        k = min(left, rng.randint(1, gamma + 1))
        out.append(k)
        left -= k
    return out


def _ragged_plan(n: int, rng: random.Random, gamma: int) -> list[list[int]]:
    """The throughput recipes' DSPARK: depth 7 under compact ragged verify, with DP
    attention at high concurrency. Each step the SPS budget gives the request a verify
    width of 1..gamma+1 rows (dspark_planner: min_verify_len 1), of which 1..width are
    accepted; so runs of 1-token steps (a starved budget) sit beside 8-token ones, and
    the tokenizer manager merges 1..4 steps into one delivery when the batch is large."""
    steps, left = [], n
    while left:
        width = rng.randint(1, gamma + 1)
        k = min(left, rng.randint(1, width))
        steps.append(k)
        left -= k
    plan, i = [], 0
    while i < len(steps):
        merged = rng.randint(1, 4)
        plan.append(steps[i : i + merged])
        i += merged
    return plan


def chunkings(
    mode: str, n: int, samples: int, seed: int, split_stride: int = 1
) -> list[list[list[int]]]:
    """The delivery plans of `mode` for an output of n tokens."""
    if mode == "one-token":
        return [[[1]] * n]
    if mode.startswith("gamma"):
        gamma = int(mode[5:])
        return [
            [[k] for k in _steps(n, random.Random(f"{seed}/{mode}/{s}"), gamma)]
            for s in range(samples)
        ]
    if mode == "ragged7":
        return [
            _ragged_plan(n, random.Random(f"{seed}/{mode}/{s}"), gamma=7) for s in range(samples)
        ]
    if mode == "burst16":
        # Under load the tokenizer manager merges steps: deliveries of up to 16
        # tokens, each made of DSPARK steps (gamma 3..7).
        plans = []
        for s in range(samples):
            rng = random.Random(f"{seed}/{mode}/{s}")
            steps = _steps(n, rng, rng.randint(3, 7))
            plan, current = [], []
            for k in steps:
                if current and sum(current) + k > rng.randint(1, 16):
                    plan.append(current)
                    current = []
                current.append(k)
            plan.append(current)
            plans.append(plan)
        return plans
    if mode == "split":
        if n > SPLIT_MAX_TOKENS:
            return []
        return [[[k], [n - k]] for k in range(1, n, split_stride)]
    raise ValueError(f"unknown chunking mode {mode!r}; known: {', '.join(MODES)}")


# ---------------------------------------------------------------------------
# Comparing a response with the intended output.


@dataclass
class Outcome:
    content: str = ""
    reasoning: str = ""
    calls: list[dict] = field(default_factory=list)  # {name, id, arguments(str)}
    finish_reason: str | None = None
    error: str | None = None


def classify(case: Case, got: Outcome) -> list[str]:
    """The failure types of one response against the intended output."""
    if got.error:
        return ["exception"]
    found: list[str] = []
    want = case.content
    content = got.content
    if content != want:
        markers = (DSML, "</think>", "<think>")
        if any(m in content and m not in want for m in markers):
            found.append("markup-in-content")
        elif case.reasoning and case.reasoning in content:
            found.append("reasoning-in-content")
        else:
            core = content
            if case.calls and not want.endswith("\n") and content.endswith("\n"):
                core = content.rstrip("\n")
                found.append("separator-in-content")
            if core == want:
                pass
            elif want and not core:
                found.append("prose-lost")
            elif want.startswith(core):
                found.append("prose-cut")
            else:
                found.append("content-differs")
    want_r = case.reasoning or ""
    if got.reasoning != want_r:
        if want and want in got.reasoning and want not in want_r:
            found.append("content-in-reasoning")
        else:
            found.append("reasoning-differs")
    if len(got.calls) < len(case.calls):
        found.append("call-missing")
    elif len(got.calls) > len(case.calls):
        found.append("extra-call")
    for call, intended in zip(got.calls, case.calls):
        if not call.get("name") or not call.get("id"):
            found.append("name-or-id-missing")
        try:
            arguments = json.loads(call.get("arguments") or "")
        except json.JSONDecodeError:
            arguments = object()
        if call.get("name") != intended.name or arguments != intended.arguments:
            found.append("arguments-differ")
    expected_finish = "tool_calls" if case.calls else "stop"
    if got.finish_reason != expected_finish:
        found.append("finish-reason")
    return sorted(set(found), key=list(FAILURES).index)


def same_response(a: Outcome, b: Outcome) -> bool:
    """Whether two responses say the same (call ids are random per request)."""

    def calls(o):
        return [(c.get("name"), c.get("arguments")) for c in o.calls]

    return (
        a.error is None
        and b.error is None
        and a.content == b.content
        and a.reasoning == b.reasoning
        and calls(a) == calls(b)
        and a.finish_reason == b.finish_reason
    )


def from_stream(events: list[str]) -> Outcome:
    chunks = []
    for event in events:
        for line in event.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    m = merge(chunks)
    if m.errors:
        return Outcome(error=json.dumps(m.errors[0])[:300])
    calls = [
        {"name": c.name, "id": c.id, "arguments": c.arguments} for _, c in sorted(m.calls.items())
    ]
    return Outcome(m.content, m.reasoning, calls, m.finish_reason)


def from_response(body: dict) -> Outcome:
    if body.get("object") == "error" or "choices" not in body:
        return Outcome(error=json.dumps(body)[:300])
    choice = body["choices"][0]
    message = choice["message"]
    calls = [
        {"name": c["function"]["name"], "id": c.get("id"), "arguments": c["function"]["arguments"]}
        for c in message.get("tool_calls") or []
    ]
    return Outcome(
        message.get("content") or "",
        message.get("reasoning_content") or "",
        calls,
        choice.get("finish_reason"),
    )


# ---------------------------------------------------------------------------
# Running one sglang tree.


class _SchemaChecks:
    """jsonschema's validator class with check_schema memoised per schema: the
    census offers the same tools on every request, and sglang's request
    validation re-checking them was three quarters of its time. The check
    itself is unchanged (a schema that failed once fails again)."""

    def __init__(self, validator):
        self._validator = validator
        self._seen: dict[str, Exception | None] = {}

    def __getattr__(self, name):
        return getattr(self._validator, name)

    def check_schema(self, schema):
        key = json.dumps(schema, sort_keys=True)
        if key not in self._seen:
            try:
                self._validator.check_schema(schema)
                self._seen[key] = None
            except Exception as exc:  # noqa: BLE001 (replayed below)
                self._seen[key] = exc
        if self._seen[key] is not None:
            raise self._seen[key]


LINES = ("v4-flash-0731", "v4.1-flash")


def line_cases(line: str) -> list[Case]:
    """The corpus for a line: all of it for V4-Flash-0731; for V4.1-Flash the outputs
    in its own format (its encoder's parameter form, nothing after the calls), the
    only ones DeepSeek's V4.1 encoder writes: the JSON-body and self-closing shapes
    and text after the block are V4 census probes of sglang's old DSML detector."""
    return [c for c in cases() if line == LINES[0] or c.in_format]


class Runner:
    def __init__(self, site: Path, replace: bool = False, line: str = LINES[0]):
        self.serving = sglang_serving.load(site, replace=replace)
        module = self.serving.serving_chat
        if hasattr(module, "Draft202012Validator"):
            module.Draft202012Validator = _SchemaChecks(module.Draft202012Validator)
        self.line = line
        if line == LINES[0]:
            self.tokenizer = tokenizer_v4.load()
            self.encoder = self.serving.encoding_dsv4 or sglang_serving.reference_encoder()
        else:
            self.tokenizer = tokenizer_v41.load()
            self.encoder = RecipeText()
        self.plan: dspark_engine.Plan | None = None
        self.chat = dspark_engine.serving_chat(
            self.serving, self.tokenizer, lambda request: self.plan, line=line
        )

    def tokens(self, case: Case) -> list[int]:
        text = render(self.encoder, case)
        if self.line != LINES[0] and case.calls and f"<{DSML} calls>" not in text:
            raise AssertionError(f"{case.name}: not V4.1's tool-call block: {text[-200:]!r}")
        return self.tokenizer.encode(text, add_special_tokens=False)

    @property
    def encoding_spec(self) -> str | None:
        """The prompt encoding sglang chose for the served model (0.5.23: dsv4 or dsv41)."""
        return getattr(self.chat, "chat_encoding_spec", None)

    def request(self, case: Case, stream: bool):
        return self.serving.protocol.ChatCompletionRequest(
            model=dspark_engine.model_id(self.line),
            messages=[{"role": "user", "content": "Help me."}],
            tools=TOOLS,
            stream=stream,
            chat_template_kwargs={"thinking": case.thinking},
        )

    async def respond(
        self, case: Case, ids: list[int], deliveries: list[list[int]], stream: bool
    ) -> Outcome:
        self.plan = dspark_engine.Plan(
            ids, deliveries, {"type": "stop", "matched": self.tokenizer.eos_token_id}
        )
        try:
            response = await self.chat.handle_request(self.request(case, stream), None)
            if stream:
                if not hasattr(response, "body_iterator"):
                    return Outcome(error=bytes(response.body).decode()[:300])
                return from_stream(await dspark_engine.collect_stream(response))
            if hasattr(response, "model_dump"):
                return from_response(response.model_dump(mode="json"))
            return from_response(json.loads(bytes(response.body)))
        except Exception:  # noqa: BLE001 (an exception is a finding)
            return Outcome(error=traceback.format_exc(limit=3)[-300:])


def run(
    site: Path,
    modes: list[str],
    samples: int,
    seed: int = 0,
    only: list[str] | None = None,
    split_stride: int = 1,
    line: str = LINES[0],
    replace: bool = False,
) -> dict:
    runner = Runner(site, replace=replace, line=line)
    records, oracle = [], []
    started = time.monotonic()

    async def go():
        for case in line_cases(line):
            if only and not any(o in case.name for o in only):
                continue
            ids = runner.tokens(case)
            plain = await runner.respond(case, ids, [[len(ids)]], stream=False)
            oracle.append(
                {
                    "case": case.name,
                    "failures": classify(case, plain),
                    "tokens": len(ids),
                    "in_format": case.in_format,
                }
            )
            for mode in modes:
                for number, plan in enumerate(
                    chunkings(mode, len(ids), samples, seed, split_stride)
                ):
                    got = await runner.respond(case, ids, plan, stream=True)
                    failures = classify(case, got)
                    # the second oracle: the non-streamed response to the same text
                    if (
                        not failures
                        and plain.error is None
                        and (got.content, got.reasoning) != (plain.content, plain.reasoning)
                    ):
                        failures = ["content-differs"]
                    # DSPARK's chunking at fault: the stream says something the
                    # non-streamed response to the same tokens does not.
                    stream_only = not same_response(got, plain)
                    records.append(
                        {
                            "case": case.name,
                            "mode": mode,
                            "sample": number,
                            "failures": failures,
                            "in_format": case.in_format,
                            "stream_only": stream_only,
                            **({"got": asdict(got)} if failures or stream_only else {}),
                        }
                    )

    asyncio.run(go())
    return {
        "sglang": runner.serving.version,
        "line": line,
        "encoding": runner.encoding_spec,
        "site": str(site),
        "seed": seed,
        "samples": samples,
        "split_stride": split_stride,
        "modes": modes,
        "seconds": round(time.monotonic() - started, 1),
        "oracle": oracle,
        "streams": records,
    }


def table(report: dict) -> dict[str, dict]:
    """Per mode: streams, divergent streams, and streams per failure type."""
    out: dict[str, dict] = {}
    for mode in report["modes"]:
        rows = [r for r in report["streams"] if r["mode"] == mode]
        counts = Counter(f for r in rows for f in r["failures"])
        out[mode] = {
            "streams": len(rows),
            "divergent": sum(1 for r in rows if r["failures"]),
            "in-format": sum(1 for r in rows if r.get("in_format", True)),
            "divergent-in-format": sum(
                1 for r in rows if r["failures"] and r.get("in_format", True)
            ),
            "stream-only": sum(1 for r in rows if r.get("stream_only")),
            **{f: counts.get(f, 0) for f in FAILURES},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the streaming census on sglang trees, one after the other."
    )
    parser.add_argument(
        "--site",
        required=True,
        type=Path,
        action="append",
        help="a folder holding sglang/ (sm12x.mock.serving.tree); again for another tree "
        "(its sglang modules replace the last's: trees of one set of pins)",
    )
    parser.add_argument(
        "--json",
        required=True,
        type=Path,
        action="append",
        help="write the report here (one per --site, in order)",
    )
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument(
        "--samples",
        type=int,
        default=20,
        help="random chunkings per case for the gamma and burst modes",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", action="append", help="cases whose name contains this")
    parser.add_argument(
        "--split-stride",
        type=int,
        default=1,
        help="split mode: every Nth split point only (1: all)",
    )
    parser.add_argument(
        "--line",
        choices=LINES,
        default=LINES[0],
        help="the model line whose output is streamed (sm12x.recipe.lines)",
    )
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown mode(s) {sorted(unknown)}; known: {', '.join(MODES)}")
    if args.samples < 1 or args.split_stride < 1:
        parser.error("--samples and --split-stride must be at least 1")
    if len(args.site) != len(args.json):
        parser.error(f"{len(args.site)} --site but {len(args.json)} --json: give one of each")
    for number, (site, out) in enumerate(zip(args.site, args.json, strict=True)):
        report = run(
            site,
            modes,
            args.samples,
            args.seed,
            args.only,
            args.split_stride,
            args.line,
            replace=number > 0,
        )
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1, ensure_ascii=False))
        tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
