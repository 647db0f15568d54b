"""The value types every sm12x input goes through, one validator per concept.

Ports, ranks, host names, Kubernetes names, image references, the API key,
finite numbers: each is an Annotated pydantic type here, so a recipe field,
a command-line option, an environment variable and (later) a settings model
all refuse the same bad value with the same words. `parse()` turns a raw
string into the type or raises one UserError line naming where the value
came from and what a good one looks like.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter, ValidationError

from sm12x.errors import UserError

T = TypeVar("T")


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number (not nan or inf)")
    return value


def _port_digits(value: Any) -> Any:
    """A port as text is digits only: int() and pydantic would take '+80',
    ' 80' or '30000.0' (a float with no fraction) for 80 or 30000."""
    if isinstance(value, (bool, float)):
        raise ValueError("must be a whole number from 1 to 65535, written in digits")
    if isinstance(value, str) and not re.fullmatch(r"[0-9]+", value):
        raise ValueError("must be a whole number from 1 to 65535, written in digits only")
    return value


# A port a server listens on or a client connects to.
Port = Annotated[int, BeforeValidator(_port_digits), Field(ge=1, le=65535)]
# A node's rank in a multi-node group (the upper bound is the recipe's node count).
NodeRank = Annotated[int, Field(ge=0, le=255)]


def _bounded(test: Any, words: str) -> AfterValidator:
    """A range check whose message says the rule in words (pydantic's names the
    bound: 'greater than 0' reads worse than 'must be positive' for seconds)."""

    def check(value: Any) -> Any:
        if not test(value):
            raise ValueError(words)
        return value

    return AfterValidator(check)


FiniteFloat = Annotated[float, AfterValidator(_finite)]
# Seconds, rates, sizes: a finite number above 0 (`nan` would turn a limit off,
# `inf` overflows a deadline).
PositiveFloat = Annotated[
    float, AfterValidator(_finite), _bounded(lambda v: v > 0, "must be positive")
]
NonNegativeFloat = Annotated[
    float, AfterValidator(_finite), _bounded(lambda v: v >= 0, "must be 0 or more")
]
# A share: an accuracy floor, a tolerance.
Fraction = Annotated[
    float, AfterValidator(_finite), _bounded(lambda v: 0 <= v <= 1, "must be between 0 and 1")
]
# A share that cannot be nothing: a verify-budget fraction of sglang's SPS profiler.
PositiveFraction = Annotated[
    float, AfterValidator(_finite), _bounded(lambda v: 0 < v <= 1, "must be in (0, 1]")
]
# How many: requests, rounds, streams.
Count = Annotated[int, _bounded(lambda v: v >= 1, "must be at least 1")]

# RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens.
# A leading '-' is never valid, which is what keeps a value like
# '-oProxyCommand=...' from being read as an option by ssh or ping.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?$")


def _host(value: str) -> str:
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    if len(text) > 253 or not _HOSTNAME.match(text):
        raise ValueError(
            "is not a host name or IP address (letters, digits, dots and inner hyphens; "
            "it may not start with '-')"
        )
    return text


HostName = Annotated[str, AfterValidator(_host)]


def _host_port(value: str) -> str:
    """host, or host:port ([v6]:port for IPv6)."""
    text = value.strip()
    match = re.match(r"^\[([^\]]+)\](?::(.*))?$", text) or re.match(r"^([^:]+)(?::(.*))?$", text)
    if match is None:
        # A bare IPv6 address: '::1:5000' is both ::1 port 5000 and the
        # address ::1:5000, so an IPv6 address is written in brackets.
        raise ValueError(
            "is ambiguous: write an IPv6 address in brackets, [ADDR] or [ADDR]:PORT "
            "(e.g. [::1]:5000)"
        )
    _host(match[1])
    if match[2] is not None:
        TypeAdapter(Port).validate_python(match[2])
    return text


def _int(text: str) -> Any:
    return int(text) if re.fullmatch(r"-?\d{1,12}", text.strip()) else text


HostPort = Annotated[str, AfterValidator(_host_port)]

# Kubernetes object and namespace names (DNS-1123 label).
_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
K8sName = Annotated[str, Field(max_length=63, pattern=_K8S_NAME)]
# A Multus network: a NetworkAttachmentDefinition's name, or namespace/name.
_K8S_NETWORK = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
K8sNetworkName = Annotated[str, Field(max_length=127, pattern=_K8S_NETWORK)]
# A resource name such as rdma/rdma_shared_device_a or nvidia.com/gpu.
_K8S_RESOURCE = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
K8sResourceName = Annotated[str, Field(max_length=253, pattern=_K8S_RESOURCE)]
# An image reference as Docker reads it: [registry[:port]/]path[:tag][@digest].
# The first component is a registry only with a dot, a port or `localhost`.
_IMAGE = re.compile(
    r"^(?:(?:(?:[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+|localhost)(?::[0-9]{1,5})?"
    r"|[a-zA-Z0-9-]+:[0-9]{1,5})/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)
ImageRef = Annotated[str, Field(max_length=255, pattern=_IMAGE.pattern)]


def _abs_path(value: str) -> str:
    if not value.startswith("/") or ".." in value.split("/") or re.search(r"[\x00-\x1f]", value):
        raise ValueError(
            "must be an absolute path (starting with /, no '..', no control characters)"
        )
    return value


def _track(value: str) -> str:
    from sm12x.versions import UnknownTrackError, resolve_track

    try:
        return resolve_track(value.strip())
    except UnknownTrackError as err:
        known = str(err).rsplit("versions.env has ", 1)[-1]
        raise ValueError(f"is not a track (versions.env has {known}; docs/tracks.md)") from None


# A track of versions.env: which image, and so which sglang (docs/tracks.md).
Track = Annotated[str, AfterValidator(_track)]


# An absolute path on a node (hostPath).
AbsPath = Annotated[str, Field(max_length=4096), AfterValidator(_abs_path)]

# The API key: sent as `Authorization: Bearer <key>`, so printable ASCII
# without spaces (a space or newline would break the header or the .env line).
_API_KEY = r"^[\x21-\x7e]+$"
ApiKey = Annotated[str, Field(min_length=1, max_length=4096, pattern=_API_KEY)]


# What a value of each pattern looks like, for the error message.
FORMS = {
    _K8S_NAME: "a DNS-1123 label: lowercase letters, digits and inner '-', at most 63 "
    "characters (e.g. sm12x)",
    _K8S_NETWORK: "a NetworkAttachmentDefinition name, or namespace/name (e.g. sm12x-roce)",
    _K8S_RESOURCE: "a resource name such as rdma/rdma_shared_device_a",
    _IMAGE.pattern: "an image reference such as ghcr.io/owner/sm12x:0.1.0 (lowercase "
    "repository; optional :tag and @sha256:digest)",
    _API_KEY: "printable ASCII without spaces (it is sent as `Authorization: Bearer <key>`)",
}


def _shown(value: Any) -> str:
    text = str(value)
    return repr(text if len(text) <= 80 else text[:77] + "...")


def parse(kind: Any, value: Any, where: str, hint: str = "") -> Any:
    """value as `kind`, or one UserError: "<where>=<value>: <what is wrong>[; hint]"."""
    try:
        return TypeAdapter(kind).validate_python(_int(value) if isinstance(value, str) else value)
    except ValidationError as exc:
        problem = describe(exc.errors()[0])
        raise UserError(
            f"{where}={_shown(value)}: {problem}" + (f"; {hint}" if hint else "")
        ) from None


def describe(error: Any) -> str:
    """pydantic's error said for a person ('should match pattern ...' is no help)."""
    if error["type"] == "string_pattern_mismatch":
        form = FORMS.get(error.get("ctx", {}).get("pattern", ""))
        return f"is not {form}" if form else "is not in the expected form"
    message = error["msg"].removeprefix("Value error, ")
    return message[0].lower() + message[1:]


def option_type(kind: Any, hint: str = "") -> Any:
    """An argparse `type=` for `kind`: argparse prints the one-line error."""
    import argparse

    def convert(text: str) -> Any:
        try:
            return parse(kind, text, "value", hint)
        except UserError as exc:
            raise argparse.ArgumentTypeError(exc.message.removeprefix("value=")) from None

    convert.__name__ = getattr(kind, "__name__", "value")
    return convert


def build_model(model: Any, values: dict[str, Any], flag: Any) -> Any:
    """`model(**values)`, or one UserError naming the option (flag(field)) at fault."""
    try:
        return model(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = [str(p) for p in error["loc"]]
        if not loc:  # a rule across options: its message names them
            raise UserError(describe(error)) from None
        value = values.get(loc[0])
        shown = f"={_shown(value)}" if isinstance(value, str) else ""
        raise UserError(f"{flag(loc[0])}{shown}: {describe(error)}") from None
