"""What never goes into a bundle: host names, IP addresses, absolute host paths,
GPU UUIDs and serials, keys. Structured fields are left out where they are read
(facts.py keeps base names, never the server's URL); this is the second line:
every text written into a bundle passes through `Scrubber.text`, and a bundle
that still holds one of the secrets it was told of fails to write."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")
IPV6 = re.compile(r"(?<![\w:])(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{0,4}(?![\w:])")
GPU_UUID = re.compile(r"\b(?:GPU|MIG)-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")
# An absolute path with at least two parts (/home/alice/..., /root/x, /work/...):
# kept as its last part. A lone "/v1" or "/metrics" is a route, not a path.
ABS_PATH = re.compile(r"(?<![\w:/.])/(?:[\w.@+-]+/)+([\w.@+-]+)")
REPLACEMENT = "[redacted]"


@dataclass
class Scrubber:
    secrets: list[str] = field(default_factory=list)

    @classmethod
    def for_run(cls, extra: Iterable[str | None] = ()) -> Scrubber:
        names = {socket.gethostname(), socket.getfqdn()}
        kept = [s for s in (*names, *extra) if s and len(s) >= 4 and s != "localhost"]
        # Longest first, so a name inside another is not half replaced.
        return cls(sorted(set(kept), key=len, reverse=True))

    def text(self, value: str) -> str:
        for secret in self.secrets:
            value = value.replace(secret, REPLACEMENT)
        value = GPU_UUID.sub(REPLACEMENT, value)
        value = IPV4.sub(REPLACEMENT, value)
        value = IPV6.sub(REPLACEMENT, value)
        return ABS_PATH.sub(lambda m: m.group(1), value)

    def data(self, value: Any) -> Any:
        """A JSON value with every string (keys included) scrubbed."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value

    def leaks(self, blob: bytes) -> list[str]:
        """Which of the told secrets a written file still holds (by kind, not value)."""
        found = []
        for secret in self.secrets:
            if secret.encode() in blob:
                found.append(f"a secret of {len(secret)} characters")
        text = blob.decode("utf-8", "replace")
        if GPU_UUID.search(text):
            found.append("a GPU UUID")
        return found
