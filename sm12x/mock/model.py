"""The scripted "model": raw DeepSeek-V4 output text for a chat request.

It writes what the real model writes before sglang's parsers see it: the
reasoning (the prompt has already opened `<think>` when thinking is on, so the
text starts inside it and closes it with `</think>`), then either plain
content or a sentence and DSML tool-call markup, laid out as sglang's
DeepSeek-V4 encoder lays out an assistant turn. The server (app.py) tokenizes
it with DeepSeek-V4's tokenizer and serves it through sglang's real chat
serving code.

How it decides, deterministically:
- the last message is a `tool` result: an answer that quotes the results;
- tools offered and tool_choice is not "none": a named tool_choice calls that
  tool; otherwise every tool whose name the last user message mentions is
  called, once per JSON object written after its name (the arguments), or
  once with arguments made from its schema; "required" with no tool
  mentioned calls the first tool;
- otherwise a canned answer chosen by keywords (code, table, list, short).

Faults that change the text (depth-5-style corruption, a leaked `</think>`,
malformed tool JSON) are applied here; faults of the serving layer live in
app.py.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, field

from sm12x.mock import tasks, vision

THINK_END = "</think>"
DSML = "｜DSML｜"
BOT = f"<{DSML}tool_calls>"
EOT = f"</{DSML}tool_calls>"
# How each line's encoder spells its tool-call markup (deepseek-recipe 0.2.0's
# DeepseekV4Encoding / DeepseekV41Encoding): the block's name and what separates
# the DSML token from a tag name. V4: <｜DSML｜tool_calls>, <｜DSML｜invoke ...>;
# V4.1: <｜DSML｜ calls>, <｜DSML｜ invoke ...>.
MARKUP = {"v4-flash-0731": ("tool_calls", ""), "v4.1-flash": ("calls", " ")}

CODE = '''Here is a small, tested implementation:

```python
def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    if n <= 0:
        return []
    if n == 1:
        return [0]
    sequence = [0, 1]
    while len(sequence) < n:
        sequence.append(sequence[-1] + sequence[-2])
    return sequence


def test_fibonacci():
    assert fibonacci(0) == []
    assert fibonacci(1) == [0]
    assert fibonacci(2) == [0, 1]
    assert fibonacci(7) == [0, 1, 1, 2, 3, 5, 8]
```

The loop appends the sum of the last two numbers until the list is long enough.
'''

TABLE = """| GPU | Architecture | Memory | Compute capability |
| --- | --- | --- | --- |
| RTX PRO 6000 | Blackwell | 96 GB | sm_120 |
| RTX 5090 | Blackwell | 32 GB | sm_120 |
| DGX Spark | Blackwell (GB10) | 128 GB unified | sm_121 |
| H200 | Hopper | 141 GB | sm_90 |

All three Blackwell parts share the sm_12x family; the H200 is listed for comparison.
"""

LIST = """Steps to deploy:

1. Pull the image for your architecture.
2. Download the model weights to a local disk.
3. Start the server with the recipe for your rig.
4. Wait for the health endpoint to answer.
5. Run the verify gate and read its report.
6. Keep the JSON report with the deployment notes.
"""

PROSE = (
    "Speculative decoding lets a small draft propose several tokens that the large "
    "model then checks in one forward pass. When most proposals are accepted, each "
    "step yields more than one token, so throughput rises without changing the "
    "output distribution. The gain depends on how often the draft agrees with the "
    "target model, which is why the acceptance length is worth watching after a deploy."
)

REASONING = (
    "The user wants a direct answer. I should check what is being asked, recall the "
    "relevant facts, and keep the reply short and accurate. Nothing here needs a tool."
)
REASONING_TOOL = (
    "The user asks for live data that I cannot know. The tool offered can fetch it, "
    "so I will call it with the arguments taken from the request."
)

LOOP_UNITS = [
    "the answer is the answer and ",
    "Wait, let me reconsider the problem. ",
    "of the model of the ",
]
# Babble from a handful of frequent tokens, weighted the way a draft that is
# never corrected falls back on them ("the the of , and the of").
SALAD_WORDS = [
    "the",
    "the",
    "the",
    "of",
    "of",
    "and",
    ",",
    ",",
    ".",
    "to",
    "draft",
    "token",
    "accept",
    "the of",
    "and the",
]


@dataclass
class Call:
    name: str
    arguments: dict
    json_body: bool = False  # DSML "Format 2": a JSON body instead of parameter tags


@dataclass
class Generation:
    reasoning: str | None
    content: str
    calls: list[Call] = field(default_factory=list)
    corrupted: str | None = None  # which channel a fault corrupted

    def raw(self, *, broken_json: bool = False, line: str = "v4-flash-0731") -> str:
        text = ""
        if self.reasoning is not None:
            text += self.reasoning + THINK_END
        text += self.content
        if self.calls:
            if self.content:
                text += "\n\n"
            text += render_dsml(self.calls, broken_json=broken_json, line=line)
        return text


def render_dsml(
    calls: list[Call], *, broken_json: bool = False, line: str = "v4-flash-0731"
) -> str:
    block, sep = MARKUP[line]
    tag = f"{DSML}{sep}"
    out = [f"<{tag}{block}>"]
    # V4.1's encoder writes only the parameter form (objects and arrays as
    # string="false" JSON values); its parser reads no JSON body.
    v41 = line != "v4-flash-0731"
    for call in calls:
        out.append(f'\n<{tag}invoke name="{call.name}">')
        if v41 and broken_json:
            for key, value in call.arguments.items():  # every value's JSON cut short
                out.append(
                    f'\n<{tag}parameter name="{key}" string="false">'
                    f"{json.dumps(value, ensure_ascii=False)[:-1]}</{tag}parameter>"
                )
        elif (call.json_body and not v41) or broken_json:
            body = json.dumps(call.arguments, ensure_ascii=False)
            if broken_json:
                body = body[:-1] + ","  # the closing brace lost: not JSON
            out.append("\n" + body)
        else:
            for key, value in call.arguments.items():
                if isinstance(value, str):
                    out.append(
                        f'\n<{tag}parameter name="{key}" string="true">{value}</{tag}parameter>'
                    )
                else:
                    out.append(
                        f'\n<{tag}parameter name="{key}" string="false">'
                        f"{json.dumps(value, ensure_ascii=False)}</{tag}parameter>"
                    )
        out.append(f"\n</{tag}invoke>")
    out.append(f"\n</{tag}{block}>")
    return "".join(out)


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        text = part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
        if text:
            parts.append(text)
    return " ".join(parts)


def message_text(message: dict) -> str:
    text = _text(message.get("content"))
    for call in message.get("tool_calls") or []:
        text += json.dumps(call, default=str)
    return text


def _json_objects(text: str) -> list[tuple[int, dict]]:
    decoder = json.JSONDecoder()
    found = []
    i = 0
    while (i := text.find("{", i)) != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i += 1
            continue
        if isinstance(value, dict):
            found.append((i, value))
        i = end
    return found


def example_from_schema(schema: dict, name: str = "value"):
    """An instance of a JSON Schema, enough for the schemas verify offers."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = kind[0]
    if kind == "object":
        props = schema.get("properties", {})
        required = schema.get("required", list(props))
        return {k: example_from_schema(props[k], k) for k in required if k in props}
    if kind == "array":
        return [example_from_schema(schema.get("items", {"type": "string"}), name)]
    if kind == "integer":
        return max(1, int(schema.get("minimum", 1)))
    if kind == "number":
        return float(schema.get("minimum", 1.5))
    if kind == "boolean":
        return True
    return {"city": "Paris", "path": "notes.txt"}.get(name, f"example {name}")


def _tool_calls(messages, tools, tool_choice) -> list[Call]:
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    user = next(
        (_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), ""
    )
    if isinstance(tool_choice, dict):
        names = [tool_choice["function"]["name"]]
    else:
        names = [n for n in by_name if re.search(rf"\b{re.escape(n)}\b", user)]
        if not names and tool_choice == "required":
            names = [next(iter(by_name))]
    if not names:
        return []
    # Arguments: the JSON objects written after a tool's name, up to the next name.
    mentions = sorted(
        (m.start(), n) for n in names for m in re.finditer(rf"\b{re.escape(n)}\b", user)
    )
    calls: list[Call] = []
    for position, obj in _json_objects(user):
        owner = [n for start, n in mentions if start < position]
        if owner and owner[-1] in names:
            calls.append(Call(owner[-1], obj))
    for name in names:
        if not any(c.name == name for c in calls):
            calls.append(Call(name, example_from_schema(by_name[name].get("parameters") or {})))
    for call in calls:
        params = by_name[call.name].get("parameters") or {}
        # Nested objects travel as a JSON body, like DeepSeek-V4 writes them.
        call.json_body = any(
            p.get("type") == "object" for p in params.get("properties", {}).values()
        )
    return calls


def _answer(user: str) -> str:
    exact = tasks.answer(user)
    if exact is not None:
        return exact
    low = user.lower()
    if "one word" in low or "just the number" in low or "only the number" in low:
        numbers = re.findall(r"\d+", user)
        if "+" in user and len(numbers) >= 2:
            return str(sum(int(n) for n in numbers[:2]))
        return "Paris." if "capital" in low else "Yes."
    if "code" in low or "python" in low or "function" in low:
        return CODE
    if "table" in low:
        return TABLE
    if "list" in low or "steps" in low:
        return LIST
    return PROSE


def generate(request: dict, *, thinking: bool, image_blind: bool = False) -> Generation:
    messages = request.get("messages") or []
    tools = request.get("tools") or []
    tool_choice = request.get("tool_choice") or ("auto" if tools else "none")
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        results = [_text(m.get("content")) for m in messages if m.get("role") == "tool"]
        content = "According to the tool results: " + "; ".join(results) + "."
        return Generation(REASONING if thinking else None, content)
    calls = _tool_calls(messages, tools, tool_choice) if tools and tool_choice != "none" else []
    if calls:
        # A sentence before the calls, as DeepSeek-V4 often writes: the text a
        # streaming parser loses when it arrives with the opener's first tokens.
        names = " and ".join(dict.fromkeys(c.name for c in calls))
        return Generation(
            REASONING_TOOL if thinking else None, f"Let me call {names} for that.", calls
        )
    last_user: dict = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    user = _text(last_user.get("content"))
    pictures = vision.images_of(last_user.get("content"))
    if pictures:
        return Generation(
            REASONING if thinking else None, vision.answer(user, pictures, blind=image_blind)
        )
    return Generation(REASONING if thinking else None, _answer(user))


def corrupt(gen: Generation, kind: str, seed: int) -> Generation:
    """Depth-5-style corruption: a repetition loop or word salad in one channel.

    The channel rotates with the seed: content, reasoning, tool arguments.
    """
    rng = random.Random(seed)
    channels = ["content"]
    if gen.reasoning is not None:
        channels.append("reasoning")
    if gen.calls:
        channels = ["arguments"] + (["reasoning"] if gen.reasoning is not None else [])
    channel = channels[seed % len(channels)]
    if kind == "loop":
        junk = LOOP_UNITS[seed % len(LOOP_UNITS)] * 40
    else:
        junk = " ".join(rng.choice(SALAD_WORDS) for _ in range(180))
    if channel == "content":
        gen.content = gen.content[: len(gen.content) // 3] + junk
    elif channel == "reasoning":
        gen.reasoning = (gen.reasoning or "") + " " + junk
    else:
        call = gen.calls[0]
        key = next((k for k, v in call.arguments.items() if isinstance(v, str)), None)
        if key is None:
            key = "note"
        call.arguments[key] = str(call.arguments.get(key, "")) + " " + junk
    gen.corrupted = channel
    return gen


def leak_think(gen: Generation) -> Generation:
    """A second `</think>` mid-reasoning: the rest of the reasoning and the
    tag itself land in content (the depth-5 `</think>` leak)."""
    if gen.reasoning is None:
        return gen
    half = len(gen.reasoning) // 2
    gen.content = gen.reasoning[half:] + THINK_END + gen.content
    gen.reasoning = gen.reasoning[:half]
    return gen


def seed_of(request: dict) -> int:
    blob = json.dumps(request.get("messages"), sort_keys=True, default=str)
    return int(hashlib.sha256(blob.encode()).hexdigest()[:8], 16)
