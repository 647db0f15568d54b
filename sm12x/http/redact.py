"""Credentials out of everything verify and bench write or print.

A base URL may carry `user:password@`, an API key may come from a flag or the
environment, and a server may echo either back (sglang logs its server
arguments, api_key included; an error page may quote the Authorization
header). Reports, JUnit files, logs and the terminal get text through a
Redactor, which replaces every known secret, any URL userinfo and any
`Bearer` token with `***`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

MASK = "***"
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s'\",;]+")


def url(text: str) -> str:
    """A URL with any userinfo replaced by ***."""
    try:
        parts = urlsplit(text)
    except ValueError:  # not a URL (`http://[::1`): mask whatever precedes an @
        return re.sub(r"(?<=://)[^/@]*@", MASK + "@", text)
    if "@" not in parts.netloc:
        return text
    return urlunsplit(parts._replace(netloc=MASK + "@" + parts.netloc.rpartition("@")[2]))


def url_secrets(text: str) -> list[str]:
    """The user name and password a URL carries, raw and percent-decoded."""
    try:
        parts = urlsplit(text)
    except ValueError:  # not a URL: _base refuses it, masked by url()
        return []
    values = [parts.username, parts.password]
    return [v for value in values if value for v in {value, unquote(value)}]


class Redactor:
    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        # Longest first, so a secret containing another is masked whole. Very
        # short values (a user name like "a") would mask ordinary text.
        self.secrets = sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True)

    @classmethod
    def for_endpoint(cls, base_url: str | None, api_key: str | None) -> Redactor:
        return cls([api_key, *url_secrets(base_url or "")])

    def text(self, value: str) -> str:
        for secret in self.secrets:
            value = value.replace(secret, MASK)
        return _BEARER.sub(r"\1" + MASK, _USERINFO.sub(r"\1" + MASK + "@", value))

    def __call__(self, value: Any) -> Any:
        """Any JSON-like value with every string redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self(k): self(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self(v) for v in value)
        return value
