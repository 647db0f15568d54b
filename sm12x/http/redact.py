"""Credentials out of everything verify and bench write or print.

A base URL may carry `user:password@`, an API key may come from a flag or the
environment, and a server may echo either back (sglang logs its server
arguments, api_key included; an error page may quote the Authorization
header). Reports, JUnit files, logs and the terminal get text through a
Redactor, which replaces every known secret, any URL userinfo and any
`Bearer` token with `***`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

MASK = "***"
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,31}://)[^/\s@]+@")
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


# A run of this many characters of a secret (or of one of its encodings) is
# masked where it starts or ends the secret: half a key is still most of it.
PART = 8


def _base64_forms(raw: bytes) -> set[str]:
    """The base64 of `raw` wherever it sits in a longer base64 text: for each of
    the three alignments, only the characters that `raw` alone decides."""
    forms = set()
    for offset in range(3):
        text = base64.b64encode(b"\0" * offset + raw).decode()
        start = -(-offset * 8 // 6)  # the first character no padding byte touches
        end = (offset + len(raw)) * 8 // 6  # the last one the next byte cannot change
        middle = text[start:end]
        if middle:
            forms |= {middle, middle.translate(str.maketrans("+/", "-_"))}
    return forms


def forms(secret: str) -> set[str]:
    """A secret as it may be written: itself, URL-encoded, hex, base64 (of the
    secret, and of `user:secret`-style headers it ends)."""
    raw = secret.encode()
    found = {secret, quote(secret, safe=""), quote_plus(secret), raw.hex(), raw.hex().upper()}
    found |= _base64_forms(raw)
    return {f for f in found if len(f) >= 3}


def _mask_parts(value: str, form: str) -> str:
    """Every run of PART or more characters that begins or ends `form`."""
    if len(form) <= PART:
        return value
    out, i = [], 0
    while i < len(value):
        length = 0
        if value.startswith(form[:PART], i):
            length = PART
            while length < len(form) and value.startswith(form[: length + 1], i):
                length += 1
        else:
            for size in range(len(form) - 1, PART - 1, -1):
                if value.startswith(form[-size:], i):
                    length = size
                    break
        if length:
            out.append(MASK)
            i += length
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


class Redactor:
    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        # Longest first, so a secret containing another is masked whole. Very
        # short values (a user name like "a") would mask ordinary text.
        given = {s for s in secrets if s and len(s) >= 3}
        self.secrets = sorted(given, key=len, reverse=True)
        # Keys long enough to have parts worth masking, in every encoding.
        self.forms = sorted(
            {f for s in given if len(s) >= PART for f in forms(s)}, key=len, reverse=True
        )

    @classmethod
    def for_endpoint(cls, base_url: str | None, api_key: str | None) -> Redactor:
        return cls([api_key, *url_secrets(base_url or "")])

    def text(self, value: str) -> str:
        for secret in self.secrets:
            value = value.replace(secret, MASK)
        for form in self.forms:
            value = value.replace(form, MASK)
        if self.forms and any(f[:PART] in value or f[-PART:] in value for f in self.forms):
            for form in self.forms:
                value = _mask_parts(value, form)
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
