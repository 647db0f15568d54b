"""Exact tasks: soak requests whose one correct answer verify knows.

DSPARK's known failure (a stale or wrong verify row) puts wrong tokens into
otherwise fluent text, which repetition statistics cannot see. These tasks
can: each has exactly one correct output, a healthy DeepSeek-V4-Flash gives
it at temperature 0 every time, and any wrong token shows. They are chosen to
stress the draft:

- copy: an 859-character passage copied verbatim (the draft accepts long runs there,
  so a stale row shows as a changed word);
- arithmetic and counting, thinking on, answered as one pinned line;
- a deterministic JSON transformation (filter, join, upper-case), thinking off;
- a tool call whose arguments must echo supplied values exactly.

Prompts pin the format (what to write and that nothing else goes around it).
Scoring is exact, tolerant only of what is harmless (docs/verify.md): white
space at the very start and end, trailing white space on a line, and for
JSON answers one code fence around the JSON and its formatting (values are
compared, not bytes). The report names the first differing position and
shows the expected and received text around it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verify.result import Evidence

CONTEXT = 30  # characters shown either side of the first difference

PASSAGE = """\
The lighthouse keeper climbed the one hundred and twelve steps every evening at seven, \
carrying a tin of oil, a clean rag and a notebook with a green cover. In the notebook he \
wrote the time, the wind and the number of ships he could see: on 14 March 1891 there were \
three, on 15 March none at all. He never wrote about himself. When the lamp was lit he sat \
by the small window facing north, where the rocks lay under the water like sleeping animals, \
and waited for the first light of the harbour to answer his own.

Years later his granddaughter found the notebooks in a wooden box under the stairs, \
forty-one of them, tied with string. She read them in order over one winter and noticed \
that the handwriting never changed, not even on the night of the great storm of 1903, when \
the entry simply says: "Wind north-east, force 10. Ships: 1. All well at dawn.\""""

COPY_PROMPT = (
    "Copy the passage between the <passage> tags exactly as it is written, character for "
    "character: the same words, numbers, punctuation and line breaks. Reply with the passage "
    "only: no tags, no quotation marks around it, no code fence, no comment before or after."
    f"\n\n<passage>\n{PASSAGE}\n</passage>"
)

ANSWER_LINE = (
    "Think it through, then reply with exactly one line of the form ANSWER: <integer> "
    "and nothing else."
)
ARITHMETIC_PROMPT = f"Compute (48 * 37) + 1296 / 16 - 215. {ANSWER_LINE}"

LOG = """\
2026-08-01 10:00:01 INFO server started on port 30000
2026-08-01 10:00:02 ERROR cannot open /model/config.json
2026-08-01 10:00:05 WARN retrying in 5 s
2026-08-01 10:00:10 ERROR NCCL timeout on rank 1
2026-08-01 10:00:11 INFO health check passed
2026-08-01 10:00:12 INFO decode batch of 16 requests
2026-08-01 10:00:13 ERROR request aborted by the client
2026-08-01 10:00:14 WARN slow prefill of 8192 tokens
2026-08-01 10:00:20 ERROR out of memory while capturing a CUDA graph
2026-08-01 10:00:21 INFO restarting the scheduler
2026-08-01 10:00:30 ERROR scheduler did not come back
2026-08-01 10:00:31 INFO shutting down"""
COUNT_PROMPT = (
    "How many of the log lines below have the level ERROR (the third field of the "
    f"line)? {ANSWER_LINE}\n\n```\n{LOG}\n```"
)

RECORDS: list[dict[str, Any]] = [
    {"id": 3, "first": "Ada", "last": "Lovelace", "city": "London", "active": True},
    {"id": 7, "first": "Grace", "last": "Hopper", "city": "New York", "active": True},
    {"id": 9, "first": "Edsger", "last": "Dijkstra", "city": "Austin", "active": False},
    {"id": 12, "first": "Alan", "last": "Turing", "city": "Manchester", "active": True},
    {"id": 15, "first": "Barbara", "last": "Liskov", "city": "Boston", "active": False},
    {"id": 21, "first": "Donald", "last": "Knuth", "city": "Stanford", "active": True},
    {"id": 28, "first": "Frances", "last": "Allen", "city": "Peru", "active": True},
]
JSON_PROMPT = (
    'Transform the JSON array below. Keep only the records whose "active" is true, in their '
    'order, and write each as an object with exactly three keys: "id" (unchanged), "name" '
    '(first and last name joined by one space) and "city" (in upper case). Reply with the '
    "resulting JSON array only, on one line, without a code fence or any comment.\n\n"
    + json.dumps(RECORDS)
)

RECORD_ORDER = {
    "type": "function",
    "function": {
        "name": "record_order",
        "description": "Record a customer order.",
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "customer": {"type": "string"},
                "email": {"type": "string"},
                "skus": {"type": "array", "items": {"type": "string"}},
                "quantity": {"type": "integer"},
                "total_cents": {"type": "integer"},
                "note": {"type": "string"},
            },
            "required": [
                "order_id",
                "customer",
                "email",
                "skus",
                "quantity",
                "total_cents",
                "note",
            ],
            "additionalProperties": False,
        },
    },
}
ORDER = {
    "order_id": "ORD-2026-0731-0042",
    "customer": "Margaret Hamilton",
    "email": "m.hamilton@example.org",
    "skus": ["GPU-6000-96", "CBL-QSFP112-05", "PSU-1600-TI"],
    "quantity": 3,
    "total_cents": 1703150,
    "note": "Deliver to the loading dock at the back; ring twice and ask for the night shift.",
}
TOOL_PROMPT = (
    "Record this order. Call record_order with exactly these arguments, copying every "
    "value verbatim: " + json.dumps(ORDER)
)


def _thinking(on: bool) -> dict:
    return {"chat_template_kwargs": {"thinking": on}}


@dataclass(frozen=True)
class Mismatch:
    """Where a received answer first departs from the expected one."""

    position: int  # character offset in the compared text
    expected: str  # expected text around that position
    received: str  # received text around that position
    length: int  # length of the expected text
    what: str = "text"

    def __str__(self) -> str:
        return (
            f"{self.what} differs at char {self.position} of {self.length}: "
            f"expected {self.expected!r}, received {self.received!r}"
        )


def first_difference(expected: str, received: str) -> int | None:
    """Offset of the first differing character (None: equal)."""
    if expected == received:
        return None
    n = min(len(expected), len(received))
    return next((i for i in range(n) if expected[i] != received[i]), n)


def mismatch(expected: str, received: str, what: str = "text") -> Mismatch | None:
    at = first_difference(expected, received)
    if at is None:
        return None
    start = max(0, at - CONTEXT)
    return Mismatch(
        at, expected[start : at + CONTEXT], received[start : at + CONTEXT], len(expected), what
    )


def normalise(text: str) -> str:
    """The harmless differences: white space at either end, trailing white
    space on a line, CRLF line ends."""
    lines = text.replace("\r\n", "\n").strip().split("\n")
    return "\n".join(line.rstrip() for line in lines)


_FENCE = re.compile(r"^```[a-zA-Z]*\n(.*)\n```$", re.S)


def canonical_json(text: str) -> str | None:
    """A JSON answer as canonical text (sorted keys, no spaces); None when it
    is not JSON. One code fence around it is tolerated."""
    text = text.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return json.dumps(
            json.loads(text), sort_keys=True, ensure_ascii=False, separators=(",", ":")
        )
    except json.JSONDecodeError:
        return None


@dataclass(frozen=True)
class ExactTask:
    kind: str  # the soak kind
    body: dict  # request extras (messages, tools, thinking, temperature)
    expected: str  # the correct output, as compared (see score)
    score: Callable[[ExactTask, object], Mismatch | None]
    tool: bool = False


def _score_text(task: ExactTask, merged) -> Mismatch | None:
    if merged.calls:
        return Mismatch(
            0,
            task.expected[: 2 * CONTEXT],
            f"{len(merged.calls)} tool call(s)",
            len(task.expected),
            "answer",
        )
    return mismatch(task.expected, normalise(merged.content))


def _score_json(task: ExactTask, merged) -> Mismatch | None:
    got = canonical_json(merged.content)
    if got is None:
        return mismatch(task.expected, normalise(merged.content), "JSON (not parseable)")
    return mismatch(task.expected, got, "JSON")


def _score_tool(task: ExactTask, merged) -> Mismatch | None:
    calls = list(merged.calls.values())
    if len(calls) != 1 or calls[0].name != "record_order":
        names = [c.name for c in calls]
        return Mismatch(
            0, "one call to record_order", f"calls {names}", len(task.expected), "tool call"
        )
    got = canonical_json(calls[0].arguments)
    if got is None:
        return mismatch(task.expected, calls[0].arguments, "arguments (not JSON)")
    return mismatch(task.expected, got, "arguments")


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


TASKS = {
    t.kind: t
    for t in [
        ExactTask(
            "exact-copy",
            {"messages": _user(COPY_PROMPT), "temperature": 0, **_thinking(False)},
            PASSAGE,
            _score_text,
        ),
        ExactTask(
            "exact-arithmetic",
            {"messages": _user(ARITHMETIC_PROMPT), "temperature": 0, **_thinking(True)},
            "ANSWER: 1642",
            _score_text,
        ),
        ExactTask(
            "exact-count",
            {"messages": _user(COUNT_PROMPT), "temperature": 0, **_thinking(True)},
            "ANSWER: 5",
            _score_text,
        ),
        ExactTask(
            "exact-json",
            {"messages": _user(JSON_PROMPT), "temperature": 0, **_thinking(False)},
            _canonical(
                [
                    {"id": r["id"], "name": f"{r['first']} {r['last']}", "city": r["city"].upper()}
                    for r in RECORDS
                    if r["active"]
                ]
            ),
            _score_json,
        ),
        ExactTask(
            "exact-tool",
            {
                "messages": _user(TOOL_PROMPT),
                "tools": [RECORD_ORDER],
                "temperature": 0,
                **_thinking(False),
            },
            _canonical(ORDER),
            _score_tool,
            tool=True,
        ),
    ]
}
SOAK_MIX: list[tuple[str, dict[str, Any]]] = [(t.kind, t.body) for t in TASKS.values()]


def score(kind: str, merged) -> Mismatch | None:
    """The first difference of a soak output from its task's answer (None:
    right, or not an exact task)."""
    task = TASKS.get(kind)
    return task.score(task, merged) if task else None


def report(outcomes: list, ev: Evidence) -> None:
    """Per-task counts in the soak's metrics, and the first mismatch of each
    failing task in its evidence."""
    summary = {}
    for kind in TASKS:
        runs = [o for o in outcomes if o.kind == kind]
        if not runs:
            continue
        wrong = [o for o in runs if getattr(o, "mismatch", None) is not None]
        entry: dict[str, Any] = {"requests": len(runs), "wrong": len(wrong)}
        if wrong:
            first = wrong[0].mismatch
            entry["first"] = {
                "case": wrong[0].case,
                "round": wrong[0].round,
                "what": first.what,
                "position": first.position,
                "expected": first.expected,
                "received": first.received,
            }
            ev.saw(
                f"{kind}: {len(wrong)}/{len(runs)} wrong; case {wrong[0].case} round "
                f"{wrong[0].round}: {first}"
            )
        summary[kind] = entry
    if summary:
        ev.metrics["exact"] = summary
        right = sum(e["requests"] - e["wrong"] for e in summary.values())
        total = sum(e["requests"] for e in summary.values())
        ev.saw(f"exact tasks: {right}/{total} right")
