"""Patch 0010: the prompt sglang builds for a chat request with tools equals, byte for
byte, DeepSeek's reference encoding of the same tools given as plain dicts.

The reference: DeepSeek-V4 ships its chat encoder as a Python script with the
checkpoint (there is no Jinja template); it is the format the model was trained
on. sglang vendors that script as `sglang/srt/entrypoints/openai/encoding_dsv4.py`
("Adapted from the DeepSeek-V4 release reference implementation") and its
serving path calls it; what differs is only what it is fed. Called with the
client's plain dicts, that script writes each tool's `function` object as
`json.dumps` of exactly what was sent; that rendering is the oracle. The
served prompt comes from sglang's real request-to-prompt code
(tests/patch/prompt_probe.py); upstream #33568 is the bug (tools rendered from
their pydantic dumps: `"strict": false`, `"description": null`, keys reordered).
"""

from __future__ import annotations

import difflib
import json

import pytest

from sm12x.versions import load_versions
from tests.support import trees

PROBE = str(trees.REPO / "tests" / "patch" / "prompt_probe.py")

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
}
SEARCH = {  # nested schema: arrays of objects, anyOf, $defs, defaults, unicode
    "name": "search_flights",
    "description": 'Suche Flüge – returns offers sorted by price ("cheapest" first).',
    "parameters": {
        "type": "object",
        "$defs": {"airport": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "properties": {
            "legs": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "from": {"$ref": "#/$defs/airport"},
                        "to": {"$ref": "#/$defs/airport"},
                        "date": {"type": "string", "format": "date"},
                    },
                    "required": ["from", "to", "date"],
                    "additionalProperties": False,
                },
            },
            "passengers": {"type": "integer", "minimum": 1, "default": 1},
            "cabin": {
                "anyOf": [{"type": "string", "enum": ["economy", "business"]}, {"type": "null"}]
            },
            "filters": {
                "type": "object",
                "properties": {
                    "max_stops": {"type": "integer"},
                    "airlines": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "required": ["legs"],
    },
}


def tool(function: dict) -> dict:
    return {"type": "function", "function": function}


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def body(messages: list[dict], tools: list[dict] | None, thinking: bool, **extra) -> dict:
    out = {
        "model": "deepseek-ai/DeepSeek-V4-Flash-0731",
        "messages": messages,
        "chat_template_kwargs": {"thinking": thinking},
        **extra,
    }
    if tools is not None:
        out["tools"] = tools
    return out


# A conversation with two parallel calls, their results sent out of call order,
# an answer, and a follow-up question: the encoder merges tool results into the
# user turn and sorts them by call order.
HISTORY = [
    {"role": "system", "content": "You are a travel assistant."},
    {"role": "user", "content": "Weather in Paris and in Tōkyō?"},
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Two cities: two calls.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "arguments": '{"city": "Tōkyō", "unit": "celsius"}',
                },
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_2", "content": '{"temp": 21.5, "sky": "clear"}'},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 14.0, "sky": "rain"}'},
    {
        "role": "assistant",
        "content": "Paris: 14 °C and rain. Tōkyō: 21.5 °C, clear.",
        "reasoning_content": "Both results are in.",
    },
    {"role": "user", "content": "Then find me a flight CDG -> HND on 2026-09-01."},
]

CASES = {
    "one tool, name/description/parameters": body(user("Weather in Paris?"), [tool(WEATHER)], True),
    "no description": body(
        user("Weather?"), [tool({k: v for k, v in WEATHER.items() if k != "description"})], False
    ),
    "name only": body(user("Ping."), [tool({"name": "ping"})], True),
    "no parameters": body(user("Time?"), [tool({"name": "now", "description": "UTC time."})], True),
    "strict true": body(user("Weather?"), [tool({**WEATHER, "strict": True})], True),
    "strict false, sent explicitly": body(
        user("Weather?"), [tool({**WEATHER, "strict": False})], False
    ),
    "keys in another order": body(
        user("Weather?"),
        [
            tool(
                {
                    "parameters": WEATHER["parameters"],
                    "name": "get_weather",
                    "description": "Weather.",
                }
            )
        ],
        True,
    ),
    "a key the OpenAI schema lacks": body(
        user("Weather?"), [tool({**WEATHER, "x-cost": "low"})], True
    ),
    "nested schema": body(user("Flights CDG-HND?"), [tool(SEARCH)], True),
    "several tools": body(
        user("Plan a trip."),
        [
            tool(WEATHER),
            tool(SEARCH),
            tool({"name": "ping"}),
            tool({**WEATHER, "name": "forecast", "strict": True}),
        ],
        True,
    ),
    "tool_choice required": body(
        user("Weather in Oslo?"), [tool(WEATHER), tool(SEARCH)], True, tool_choice="required"
    ),
    "multi-turn with tool results, thinking": body(HISTORY, [tool(WEATHER), tool(SEARCH)], True),
    "multi-turn with tool results, no thinking": body(
        HISTORY, [tool(WEATHER), tool(SEARCH)], False
    ),
    "tools on the system message": body(
        [
            {"role": "system", "content": "Be brief.", "tools": [tool(WEATHER), tool(SEARCH)]},
            *user("Weather in Rome?"),
        ],
        None,
        True,
    ),
    # No tools: the harness and the reference must agree on the rest of the
    # prompt, patched or not, or a difference above would prove nothing.
    "control: no tools": body(HISTORY[:2], None, True),
}

# Where the unpatched code writes what the client did not: every case whose
# function objects are not already in pydantic's field order with every
# default spelled out.
PRISTINE_DIFFERS = set(CASES) - {"control: no tools"}


@pytest.fixture(scope="module")
def rendered(sglang_tree, tmp_path_factory):
    """rendered(version, patched) -> {case: {"served", "reference"}}."""
    cases = tmp_path_factory.mktemp("prompt") / "cases.json"
    cases.write_text(json.dumps(CASES, ensure_ascii=False), encoding="utf-8")
    done: dict = {}

    def run(version: str, patched: bool) -> dict:
        if (version, patched) not in done:
            proc = trees.run_python(
                [sglang_tree(version, patched=patched)], [PROBE, str(cases)], timeout=600
            )
            assert proc.returncode == 0, proc.stderr[-4000:]
            done[version, patched] = json.loads(proc.stdout)
        return done[version, patched]

    return run


def _diff(case: dict) -> str:
    return "\n".join(
        difflib.unified_diff(
            case["reference"].splitlines(),
            case["served"].splitlines(),
            "reference",
            "served",
            lineterm="",
            n=1,
        )
    )


def _schema_lines(body_: dict) -> list[str]:
    tools = body_.get("tools") or body_["messages"][0].get("tools") or []
    return [json.dumps(t["function"], ensure_ascii=False) for t in tools]


@pytest.mark.parametrize("version", ["0.5.17", "0.5.18"])
def test_patched_prompt_equals_the_reference_encoding_byte_for_byte(rendered, version):
    out = rendered(version, True)
    bad = {name: _diff(case) for name, case in out.items() if case["served"] != case["reference"]}
    assert not bad, "\n\n".join(f"{name}:\n{diff}" for name, diff in bad.items())
    # The oracle itself: each tool is written exactly as the client sent it.
    for name, body_ in CASES.items():
        for line in _schema_lines(body_):
            assert f"\n{line}\n" in out[name]["served"], (name, line)


@pytest.mark.parametrize("version", ["0.5.17", "0.5.18"])
def test_unpatched_prompt_writes_defaults_the_client_never_sent(rendered, version):
    out = rendered(version, False)
    differs = {name for name, case in out.items() if case["served"] != case["reference"]}
    assert differs == PRISTINE_DIFFERS
    assert out["control: no tools"]["served"] == out["control: no tools"]["reference"]
    # The symptom upstream #33568 names: a default written into the schema.
    served = out["one tool, name/description/parameters"]["served"]
    assert '"strict": false' in served
    assert '"strict"' not in out["one tool, name/description/parameters"]["reference"]
    assert '"description": null' in out["name only"]["served"]


# --- The current track: sglang 0.5.23, unpatched --------------------------------------
# 0.5.23 renders DeepSeek-V4 prompts with deepseek-recipe (DeepSeek's own renderer,
# token ids) and vendors no encoder; the probe decodes the served ids with V4's
# tokenizer and also checks them token for token. What it does, case by case:
CURRENT = load_versions("current")["SGLANG_VERSION"]
# Refused with a 400: OpenAI's strict mode needs every property in `required`, and
# WEATHER names `city` only.
CURRENT_REFUSES = {"strict true", "several tools"}
# Tools riding on the system message (the reference encoder's own convention, which
# 0.5.17 honoured) do not reach the prompt: only the request's `tools` do.
CURRENT_DROPS = {"tools on the system message"}
# Every other tool line is deepseek-recipe's form of the function: name, description
# ("" when absent), parameters ({} when absent), in that order, nothing else.
CURRENT_EXACT = {
    "control: no tools",
    "one tool, name/description/parameters",
    "nested schema",
    "tool_choice required",
    "multi-turn with tool results, thinking",
    "multi-turn with tool results, no thinking",
}


def recipe_form(function: dict) -> str:
    return json.dumps(
        {
            "name": function["name"],
            "description": function.get("description", ""),
            "parameters": function.get("parameters", {}),
        },
        ensure_ascii=False,
    )


def test_current_track_writes_no_pydantic_default_into_the_prompt(rendered):
    """Upstream #33568 is gone on 0.5.23 unpatched: no default the client never sent
    (`"strict": false`, `"description": null`) and no pydantic reordering; tools reach
    the prompt in deepseek-recipe's normalised form instead of byte for byte as sent
    (docs/tracks.md), which this test pins down exactly."""
    out = rendered(CURRENT, False)
    assert set(out) == set(CASES)
    for name in CURRENT_REFUSES:
        assert "Required properties must match all properties" in out[name]["refused"], name
    for name in CURRENT_DROPS:
        assert "## Tools" in out[name]["reference"] and "## Tools" not in out[name]["served"]
    for name in CURRENT_EXACT:
        assert out[name]["served"] == out[name]["reference"], (name, _diff(out[name]))
        assert out[name]["same_ids"], name
    for name in set(CASES) - CURRENT_REFUSES - CURRENT_DROPS - CURRENT_EXACT:
        body_, case = CASES[name], out[name]
        expected = case["reference"]
        for tool_ in body_["tools"]:
            expected = expected.replace(
                json.dumps(tool_["function"], ensure_ascii=False), recipe_form(tool_["function"])
            )
        assert case["served"] == expected != case["reference"], (name, _diff(case))
        assert case["same_ids"] is False  # the normalised line is other tokens
    for name, case in out.items():
        served = case.get("served", "")
        assert '"strict"' not in served and '"description": null' not in served, name
    # Thinking requests open with deepseek-recipe's default effort (max) on 0.5.23.
    assert out["control: no tools"]["served"].startswith(
        "<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum"
    )
