"""`sm12x exposure-check`: compose runs it before any server, and nothing starts if it fails.

Closed by default: an API published beyond loopback (SM12X_BIND for the rigs,
SM12X_ROUTER_BIND for the router) without SM12X_API_KEY is refused, unless
SM12X_INSECURE_NO_API_KEY=1 says the operator means it; so is the monitoring
profile's Grafana beyond loopback (SM12X_GRAFANA_BIND) without its admin
password. Compose's variable
interpolation cannot express that rule (compose-go evaluates every nested
`${VAR:?}` whether or not its branch is taken), so the rule is code: this
command, run by the `exposure-check` service that every other service depends on
(`condition: service_completed_successfully`), so `docker compose up` stops
with this message instead of starting an open API. `sm12x launch` and
`sm12x router` apply the same rule again when they start.
"""

from __future__ import annotations

import argparse
import sys

from sm12x import settings
from sm12x.apikey import OPEN_ENV, exposure_problem, is_loopback
from sm12x.cli import Command
from sm12x.errors import UserError
from sm12x.settings import Loaded

# Where compose publishes each API (a setting), and what listens there.
BINDS = {"bind": "the API (SM12X_BIND)", "router_bind": "the router (SM12X_ROUTER_BIND)"}


def _has_key(loaded: Loaded) -> bool:
    s = loaded.settings
    # Compose passes SM12X_API_KEY_SET=1, never the key (`docker compose
    # config` would print it); run by hand, the key itself counts too.
    return s.api_key_set or s.key() is not None


def grafana_problem(loaded: Loaded) -> str | None:
    """Grafana (the monitoring profile) beyond loopback without its admin password.
    Its login is the only thing in front of it (anonymous access is off), and
    without a password it would not start anyway: say so before anything starts.
    SM12X_INSECURE_NO_API_KEY is about the API, not this."""
    s = loaded.settings
    if is_loopback(s.grafana_bind) or s.grafana_admin_password_set:
        return None
    return (
        f"Grafana (SM12X_GRAFANA_BIND) would listen on {s.grafana_bind} beyond loopback "
        "with no admin password: set SM12X_GRAFANA_ADMIN_PASSWORD in .env, or "
        "SM12X_GRAFANA_BIND=127.0.0.1"
    )


def problems(loaded: Loaded) -> list[str]:
    s = loaded.settings
    has_key = _has_key(loaded)
    found = []
    for name, what in BINDS.items():
        problem = exposure_problem(getattr(s, name), has_key, s.insecure_no_api_key, what)
        if problem:
            found.append(problem)
    grafana = grafana_problem(loaded)
    if grafana:
        found.append(grafana)
    return found


def verdicts(loaded: Loaded) -> list[str]:
    """What is true of each listener that passed the check, in words: loopback
    only, published with a key, or published OPEN because the opt-out says so."""
    s = loaded.settings
    has_key = _has_key(loaded)
    said = []
    for name, what in BINDS.items():
        address = getattr(s, name)
        if is_loopback(address):
            said.append(f"{what} on {address}: loopback only")
        elif has_key:
            said.append(f"{what} on {address}: published beyond loopback, with an API key")
        else:
            said.append(
                f"{what} on {address}: published beyond loopback with NO API key "
                f"({OPEN_ENV}=1 says an open API is meant)"
            )
    return said


def run(args: argparse.Namespace, environ=None) -> int:
    loaded = settings.from_args(args, "exposure-check", environ=environ)
    if args.explain:
        sys.stdout.write(settings.explain(loaded, "exposure-check"))
        return 0
    found = problems(loaded)
    if found:
        raise UserError("; ".join(found))
    said = verdicts(loaded)
    verdict = "ok, OPEN" if any("NO API key" in line for line in said) else "ok"
    print(f"sm12x exposure-check: {verdict}: {'; '.join(said)}", file=sys.stderr)
    return 0


COMMAND = Command(
    name="exposure-check",
    help="refuse an API published beyond loopback without a key (compose runs it first)",
    description=__doc__.split("\n\n")[0],
    add_arguments=lambda parser: settings.add_arguments(parser, "exposure-check"),
    run=run,
)
