"""The settings model: every value a command reads from `.env`, the
environment or its own flags, each under one name.

A setting `model_dir` is SM12X_MODEL_DIR in `.env` and the environment and
--model-dir on the command line of each command that takes it as a flag.
Meta (below) says what it is for, which commands read it, its old names
(still read, with a warning) and how its default reads when it is derived
from something else (the recipe's port, the pinned image). The types are the
validators of sm12x.fields, so a bad value is refused with the same words
wherever it comes from.
"""

from __future__ import annotations

import contextvars
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from sm12x.apikey import read_key_file
from sm12x.fields import ApiKey, HostName, HostPort, ImageRef, K8sName, NodeRank, Port, Track
from sm12x.versions import default_track, load_versions, tracks

PREFIX = "SM12X_"
# Every command registered in sm12x.cli that reads settings.
COMMANDS = (
    "launch",
    "render",
    "healthcheck",
    "router",
    "exposure-check",
    "verify",
    "bench",
    "doctor",
    "tune",
    "qualify",
    "mock-server",
    "watch",
)
SERVERS = ("launch", "render")
# Clients may take the key as a flag (they are run by hand); servers never do:
# a key on a command line is readable by every user of the host (`ps`).
CLIENTS = ("verify", "bench", "watch")
# Every command that reads the API key (SM12X_API_KEY or SM12X_API_KEY_FILE).
KEY_READERS = (
    *SERVERS,
    "router",
    "exposure-check",
    "healthcheck",
    *CLIENTS,
    "qualify",
    "mock-server",
)
DEFAULT_PORT = 30000
# The router's ports: the one place they are written (sm12x.deploy reads them).
DEFAULT_ROUTER_PORT = 8000
DEFAULT_ROUTER_METRICS_PORT = 29000
# The layers of the Settings being built (sm12x.settings.sources.load sets them).
LAYERS: contextvars.ContextVar[tuple[PydanticBaseSettingsSource, ...]] = contextvars.ContextVar(
    "sm12x_settings_layers", default=()
)
ROUTER_POLICIES = ("cache_aware", "power_of_two", "round_robin", "random")


@dataclass(frozen=True)
class Meta:
    """What a setting is for; kept beside its field as Annotated metadata."""

    help: str
    commands: tuple[str, ...]
    # Commands that take it as a flag (None: every one in `commands`; () none).
    flag_commands: tuple[str, ...] | None = None
    old: tuple[str, ...] = ()  # old variable names, read with a warning
    old_flags: tuple[str, ...] = ()  # old flag spellings, read with a warning
    default: str | None = None  # the default in words, when it is not the field's
    metavar: str = "VALUE"
    path: bool = False  # a relative path is taken from the .env file's folder
    secret: bool = False  # never printed

    def flagged(self, command: str) -> bool:
        where = self.commands if self.flag_commands is None else self.flag_commands
        return command in where


def _words(value: Any) -> Any:
    """A list as .env writes it: separated by spaces or commas."""
    if isinstance(value, str):
        return tuple(w for w in re.split(r"[\s,]+", value) if w)
    return value


Words = Annotated[tuple[str, ...], BeforeValidator(_words)]


class Settings(BaseSettings):
    """One value per setting, from flags > environment > .env > default.

    Built by sm12x.settings.sources.load(), which supplies the layers (see
    settings_customise_sources) and records where each value came from.
    """

    model_config = SettingsConfigDict(case_sensitive=True, extra="forbid", frozen=True)

    recipe: Annotated[
        str,
        Meta(
            "the recipe: a name from recipes/ or a file; auto picks the one that fits "
            "the GPUs nvidia-smi lists",
            commands=("launch", "render", "doctor", "bench", "verify", "tune", "watch", "qualify"),
            old=("RECIPE",),
            metavar="NAME",
        ),
    ] = "auto"
    configuration: Annotated[
        Literal["auto", "baseline", "throughput"],
        Meta(
            "which configuration of the rig runs when SM12X_RECIPE names a rig (its baseline "
            "recipe): baseline; throughput (refused until `sm12x tune` made its SPS table "
            "for this rig, image, depth and layout); auto: throughput when that table "
            "exists, else the baseline with a notice; docs/tune.md",
            commands=("launch", "render"),
            metavar="KIND",
        ),
    ] = "auto"
    model_dir: Annotated[
        str | None,
        Meta(
            "the checkpoint folder (compose mounts it at /model; launch and render "
            "serve it; doctor checks it; bench and tune read its tokenizer)",
            commands=("launch", "render", "doctor", "bench", "tune", "qualify"),
            old=("SM12X_MODEL_PATH",),
            old_flags=("--model-path",),
            default="none: the Hub id at the recipe's revision",
            metavar="DIR",
            path=True,
        ),
    ] = None
    node_rank: Annotated[
        NodeRank | None,
        Meta(
            "multi-node: this node's rank (0 on the head)",
            commands=SERVERS,
            old=("NODE_RANK",),
            default="none (a multi-node launch refuses to start without it)",
            metavar="N",
        ),
    ] = None
    head_addr: Annotated[
        HostPort | None,
        Meta(
            "multi-node: the head node's address on the RoCE link, the same on every node",
            commands=(*SERVERS, "doctor"),
            old=("HEAD_ADDR",),
            default="none (a multi-node launch refuses to start without it)",
            metavar="ADDR",
        ),
    ] = None
    bind: Annotated[
        HostName,
        Meta(
            "where the API listens on the host (compose publishes the port there); "
            "beyond loopback it needs SM12X_API_KEY",
            commands=(
                *SERVERS,
                "exposure-check",
                "healthcheck",
                "verify",
                "bench",
                "tune",
                "qualify",
                "mock-server",
            ),
            metavar="ADDR",
        ),
    ] = "127.0.0.1"
    host: Annotated[
        HostName | None,
        Meta(
            "the address sglang itself binds, when it is not SM12X_BIND (compose sets "
            "0.0.0.0 inside a bridged container)",
            commands=(*SERVERS, "healthcheck", "mock-server"),
            default="SM12X_BIND",
            metavar="ADDR",
        ),
    ] = None
    port: Annotated[
        Port | None,
        Meta(
            "the API's port on the host",
            commands=(*SERVERS, "healthcheck", "verify", "bench", "tune", "qualify", "mock-server"),
            default=f"the recipe's serve.port ({DEFAULT_PORT})",
            metavar="PORT",
        ),
    ] = None
    api_key: Annotated[
        ApiKey | None,
        Meta(
            "the key clients send (Authorization: Bearer); empty: no key, allowed only "
            "on 127.0.0.1",
            commands=KEY_READERS,
            flag_commands=CLIENTS,
            default="none",
            metavar="KEY",
            secret=True,
        ),
    ] = None
    api_key_file: Annotated[
        str | None,
        Meta(
            "a file holding the key instead (a Kubernetes Secret mounted read-only)",
            commands=KEY_READERS,
            default="none",
            metavar="FILE",
            path=True,
        ),
    ] = None
    api_key_set: Annotated[
        bool,
        Meta(
            "1: a key is set (compose gives the exposure check this instead of SM12X_API_KEY: it only "
            "needs to know that there is one, and `docker compose config` then shows no key)",
            commands=("exposure-check",),
            metavar="1",
        ),
    ] = False
    insecure_no_api_key: Annotated[
        bool,
        Meta(
            "1: serve beyond loopback without a key anyway (a closed lab network, a "
            "proxy that checks keys)",
            commands=("launch", "router", "exposure-check", "mock-server"),
            metavar="1",
        ),
    ] = False
    cache_dir: Annotated[
        str | None,
        Meta(
            "where the JIT and compile caches and the tuned SPS tables go (compose: the cache "
            "volume at /cache)",
            commands=(*SERVERS, "tune", "qualify"),
            default="none: each tool's own default",
            metavar="DIR",
            path=True,
        ),
    ] = None
    track: Annotated[
        Track | None,
        Meta(
            "the track: which sglang, and so which image (compose runs the track's image; "
            "launch refuses an sglang that is not the track's; render writes for it; "
            "doctor and bench use its image); "
            + ", ".join(f"{t} (sglang {load_versions(t)['SGLANG_VERSION']})" for t in tracks())
            + "; docs/tracks.md",
            commands=("launch", "render", "doctor", "bench", "tune", "qualify"),
            default=f"SM12X_DEFAULT_TRACK in versions.env ({default_track()})",
            metavar="TRACK",
        ),
    ] = None
    image: Annotated[
        ImageRef | None,
        Meta(
            "the sm12x image (compose runs it; doctor looks for it; bench and tune run "
            "sglang's benchmark and profiler in it when this machine has no sglang; render "
            "--k8s writes it)",
            commands=("render", "doctor", "bench", "tune", "qualify"),
            default="the track's: SM12X_IMAGE_REPO:SM12X_VERSION-<track> in versions.env",
            metavar="REF",
        ),
    ] = None
    docker: Annotated[
        str,
        Meta(
            "the docker command (verify --boot, bench and tune run it)",
            commands=("verify", "bench", "tune", "qualify"),
            metavar="PATH",
        ),
    ] = "docker"
    router_workers: Annotated[
        Words,
        Meta(
            "the rigs' URLs, separated by spaces (each rig runs sm12x launch)",
            commands=("router",),
            default="none",
            metavar="URL ...",
        ),
    ] = ()
    router_selector: Annotated[
        Words,
        Meta(
            "Kubernetes discovery instead: key=value labels of the rig pods",
            commands=("router",),
            default="none",
            metavar="LABEL ...",
        ),
    ] = ()
    router_namespace: Annotated[
        K8sName | None,
        Meta(
            "Kubernetes discovery: the one namespace to watch (a namespaced Role is enough)",
            commands=("router",),
            default="none: every namespace (cluster-wide rights)",
            metavar="NAME",
        ),
    ] = None
    router_discovery_port: Annotated[
        Port,
        Meta("Kubernetes discovery: the rigs' port in a pod", commands=("router",), metavar="PORT"),
    ] = DEFAULT_PORT
    router_policy: Annotated[
        Literal["cache_aware", "power_of_two", "round_robin", "random"],
        Meta(
            "how the router spreads requests over the rigs: cache_aware, power_of_two, "
            "round_robin or random",
            commands=("router",),
            metavar="POLICY",
        ),
    ] = "cache_aware"
    router_bind: Annotated[
        HostName,
        Meta(
            "where clients reach the router; beyond loopback it needs SM12X_API_KEY",
            commands=("router", "exposure-check", "healthcheck"),
            metavar="ADDR",
        ),
    ] = "127.0.0.1"
    router_port: Annotated[
        Port, Meta("the router's port", commands=("router", "healthcheck"), metavar="PORT")
    ] = DEFAULT_ROUTER_PORT
    router_metrics_bind: Annotated[
        HostName,
        Meta(
            "where the router's Prometheus metrics listen",
            commands=("router",),
            old=("SM12X_ROUTER_METRICS_HOST",),
            metavar="ADDR",
        ),
    ] = "127.0.0.1"
    router_metrics_port: Annotated[
        Port, Meta("the router's metrics port", commands=("router",), metavar="PORT")
    ] = DEFAULT_ROUTER_METRICS_PORT
    grafana_bind: Annotated[
        HostName,
        Meta(
            "where the monitoring profile's Grafana listens (port 3000); beyond loopback "
            "it needs SM12X_GRAFANA_ADMIN_PASSWORD in .env",
            commands=("exposure-check",),
            metavar="ADDR",
        ),
    ] = "127.0.0.1"
    grafana_admin_password_set: Annotated[
        bool,
        Meta(
            "1: Grafana's admin password is set (compose gives the exposure check this, "
            "never the password)",
            commands=("exposure-check",),
            metavar="1",
        ),
    ] = False

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Flags arrive as init arguments; the environment and .env layers are
        # sm12x.settings.sources.Layer, which know the old names and where
        # each value came from (sources.load() sets them for one build).
        # pydantic-settings' own env and .env readers are left out: they
        # would read each variable a second time.
        return (init_settings, *LAYERS.get())

    # --- derived values ---------------------------------------------------------

    @property
    def track_name(self) -> str:
        """SM12X_TRACK, else versions.env's default track."""
        return self.track or default_track()

    def image_ref(self) -> str:
        """SM12X_IMAGE, else the track's image (versions.env)."""
        return self.image or load_versions(self.track_name)["SM12X_IMAGE"]

    @property
    def listen_host(self) -> str:
        """The address sglang binds: SM12X_HOST, else SM12X_BIND."""
        return self.host or self.bind

    def port_or(self, default: int = DEFAULT_PORT) -> int:
        return self.port if self.port is not None else default

    def client_host(self) -> str:
        """Where a client on this machine reaches the API."""
        return "127.0.0.1" if self.bind in ("0.0.0.0", "::") else self.bind

    def key(self) -> str | None:
        """The API key: SM12X_API_KEY, else what the file SM12X_API_KEY_FILE holds."""
        if self.api_key:
            return self.api_key
        if self.api_key_file:
            return read_key_file(self.api_key_file)
        return None

    def base_url(self) -> str:
        host = self.client_host()
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port_or()}"


def meta(name: str) -> Meta:
    for item in Settings.model_fields[name].metadata:
        if isinstance(item, Meta):
            return item
    raise KeyError(name)


def env_name(name: str) -> str:
    return PREFIX + name.upper()


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def names() -> list[str]:
    return list(Settings.model_fields)


def for_command(command: str) -> list[str]:
    """The settings a command reads, in model order."""
    return [n for n in names() if command in meta(n).commands]


def default_text(name: str) -> str:
    info = meta(name)
    if info.default is not None:
        return info.default
    value = Settings.model_fields[name].default
    if isinstance(value, bool):
        return "off" if not value else "on"
    return str(value)
