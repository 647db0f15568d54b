"""What was benchmarked: the server's settings, the image, versions and GPUs.

Each value comes from the most direct place that can know it, and the
result says which (`environment.sources`):

1. the server itself: GET /server_info gives sglang's version and every
   server argument (tp_size, speculative_algorithm, ...);
2. the sm12x container on this machine (`docker compose` project `sm12x`,
   or --container NAME): `docker inspect` gives the image reference, id and
   registry digest, and `docker exec` runs a small probe inside it for the
   flashinfer/torch versions and nvidia-smi's GPU list;
3. this machine, when bench runs inside the image (`docker compose exec`)
   or against a server on a loopback address: the same probe, run locally;
4. flags (--image, --image-digest, --gpu) override all of it.

A value no source can know stays null with the reason in `sources`: a
benchmark of a remote server from a laptop cannot see the server's GPUs.
Every command and request here has a timeout.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from sm12x import bounded, proc
from sm12x.bench.result import Environment, Image
from sm12x.http import transport
from sm12x.http.transport import Limits, auth_hint
from sm12x.launch import gpus as gpu_query

COMPOSE_PROJECT = "sm12x"
# Server arguments (from /server_info) kept in the result: the ones that
# shape throughput and latency, and the ones that say which checkpoint ran.
SERVER_KEYS = (
    "version",
    "model_path",
    "served_model_name",
    "revision",
    "tp_size",
    "dp_size",
    "ep_size",
    "pp_size",
    "nnodes",
    "enable_dp_attention",
    "speculative_algorithm",
    "speculative_dspark_block_size",
    "speculative_num_draft_tokens",
    "speculative_dspark_sps_table_path",
    "kv_cache_dtype",
    "moe_runner_backend",
    "attention_backend",
    "mem_fraction_static",
    "max_running_requests",
    "chunked_prefill_size",
    "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode",
    "disable_custom_all_reduce",
    "context_length",
)

# Run inside the image (docker exec) or locally: versions from package
# metadata (no heavy import), GPUs from nvidia-smi. Prints one JSON object.
PROBE = r"""
import json, subprocess
from importlib import metadata
out = {}
for key, dist in (("sglang", "sglang"), ("flashinfer", "flashinfer-python"), ("torch", "torch")):
    try:
        out[key] = metadata.version(dist)
    except Exception:
        out[key] = None
try:
    smi = subprocess.run(QUERY, capture_output=True, text=True, timeout=30)
    out["nvidia_smi"] = smi.stdout if smi.returncode == 0 else None
    out["nvidia_smi_error"] = None if smi.returncode == 0 else (smi.stderr or smi.stdout)[-300:]
except Exception as exc:
    out["nvidia_smi"] = None
    out["nvidia_smi_error"] = str(exc)[-300:]
print(json.dumps(out))
""".replace("QUERY", repr(gpu_query.QUERY))


def api_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def limits(timeout: float) -> Limits:
    """Bench's own requests: --request-timeout for the whole request and as the
    stall limit, 8 MiB at most (sglang's /server_info is a few KiB)."""
    return Limits(timeout=timeout, stall=timeout, connect=min(timeout, 10.0))


def request_json(
    method: str, url: str, api_key: str | None, timeout: float, body: Any = None
) -> tuple[Any | None, str | None]:
    """(answer, None) or (None, why not), the request bounded (sm12x/http/transport.py):
    a server that trickles, never ends its body or sends gigabytes cannot hold
    bench past the timeout or fill its memory."""
    where = f"{method} {urlsplit(url).path}"
    with transport.client(limits(timeout), headers=api_headers(api_key)) as http:
        try:
            response = http.request(method, url, json=body)
        except httpx.HTTPError as exc:
            return None, str(exc) if str(exc).startswith(
                where
            ) else f"{where}: {str(exc) or type(exc).__name__}"
    if response.status_code != 200:
        hint = auth_hint(response.status_code, bool(api_key))
        return None, f"{where}: {hint or f'HTTP {response.status_code}'}"
    try:
        return bounded.loads(response.content), None
    except bounded.TooBig as exc:  # nested to blow the stack (a hostile server)
        return None, f"{where}: the answer is not a reply sglang sends ({exc})"
    except ValueError:  # not JSON, or not UTF-8
        return None, f"{where}: the answer is not JSON"


def get_json(url: str, api_key: str | None, timeout: float) -> tuple[Any | None, str | None]:
    return request_json("GET", url, api_key, timeout)


def server_info(
    base_url: str, api_key: str | None, timeout: float
) -> tuple[dict | None, str | None]:
    problems = []
    for path in ("/server_info", "/get_server_info"):
        data, problem = get_json(base_url + path, api_key, timeout)
        if isinstance(data, dict) and ("version" in data or "tp_size" in data):
            return data, None
        problems.append(problem or f"{base_url}{path}: not sglang's server info")
    return None, "; ".join(problems)


def is_mock(info: Mapping[str, Any] | None) -> bool:
    """Whether /server_info says the server is `sm12x mock-server` (its sm12x_mock:
    JSON true only). bench then picks the OpenAI backend and, from a Python without
    sglang, the wheel's client; tune the wheel's profiler."""
    return isinstance(info, Mapping) and info.get("sm12x_mock") is True


def _shown(value: object, api_key: str | None = None) -> str:
    """A server's value for a message: bounded, and never the key."""
    text = repr(value)[:80]
    return text.replace(api_key, "<the API key>") if api_key else text


def served_release(info: Mapping[str, Any] | None, api_key: str | None = None) -> str:
    """The sglang release /server_info names (`version`), only when it is one a
    track pins (versions.env): the one check bench and tune make of the server's
    word before it picks a wheel, a key or a log line. UserError otherwise."""
    from sm12x.errors import UserError
    from sm12x.versions import load_versions, tracks

    value = info.get("version") if isinstance(info, Mapping) else None
    pinned = sorted({load_versions(t)["SGLANG_VERSION"] for t in tracks()})
    if isinstance(value, str) and value in pinned:
        return value
    raise UserError(
        f"the server's /server_info names sglang {_shown(value, api_key)}, not a release "
        f"sm12x pins ({', '.join(pinned)}): point --url at an sm12x server, or run a pinned sglang"
    )


def served_recipe(info: Mapping[str, Any] | None, api_key: str | None = None) -> str | None:
    """The shipped recipe sm12x mock-server says it stands in for (`sm12x_recipe`),
    checked like served_release: only the name of a recipe sm12x ships, never a
    path. None when the server says none."""
    from sm12x.errors import UserError
    from sm12x.recipe import load_all

    value = info.get("sm12x_recipe") if isinstance(info, Mapping) else None
    if value is None:
        return None
    names = {r.name for r in load_all()}
    if isinstance(value, str) and value in names:
        return value
    raise UserError(
        f"the server's /server_info names recipe {_shown(value, api_key)}, which sm12x does "
        "not ship: pass --recipe NAME"
    )


def server_summary(info: Mapping[str, Any] | None) -> dict[str, Any]:
    if not info:
        return {}
    info = info["decode"][0] if isinstance(info.get("decode"), list) and info["decode"] else info
    return {key: info[key] for key in SERVER_KEYS if key in info}


def is_loopback(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Where compose and the Kubernetes manifests mount the checkpoint in every service.
SERVICE_MODEL_DIR = "/model"


def in_container(environ: Mapping[str, str] | None = None) -> bool:
    """True inside an sm12x service container (`docker compose exec`): compose
    and the manifests set SM12X_MODEL_DIR=/model in every service (images
    before the settings were unified set SM12X_MODEL_PATH). Not /.dockerenv: a
    dev container or CI job on the server's host is not the server's image."""
    environ = os.environ if environ is None else environ
    return environ.get("SM12X_MODEL_DIR") == SERVICE_MODEL_DIR or bool(
        environ.get("SM12X_MODEL_PATH")
    )


# --- commands -----------------------------------------------------------------


def run(argv: Sequence[str], timeout: float) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why it failed)."""
    done = proc.run(argv, timeout)  # process group killed at the limit, output capped
    if done.error:
        return None, done.error
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return None, f"`{' '.join(argv[:3])} ...` exit {done.returncode}: " + (
            said[-1] if said else "no output"
        )
    return done.stdout, None


def docker_binary(environ: Mapping[str, str] | None = None) -> str | None:
    environ = os.environ if environ is None else environ
    return environ.get("SM12X_DOCKER") or shutil.which("docker", path=environ.get("PATH"))


def find_container(docker: str, timeout: float) -> tuple[str | None, str]:
    """The sm12x compose container serving on this machine, and how it was found."""
    out, problem = run(
        [
            docker, "ps",
            "--filter", f"label=com.docker.compose.project={COMPOSE_PROJECT}",
            "--format", '{{.Names}}\t{{.Label "com.docker.compose.service"}}',
        ],
        timeout,
    )  # fmt: skip
    if out is None:
        return None, f"docker ps failed ({problem})"
    rows = [line.split("\t") for line in out.splitlines() if line.strip()]
    # The second Spark node serves no API; the head (node0) is the one to ask.
    serving = [row[0] for row in rows if not (len(row) > 1 and row[1].endswith("-node1"))]
    if len(serving) == 1:
        return serving[0], f"compose project {COMPOSE_PROJECT}"
    if not serving:
        return None, f"no running container of compose project {COMPOSE_PROJECT} here"
    return None, f"several {COMPOSE_PROJECT} containers ({', '.join(serving)}): pass --container"


@dataclass
class ContainerFacts:
    name: str
    image: Image
    probe: dict[str, Any] | None
    problems: list[str] = field(default_factory=list)


def inspect_container(docker: str, name: str, timeout: float) -> ContainerFacts:
    problems: list[str] = []
    ref = image_id = digest = version = None
    out, problem = run([docker, "inspect", "--format", "{{json .}}", name], timeout)
    if out is not None:
        try:
            data = json.loads(out)
            data = data[0] if isinstance(data, list) else data
            ref = (data.get("Config") or {}).get("Image")
            image_id = data.get("Image")
            labels = (data.get("Config") or {}).get("Labels") or {}
            version = labels.get("org.opencontainers.image.version")
        except (ValueError, AttributeError, IndexError):
            problems.append(f"docker inspect {name}: unreadable answer")
    else:
        problems.append(problem or "docker inspect failed")
    if image_id:
        out, problem = run(
            [docker, "image", "inspect", "--format", "{{json .RepoDigests}}", image_id], timeout
        )
        if out is not None:
            try:
                digests = json.loads(out) or []
            except ValueError:
                digests = []
            repo = ref.split("@")[0].rsplit(":", 1)[0] if ref else None
            matching = [d for d in digests if repo and d.startswith(repo + "@")]
            digest = (matching or digests or [None])[0]
            if digest is None:
                problems.append(
                    f"image {ref or image_id} has no registry digest (built locally, not pulled)"
                )
        else:
            problems.append(problem or "docker image inspect failed")
    if version is None and ref and "@" not in ref and ":" in ref.rsplit("/", 1)[-1]:
        version = ref.rsplit(":", 1)[1]
    out, problem = run([docker, "exec", name, "python3", "-c", PROBE], timeout)
    probe = _parse_probe(out) if out is not None else None
    if probe is None:
        problems.append(f"probe inside {name}: {problem or 'unreadable answer'}")
    return ContainerFacts(
        name, Image(ref=ref, id=image_id, digest=digest, version=version), probe, problems
    )


def _parse_probe(out: str | None) -> dict[str, Any] | None:
    if not out:
        return None
    try:
        data = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return data if isinstance(data, dict) else None


def local_probe(
    python: str | Sequence[str], timeout: float
) -> tuple[dict[str, Any] | None, str | None]:
    """The probe run by `python` (a path, or a command prefix such as a
    `docker run ... IMAGE` that runs the image's python3)."""
    prefix = [python] if isinstance(python, str) else list(python)
    out, problem = run([*prefix, "-c", PROBE], timeout)
    probe = _parse_probe(out)
    return probe, (None if probe else problem or "unreadable probe answer")


# --- putting it together ------------------------------------------------------------


@dataclass
class Overrides:
    image: str | None = None
    image_digest: str | None = None
    gpus: list[str] = field(default_factory=list)
    container: str = "auto"  # auto | none | NAME
    image_source: str = "--image"  # where `image` came from (a flag, SM12X_IMAGE in .env)


@dataclass
class Facts:
    environment: Environment
    server: dict[str, Any]
    client_sglang: str | None
    gpus: list[gpu_query.Gpu]
    notes: list[str]


def collect(
    base_url: str,
    info: Mapping[str, Any] | None,
    python: str,
    overrides: Overrides,
    *,
    timeout: float = 30.0,
    environ: Mapping[str, str] | None = None,
    inside: bool | None = None,
    docker: str | None = None,
) -> Facts:
    """What bench can learn of the server's image, versions and GPUs. docker:
    the docker command (the settings' SM12X_DOCKER), else found on PATH."""
    environ = os.environ if environ is None else environ
    inside = in_container(environ) if inside is None else inside
    notes: list[str] = []
    sources: dict[str, str] = {}
    image = Image(ref=None, id=None, digest=None, version=None)
    versions: dict[str, str | None] = {"sglang": None, "flashinfer": None, "torch": None}
    smi_text: str | None = None
    smi_source: str | None = None

    summary = server_summary(info)
    if summary.get("version"):
        versions["sglang"] = str(summary["version"])
        sources["sglang_version"] = "server /server_info"

    # The container on this machine.
    facts = None
    if overrides.container != "none" and not inside:
        docker = docker_binary(environ) if docker is None else shutil.which(docker)
        if docker is None:
            name, how = None, "docker is not installed here"
        elif overrides.container == "auto":
            name, how = find_container(docker, timeout)
        else:
            name, how = overrides.container, "--container"
        if name and docker:
            facts = inspect_container(docker, name, timeout)
            notes.extend(facts.problems)
            image = facts.image
            for key in ("ref", "id", "digest", "version"):
                if getattr(image, key):
                    sources[f"image.{key}"] = f"docker inspect {name}"
            if facts.probe:
                for key in versions:
                    if versions[key] is None and facts.probe.get(key):
                        versions[key] = facts.probe[key]
                        sources[f"{key}_version"] = f"inside container {name}"
                if facts.probe.get("nvidia_smi"):
                    smi_text, smi_source = facts.probe["nvidia_smi"], f"nvidia-smi in {name}"
        elif overrides.container != "auto" or is_loopback(base_url):
            notes.append(f"no container inspected: {how}")

    # This machine: the client's own versions, and the server's when inside the image.
    probe, problem = local_probe(python, timeout)
    client_sglang = probe.get("sglang") if probe else None
    if probe is None:
        notes.append(f"local probe: {problem}")
    elif inside:
        for key in versions:
            if versions[key] is None and probe.get(key):
                versions[key] = probe[key]
                sources[f"{key}_version"] = "this machine (inside the image)"
        if environ.get("SM12X_IMAGE") and image.ref is None:
            image = image.model_copy(update={"ref": environ["SM12X_IMAGE"]})
            sources["image.ref"] = "SM12X_IMAGE in the container"
    if smi_text is None and probe and probe.get("nvidia_smi") and (inside or is_loopback(base_url)):
        smi_text = probe["nvidia_smi"]
        smi_source = "nvidia-smi on this machine (the server is local)"

    found: list[gpu_query.Gpu] = []
    if smi_text:
        try:
            found = gpu_query.parse_nvidia_smi(smi_text)
            sources["gpus"] = smi_source or "nvidia-smi"
        except gpu_query.GpuQueryError as exc:
            notes.append(str(exc))
    gpu_names = [g.name for g in found]
    if overrides.gpus:
        gpu_names = list(overrides.gpus)
        sources["gpus"] = "--gpu"
    if not gpu_names:
        sources.setdefault(
            "gpus",
            "unknown: the server is not on this machine; pass --gpu NAME (once per GPU)",
        )
    if overrides.image:
        image = image.model_copy(update={"ref": overrides.image})
        sources["image.ref"] = overrides.image_source
        if image.version is None and ":" in overrides.image.rsplit("/", 1)[-1]:
            image = image.model_copy(update={"version": overrides.image.rsplit(":", 1)[1]})
    if overrides.image_digest:
        image = image.model_copy(update={"digest": overrides.image_digest})
        sources["image.digest"] = "--image-digest"
    for key in ("flashinfer", "torch"):
        if versions[key] is None:
            sources.setdefault(
                f"{key}_version",
                "unknown: run bench on the server's machine (it asks the container) or inside "
                "the image",
            )
    if image.ref is None and image.digest is None:
        sources.setdefault(
            "image.ref", "unknown: no sm12x container found here; pass --image/--image-digest"
        )
    caps = sorted({g.compute_capability for g in found})
    drivers = sorted({g.driver for g in found})
    environment = Environment(
        image=image,
        sglang_version=versions["sglang"],
        flashinfer_version=versions["flashinfer"],
        torch_version=versions["torch"],
        gpus=gpu_names,
        compute_capability=caps[0] if len(caps) == 1 else (", ".join(caps) or None),
        gpu_driver=drivers[0] if len(drivers) == 1 else (", ".join(drivers) or None),
        sources=sources,
    )
    return Facts(environment, summary, client_sglang, found, notes)


def python_version() -> str:
    return ".".join(str(p) for p in sys.version_info[:3])
