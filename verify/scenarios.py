"""The tools and prompts verify sends. Written for the real model: each prompt
says plainly what it wants, tool prompts name the tool and give its arguments
as JSON, so a healthy DeepSeek-V4 answers them the same way every time."""

from __future__ import annotations

import copy
from typing import Any

GET_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}

SEARCH_FLIGHTS = {
    "type": "function",
    "function": {
        "name": "search_flights",
        "description": "Search flights between two airports.",
        "parameters": {
            "type": "object",
            "properties": {
                "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
                "airlines": {"type": "array", "items": {"type": "string"}},
                "filters": {
                    "type": "object",
                    "properties": {
                        "max_stops": {"type": "integer", "minimum": 0},
                        "cabin": {"type": "string", "enum": ["economy", "business"]},
                    },
                    "required": ["max_stops", "cabin"],
                },
            },
            "required": ["origin", "destination", "passengers", "filters"],
        },
    },
}

WRITE_FILE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write text to a file in the workspace.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "content": {"type": "string", "minLength": 1},
            },
            "required": ["path", "content"],
        },
    },
}

TOOLS: list[dict[str, Any]] = [GET_WEATHER, SEARCH_FLIGHTS, WRITE_FILE]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def tools() -> list[dict]:
    return copy.deepcopy(TOOLS)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


SHORT = "What is the capital of France? Answer in one word."
NOT_NEEDED = "What is 2 + 3? Answer with just the number."
THINK = "Is 91 a prime number? Answer yes or no, in one word."
WEATHER = (
    "What is the weather in Paris right now? Call get_weather with "
    '{"city": "Paris", "unit": "celsius"}.'
)
PARALLEL = (
    "Call get_weather twice, in parallel (two tool calls in one reply): with "
    '{"city": "Paris", "unit": "celsius"} and with {"city": "Tokyo", "unit": "celsius"}.'
)
FLIGHTS = (
    'Find flights. Call search_flights with {"origin": "CDG", "destination": "NRT", '
    '"passengers": 2, "airlines": ["AF", "JL"], "filters": {"max_stops": 1, '
    '"cabin": "economy"}}.'
)
NAMED = "I am flying to Paris tomorrow and wonder what to pack."
CODE_FILE = '''def primes(limit: int) -> list[int]:
    """Primes below limit, by the sieve of Eratosthenes."""
    sieve = [True] * limit
    sieve[:2] = [False, False]
    for n in range(2, int(limit ** 0.5) + 1):
        if sieve[n]:
            sieve[n * n :: n] = [False] * len(range(n * n, limit, n))
    return [n for n, is_prime in enumerate(sieve) if is_prime]
'''
import json as _json  # noqa: E402

WRITE = (
    "Save this code to primes.py. Call write_file with "
    + _json.dumps({"path": "primes.py", "content": CODE_FILE})
    + "."
)
TOOL_RESULT = {"city": "Paris", "temperature_c": 17.5, "condition": "light rain"}


def multi_turn() -> list[dict]:
    return [
        {"role": "user", "content": WEATHER},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_verify_1",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city": "Paris", "unit": "celsius"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_verify_1", "content": _json.dumps(TOOL_RESULT)},
    ]


# The soak's mix: (kind, payload extras). Prompts that should end well short
# of max_tokens, so "length" means the output ran away.
SOAK_MIX: list[tuple[str, dict[str, Any]]] = [
    (
        "chat-code",
        {
            "messages": user(
                "Write a Python function that returns the first n "
                "Fibonacci numbers, with a short test."
            )
        },
    ),
    ("tool-weather", {"messages": user(WEATHER), "tools": [GET_WEATHER]}),
    (
        "chat-table",
        {
            "messages": user(
                "Make a markdown table of Blackwell GPUs: name, "
                "architecture, memory, compute capability."
            )
        },
    ),
    ("tool-parallel", {"messages": user(PARALLEL), "tools": [GET_WEATHER]}),
    (
        "chat-think",
        {
            "messages": user("Explain speculative decoding in one paragraph."),
            "chat_template_kwargs": {"thinking": True},
        },
    ),
    ("tool-write", {"messages": user(WRITE), "tools": [WRITE_FILE]}),
    (
        "chat-list",
        {"messages": user("List the steps to deploy a model server, as a numbered list.")},
    ),
    (
        "tool-flights",
        {"messages": user(FLIGHTS), "tools": TOOLS, "chat_template_kwargs": {"thinking": True}},
    ),
]
