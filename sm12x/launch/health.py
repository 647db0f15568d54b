"""`sm12x healthcheck`: the container healthcheck, one real token.

/health can be green while generation is broken (a dead scheduler, a draft
that crashes on the first verify), so this asks the server the way a client
does: the model id from /v1/models, then a one-token /v1/completions. Exit 0
when a token came back, 1 with one line saying what failed.

Where: the server the settings describe (SM12X_HOST or SM12X_BIND, and
SM12X_PORT), or with --router the router (SM12X_ROUTER_BIND and
SM12X_ROUTER_PORT), or --url.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import httpx

from sm12x import bounded, settings
from sm12x.cli import Command
from sm12x.errors import UserError
from sm12x.fields import PositiveFloat, option_type
from sm12x.http import redact, transport
from sm12x.http.transport import Limits
from sm12x.settings import Settings

WILDCARDS = ("0.0.0.0", "::")


def _url(host: str, port: int) -> str:
    # A server bound to every address is asked on loopback.
    host = "127.0.0.1" if host in WILDCARDS else host
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def default_url(s: Settings, router: bool = False) -> str:
    """The server sglang binds (SM12X_HOST, 0.0.0.0 in a bridged container, else
    SM12X_BIND), or the router."""
    if router:
        return _url(s.router_bind, s.router_port)
    return _url(s.listen_host, s.port_or())


# An answer of sglang's to either request is a few hundred bytes.
MAX_ANSWER = 1024 * 1024


def limits(timeout: float) -> Limits:
    """--timeout is the whole run's: both requests, every byte, end within it."""
    return Limits(
        timeout=timeout,
        stall=timeout,
        connect=min(timeout, 5.0),
        max_body=MAX_ANSWER,
        fail_fast_after=1 << 30,
        run_deadline=time.monotonic() + timeout,
    )


def _request(client: httpx.Client, url: str, api_key: str | None, body: dict | None = None) -> dict:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        if body is None:
            response = client.get(url, headers=headers)
        else:
            response = client.post(url, headers=headers, content=json.dumps(body).encode())
    except httpx.HTTPError as exc:
        raise UserError(f"{url}: {redact.url(str(exc)) or type(exc).__name__}") from None
    if response.status_code >= 400:
        detail = response.content[:200].decode(errors="replace")
        raise UserError(f"{url}: HTTP {response.status_code} {detail}")
    try:
        return bounded.loads(response.content)
    except bounded.TooBig as exc:
        raise UserError(f"{url}: the answer is {exc}") from None
    except ValueError:
        raise UserError(f"{url}: the answer is not JSON") from None


def check(url: str, api_key: str | None, timeout: float) -> str:
    """One token from the server at url, both requests within `timeout` seconds
    in all; returns a one-line summary."""
    started = time.monotonic()
    with transport.client(limits(timeout)) as client:
        models = _request(client, f"{url}/v1/models", api_key)
        try:
            model = models["data"][0]["id"]
        except (KeyError, IndexError, TypeError):
            raise UserError(f"{url}/v1/models lists no model") from None
        if not isinstance(model, str):
            raise UserError(f"{url}/v1/models lists a model whose id is not a string")
        answer = _request(
            client,
            f"{url}/v1/completions",
            api_key,
            {
                "model": model,
                "prompt": "The capital of France is",
                "max_tokens": 1,
                "temperature": 0,
            },
        )
    try:
        text = answer["choices"][0]["text"]
        tokens = answer["usage"]["completion_tokens"]
    except (KeyError, IndexError, TypeError):
        raise UserError(f"{url}/v1/completions answered without choices/usage") from None
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not isinstance(text, str):
        raise UserError(f"{url}/v1/completions answered a usage or text of the wrong type")
    if tokens < 1:
        raise UserError(f"{url}/v1/completions generated no token")
    return f"ok: {model} generated {tokens} token(s) in {time.monotonic() - started:.1f} s"


def run(args: argparse.Namespace) -> int:
    loaded = settings.from_args(args, "healthcheck")
    if args.explain:
        sys.stdout.write(settings.explain(loaded, "healthcheck"))
        return 0
    url = (args.url or default_url(loaded.settings, args.router)).rstrip("/")
    print(check(url, loaded.settings.key(), args.timeout))
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", help="server base URL (default: from SM12X_HOST or SM12X_BIND, and SM12X_PORT)"
    )
    parser.add_argument(
        "--router",
        action="store_true",
        help="ask the router instead (SM12X_ROUTER_BIND, SM12X_ROUTER_PORT): its healthcheck",
    )
    parser.add_argument(
        "--timeout",
        type=option_type(PositiveFloat),
        default=20.0,
        help="seconds for the whole check, both requests (default 20)",
    )
    settings.add_arguments(parser, "healthcheck")


COMMAND = Command(
    name="healthcheck",
    help="ask the local server for one generated token (the compose healthcheck)",
    add_arguments=add_arguments,
    run=run,
)
