"""`sm12x gate`: compose runs it before any server, and nothing starts if it fails.

Closed by default: an API published beyond loopback (SM12X_BIND for the rigs,
SM12X_ROUTER_BIND for the router) without SM12X_API_KEY is refused, unless
SM12X_INSECURE_NO_API_KEY=1 says the operator means it. Compose's variable
interpolation cannot express that rule (compose-go evaluates every nested
`${VAR:?}` whether or not its branch is taken), so the rule is code: this
command, run by the `gate` service that every other service depends on
(`condition: service_completed_successfully`), so `docker compose up` stops
with this message instead of starting an open API. `sm12x launch` and
`sm12x router` apply the same rule again when they start.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from sm12x.apikey import BIND_ENV, exposure_problem
from sm12x.cli import Command
from sm12x.errors import UserError
from sm12x.fields import HostName, parse

# Where compose publishes each API, and what listens there.
BINDS = {BIND_ENV: "the API (SM12X_BIND)", "SM12X_ROUTER_BIND": "the router (SM12X_ROUTER_BIND)"}


def problems(environ: Mapping[str, str]) -> list[str]:
    found = []
    for name, what in BINDS.items():
        value = environ.get(name, "").strip()
        if not value:
            continue
        address = parse(HostName, value, name, "fix it in .env")
        problem = exposure_problem(address, environ, what)
        if problem:
            found.append(problem)
    return found


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    found = problems(os.environ if environ is None else environ)
    if found:
        raise UserError("; ".join(found))
    print(
        "sm12x gate: ok: nothing is published beyond loopback without an API key", file=sys.stderr
    )
    return 0


COMMAND = Command(
    name="gate",
    help="refuse an API published beyond loopback without a key (compose runs it first)",
    description=__doc__.split("\n\n")[0],
    add_arguments=lambda parser: None,
    run=run,
)
