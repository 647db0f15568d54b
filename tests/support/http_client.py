"""httpx.get and httpx.post for the tests' polls, with one TLS context.

Each httpx.get makes a client, and each client a TLS context that reads the
whole CA bundle, even for the plain-http URLs the tests poll every 0.1-0.2 s
while a server starts: 110 of the four workers' 1,383 sampled seconds in stop
55's py-spy census. These pass sm12x's shared context (the one httpx would make)
and are otherwise httpx's own functions: the same arguments, answers and errors.
"""

from __future__ import annotations

from typing import Any

import httpx

from sm12x.http.transport import tls


def get(url: str, **options: Any) -> httpx.Response:
    return httpx.get(url, verify=tls(), **options)


def post(url: str, **options: Any) -> httpx.Response:
    return httpx.post(url, verify=tls(), **options)
