"""The API key: where it comes from, and the rule that an exposed server has one.

The key reaches sm12x through the settings (SM12X_API_KEY in .env or the
environment) or a file (SM12X_API_KEY_FILE, the Kubernetes Secret mounted
read-only), and leaves it only in memory: sglang and the router get it from
sm12x.keyed, never on a command line, where `ps` would show it to every user
of the host.

Closed by default: a server reachable beyond loopback without a key is
refused unless SM12X_INSECURE_NO_API_KEY=1 says the operator means it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from sm12x import bounded
from sm12x.errors import UserError
from sm12x.fields import ApiKey, parse

ENV = "SM12X_API_KEY"
FILE_ENV = "SM12X_API_KEY_FILE"
OPEN_ENV = "SM12X_INSECURE_NO_API_KEY"
# Compose's published host address (the container itself listens on 0.0.0.0).
BIND_ENV = "SM12X_BIND"
# A key is a line of text; a file bigger than this is not a key file.
KEY_FILE_LIMIT = 4096


def checked_key(value: str, source: str) -> str:
    try:
        return parse(ApiKey, value, source)
    except UserError:
        # Never echo the key: say what is wrong with it, not what it is.
        raise UserError(
            f"{source}: the key must be printable ASCII without spaces or newlines "
            "(it is sent as `Authorization: Bearer <key>`)"
        ) from None


def read_key_file(path: str) -> str:
    """The key a file holds (SM12X_API_KEY_FILE), checked: a regular file of
    at most KEY_FILE_LIMIT bytes (a FIFO or /dev/zero is refused, not waited on)."""
    try:
        value = bounded.read_text(path, KEY_FILE_LIMIT).strip()
    except bounded.TooBig as exc:
        raise UserError(
            f"{FILE_ENV}={path}: not a key file ({exc}): point it at the file that holds the key"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise UserError(f"{FILE_ENV}={path}: cannot read the key ({reason})") from None
    if not value:
        raise UserError(f"{FILE_ENV}={path} is empty: put the key in it")
    return checked_key(value, FILE_ENV)


def read_api_key(environ: Mapping[str, str]) -> str | None:
    """The key from SM12X_API_KEY, else from the file SM12X_API_KEY_FILE names
    (sm12x.keyed: the launcher hands the key to its child this way)."""
    value = environ.get(ENV, "").strip()
    if value:
        return checked_key(value, ENV)
    path = environ.get(FILE_ENV, "").strip()
    return read_key_file(path) if path else None


def is_loopback(address: str) -> bool:
    text = address.strip().strip("[]")
    if text in ("", "localhost"):
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def exposure_problem(address: str, has_key: bool, open_allowed: bool, what: str) -> str | None:
    """Why serving on `address` without a key is refused, or None when it is fine."""
    if is_loopback(address) or open_allowed or has_key:
        return None
    return (
        f"{what} would listen on {address} with no API key: anyone who reaches it can use "
        f"it. Set {ENV} in .env (or {FILE_ENV}), bind 127.0.0.1, or set {OPEN_ENV}=1 if "
        "an open API is really what you want"
    )
