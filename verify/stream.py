"""Merging streamed chat chunks back into one message, keeping what the checks
need to judge the stream itself: who said the role, where reasoning came
relative to content, every id a tool call carried, each finish_reason.

Chunks are plain dicts (raw JSON events, or the openai SDK's chunks dumped).
Null fields are tolerated everywhere: sglang-router re-serialises deltas with
explicit `"role": null, "content": null`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StreamedCall:
    index: int
    ids: list[str] = field(default_factory=list)  # every non-null id seen, in order
    names: list[str] = field(default_factory=list)  # every non-null name seen
    arguments: str = ""
    fragments: int = 0

    @property
    def id(self) -> str | None:
        return self.ids[0] if self.ids else None

    @property
    def name(self) -> str | None:
        return self.names[0] if self.names else None


@dataclass
class Merged:
    chunks: int = 0
    response_ids: set = field(default_factory=set)
    roles: list[tuple[int, str]] = field(default_factory=list)  # (chunk number, role)
    content: str = ""
    reasoning: str = ""
    reasoning_fields: set = field(default_factory=set)  # reasoning_content / reasoning
    order: list[str] = field(default_factory=list)  # channel of each non-empty delta
    calls: dict[int, StreamedCall] = field(default_factory=dict)
    finish_reasons: dict[int, list[str]] = field(default_factory=dict)
    usage: list[tuple[int, dict, int]] = field(default_factory=list)  # (chunk no, usage, n choices)
    errors: list[dict] = field(default_factory=list)

    @property
    def finish_reason(self) -> str | None:
        values = self.finish_reasons.get(0) or []
        return values[-1] if values else None

    def first(self, channel: str) -> int | None:
        return self.order.index(channel) if channel in self.order else None

    def last(self, channel: str) -> int | None:
        if channel not in self.order:
            return None
        return len(self.order) - 1 - self.order[::-1].index(channel)


def reasoning_of(obj: dict) -> tuple[str | None, str | None]:
    """(text, field name): sglang says reasoning_content, current vLLM reasoning."""
    for name in ("reasoning_content", "reasoning"):
        value = obj.get(name)
        if value:
            return value, name
    return None, None


def merge(chunks: list[dict]) -> Merged:
    out = Merged()
    for number, chunk in enumerate(chunks):
        out.chunks += 1
        if chunk.get("error") or chunk.get("object") == "error":
            out.errors.append(chunk)
            continue
        if chunk.get("id"):
            out.response_ids.add(chunk["id"])
        if chunk.get("usage"):
            out.usage.append((number, chunk["usage"], len(chunk.get("choices") or [])))
        for choice in chunk.get("choices") or []:
            index = choice.get("index") or 0
            delta = choice.get("delta") or {}
            if delta.get("role"):
                out.roles.append((number, delta["role"]))
            if index != 0:
                pass  # verify asks for n=1; other choices only count finish_reasons
            else:
                text, name = reasoning_of(delta)
                if text:
                    out.reasoning += text
                    out.reasoning_fields.add(name)
                    out.order.append("reasoning")
                if delta.get("content"):
                    out.content += delta["content"]
                    out.order.append("content")
                for call in delta.get("tool_calls") or []:
                    i = call.get("index")
                    i = 0 if i is None else i
                    slot = out.calls.setdefault(i, StreamedCall(i))
                    slot.fragments += 1
                    if call.get("id"):
                        slot.ids.append(call["id"])
                    function = call.get("function") or {}
                    if function.get("name"):
                        slot.names.append(function["name"])
                    if function.get("arguments"):
                        slot.arguments += function["arguments"]
                    out.order.append("tool")
            if choice.get("finish_reason"):
                out.finish_reasons.setdefault(index, []).append(choice["finish_reason"])
    return out
