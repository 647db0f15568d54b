"""The commands README.md and docs/*.md show, read the way a reader types them.

Every fenced block in those files carries a language: `sh` holds commands (one
a line; `\\` continues a line, `&&` chains two, `#` starts a comment, a
leading `name$ ` is a prompt saying on which machine), `dotenv` holds lines
for `.env`, anything else (`text`, `json`) is shown, never typed.
tests/unit/test_doc_commands.py runs or classifies each command.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMAND_LANGS = {"sh"}
DOTENV_LANGS = {"dotenv"}
SHOWN_LANGS = {"text", "json"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)(?P<lang>[\w-]*)\s*$")
PROMPT = re.compile(r"^[\w.-]+\$\s+")
ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")


def docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    doc: str  # path relative to the repository
    line: int  # the opening fence's line number
    lang: str
    lines: tuple[tuple[int, str], ...]  # (line number, text without the block's indent)


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str  # prompt and comment gone, continuations joined, spaces collapsed
    prompt: str  # "other" for `other$ ...`, else ""

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text)


@dataclass(frozen=True)
class EnvLine:
    doc: str
    line: int
    name: str
    value: str  # as written (compose's .env syntax), comment removed


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    doc = path.relative_to(ROOT).as_posix()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        body: list[tuple[int, str]] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if closing and closing["fence"] == fence and not closing["lang"]:
                break
            body.append((j + 1, lines[j][indent:] if lines[j][:indent].isspace() else lines[j]))
            j += 1
        else:
            raise ValueError(f"{doc}:{i + 1}: the block never closes")
        found.append(Block(doc, i + 1, opening["lang"], tuple(body)))
        i = j + 1
    return found


def strip_comment(line: str) -> str:
    """The line without its `# ...` comment (a `#` outside quotes after a space)."""
    quote = None
    for k, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k].rstrip()
    return line.rstrip()


def split_chain(line: str) -> list[str]:
    """`a && b` -> [a, b] (outside quotes)."""
    parts, quote, start, k = [], None, 0, 0
    while k < len(line):
        char = line[k]
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif line.startswith("&&", k):
            parts.append(line[start:k].strip())
            start = k + 2
            k += 1
        k += 1
    parts.append(line[start:].strip())
    return [p for p in parts if p]


def logical_lines(block: Block) -> list[tuple[int, str]]:
    """(first line number, text) with `\\`-continued lines joined."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, text in block.lines:
        if pending is not None:
            number, text = pending[0], pending[1] + " " + text.strip()
            pending = None
        if text.rstrip().endswith("\\"):
            pending = (number, text.rstrip()[:-1].rstrip())
            continue
        out.append((number, text))
    if pending is not None:
        out.append(pending)
    return out


def commands(block: Block) -> list[Command]:
    found = []
    for number, text in logical_lines(block):
        prompt = ""
        match = PROMPT.match(text)
        if match:
            prompt, text = match[0].split("$")[0], text[match.end() :]
        text = strip_comment(text).strip()
        for part in split_chain(text):
            found.append(Command(block.doc, number, " ".join(part.split()), prompt))
    return found


def env_lines(block: Block) -> list[EnvLine]:
    found = []
    for number, text in block.lines:
        text = strip_comment(text).strip()
        if not text:
            continue
        match = ASSIGNMENT.match(text)
        if not match:
            raise ValueError(f"{block.doc}:{number}: not a NAME=value line: {text!r}")
        found.append(EnvLine(block.doc, number, match["name"], match["value"]))
    return found


def all_blocks() -> list[Block]:
    return [b for path in docs() for b in blocks(path)]


def all_commands() -> list[Command]:
    return [c for b in all_blocks() if b.lang in COMMAND_LANGS for c in commands(b)]


def env_before(command: Command) -> list[EnvLine]:
    """The `.env` lines a reader has written by the time they reach `command`:
    those of the dotenv blocks above it in the same document."""
    path = ROOT / command.doc
    return [
        e
        for b in blocks(path)
        if b.lang in DOTENV_LANGS and b.line < command.line
        for e in env_lines(b)
    ]


def inline_code(path: Path) -> list[str]:
    """The `...` spans outside fenced blocks."""
    text = path.read_text()
    text = re.sub(r"^\s*(```+|~~~+).*?^\s*\1\s*$", "", text, flags=re.DOTALL | re.MULTILINE)
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", text)]
