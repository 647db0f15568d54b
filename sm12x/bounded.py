"""Reading what a user or a peer hands sm12x, with every size and depth bounded.

A path may name a FIFO (open() blocks until a writer comes), /dev/zero
(read() never ends) or a 200 MB file; a peer may send JSON nested a hundred
thousand deep (json.loads and yaml both recurse, and end in RecursionError).
So files are opened non-blocking, must be regular files, and are read up to
a cap; parsed documents are checked for depth before they are parsed.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

# Deep enough for every document sm12x reads (a recipe is 4 levels, an
# OpenAI reply under 10), far below Python's recursion limit.
MAX_DEPTH = 64


class TooBig(ValueError):
    """A bound was exceeded; the message says which."""


def read_bytes(path: str | Path, limit: int) -> bytes:
    """At most `limit` bytes of a regular file, or OSError/TooBig.

    O_NONBLOCK: opening a FIFO does not wait for a writer; the regular-file
    check then refuses it (and devices, sockets, directories)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TooBig("not a regular file (a FIFO, a device or a directory)")
        if info.st_size > limit:
            raise TooBig(f"{info.st_size} bytes, more than the {limit} allowed")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while being read
                raise TooBig(f"more than the {limit} bytes allowed")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | Path, limit: int) -> str:
    return read_bytes(path, limit).decode("utf-8")


_SPECIAL = re.compile(rb'["\\\[\]{}]')


class DepthGauge:
    """How deep JSON brackets nest, fed a byte stream chunk by chunk (strings
    skipped, no recursion): an upper bound on the depth of what it parses to.
    Only the bracket, quote and backslash bytes are looked at."""

    def __init__(self, limit: int = MAX_DEPTH) -> None:
        self.limit = limit
        self.depth = self.deepest = 0
        self.in_string = False
        self.escaped = -1  # the offset in the chunk of the byte a backslash escapes

    def feed(self, chunk: bytes) -> None:
        escaped, self.escaped = self.escaped, -1
        for match in _SPECIAL.finditer(chunk):
            at, ch = match.start(), match.group()
            if at == escaped:
                continue
            if self.in_string:
                if ch == b"\\":
                    escaped = at + 1
                    if escaped == len(chunk):  # the escaped byte opens the next chunk
                        self.escaped = 0
                elif ch == b'"':
                    self.in_string = False
            elif ch == b'"':
                self.in_string = True
            elif ch in (b"[", b"{"):
                self.depth += 1
                if self.depth > self.deepest:
                    self.deepest = self.depth
                    if self.deepest > self.limit:
                        raise TooBig(f"nested more than {self.limit} levels deep")
            elif ch in (b"]", b"}"):
                self.depth -= 1


def nesting(text: str | bytes) -> int:
    gauge = DepthGauge(limit=1 << 62)
    gauge.feed(text.encode("utf-8", "replace") if isinstance(text, str) else text)
    return gauge.deepest


def check_depth(text: str | bytes, limit: int = MAX_DEPTH) -> None:
    found = nesting(text)
    if found > limit:
        raise TooBig(f"nested {found} levels deep, more than the {limit} allowed")


def loads(text: str | bytes, limit: int = MAX_DEPTH) -> Any:
    """json.loads, refusing a document nested deeper than `limit` (TooBig)
    instead of recursing into a RecursionError."""
    check_depth(text, limit)
    return json.loads(text)
