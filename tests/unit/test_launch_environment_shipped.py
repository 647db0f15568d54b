"""The launch environment's allowlist refuses nothing the shipped deployments set.

Each shipped environment is a dry run of `sm12x launch` inside it: the image's
ENV over its base's, every compose profile's `environment:` with
.env.example's values, and each Kubernetes manifest's env with the
variables the kubelet injects (only the API server's service links, since the
manifests set enableServiceLinks: false).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sm12x import launch_env as environment
from sm12x.recipe import load_recipe
from tests.support.cli import ROOT, assert_one_clear_error, run_sm12x

# The base image's ENV, as read from its sources: nvidia/cuda's runtime and
# devel layers (PATH, LD_LIBRARY_PATH, the NVIDIA_* container-runtime
# variables, the NV_* version records, NCCL_VERSION) and sglang's
# docker/Dockerfile (DEBIAN_FRONTEND, CUDA_HOME, GDRCOPY_HOME, NVSHMEM_DIR);
# docs/image.md "The real bases". Docker adds HOSTNAME and HOME.
BASE_ENV = {
    "PATH": "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/bin:/bin",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
    "LIBRARY_PATH": "/usr/local/cuda/lib64/stubs",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "NVIDIA_REQUIRE_CUDA": "cuda>=13.0",
    "NVARCH": "x86_64",
    "NV_CUDA_CUDART_VERSION": "13.0.48-1",
    "NV_LIBNCCL_PACKAGE_VERSION": "2.27.7-1",
    "NCCL_VERSION": "2.27.7-1",
    "CUDA_VERSION": "13.0.0",
    "DEBIAN_FRONTEND": "noninteractive",
    "CUDA_HOME": "/usr/local/cuda",
    "GDRCOPY_HOME": "/usr/src/gdrdrv-2.4.4/",
    "NVSHMEM_DIR": "/sgl-workspace/nvshmem/install",
    "HOSTNAME": "3f2a9c1d7e4b",
}
# What the kubelet injects with enableServiceLinks: false: the API server's links.
KUBELET_ENV = {
    "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    "KUBERNETES_SERVICE_PORT": "443",
    "KUBERNETES_SERVICE_PORT_HTTPS": "443",
    "KUBERNETES_PORT": "tcp://10.96.0.1:443",
    "KUBERNETES_PORT_443_TCP": "tcp://10.96.0.1:443",
    "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
    "KUBERNETES_PORT_443_TCP_PORT": "443",
    "KUBERNETES_PORT_443_TCP_ADDR": "10.96.0.1",
}

# What a LeaderWorkerSet's controller adds to each pod (the multi-node manifests).
LWS_ENV = {"LWS_LEADER_ADDRESS": "sm12x-0.sm12x", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0"}


def image_env(track: str) -> dict[str, str]:
    """The Dockerfile's ENV over the base's (SM12X_TRACK from the build argument)."""
    text = (ROOT / "Dockerfile").read_text()
    block = re.search(r"^ENV (.*?)(?=\n\n)", text, re.M | re.S)
    assert block is not None
    env = dict(BASE_ENV)
    for name, value in re.findall(r"(\w+)=(\S+)", block.group(1).replace("\\\n", " ")):
        env[name] = value.replace("${SM12X_TRACK}", track)
    assert env["SM12X_CACHE_DIR"] == "/cache"
    return env


def manifests() -> list[Path]:
    return sorted(p for p in (ROOT / "deploy" / "k8s").glob("*.yaml") if p.stem != "namespace")


def _containers(path: Path) -> list[tuple[dict, dict]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    found = []
    for doc in docs:
        for node in _walk(doc):
            if isinstance(node, dict) and "containers" in node:
                found += [(node, c) for c in node["containers"]]
    return found


def _walk(node):
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


@pytest.mark.parametrize("path", manifests(), ids=lambda p: p.stem)
def test_each_manifest_turns_service_links_off_and_its_env_passes(path, tmp_path):
    pods = _containers(path)
    assert pods, path
    for pod, container in pods:
        assert pod.get("enableServiceLinks") is False, f"{path.name}: {container['name']}"
        names = {e["name"] for e in container.get("env", [])}
        track = "current" if container["image"].endswith("-current") else "pinned"
        env = {**image_env(track), **KUBELET_ENV, **LWS_ENV, **{n: "x" for n in names}}
        assert environment.refused(env, ()) == [], path.name
        if container.get("command", [None, None])[:2] != ["sm12x", "launch"]:
            continue
        # A real dry run inside it (the key file a Secret mounts, here a file).
        key = tmp_path / "api-key"
        key.write_text("sk-shipped-0123456789\n")
        values = {e["name"]: str(e.get("value", "")) for e in container["env"] if "value" in e}
        values = {
            k: re.sub(r"\$\((\w+)\)", lambda m: LWS_ENV[m.group(1)], v)
            for k, v in values.items()
            if v
        }
        values["SM12X_API_KEY_FILE"] = str(key)
        values.pop("SM12X_NODE_RANK", None)
        run_env = {**image_env(track), **KUBELET_ENV, **LWS_ENV, **values}
        run_env["SM12X_ENV_FILE"] = "/dev/null"
        run_env.setdefault("SM12X_NODE_RANK", "0")
        run_env.setdefault("SM12X_HEAD_ADDR", "10.0.0.1")
        done = run_sm12x("launch", "--dry-run", env=run_env)
        assert done.returncode == 0, f"{path.name}: {done.stderr}"


def test_a_service_link_sglang_reads_would_be_refused():
    """Why the manifests turn links off: a Service named sglang injects SGLANG_PORT."""
    links = {"SGLANG_PORT": "tcp://10.96.3.4:30000", "SGLANG_SERVICE_HOST": "10.96.3.4"}
    env = {**image_env("pinned"), **links, "SM12X_RECIPE": "rtx-pro-6000-tp4"}
    assert environment.refused(env, ()) == ["SGLANG_PORT", "SGLANG_SERVICE_HOST"]
    assert_one_clear_error(run_sm12x("launch", "--dry-run", env=env), "SGLANG_PORT")


def env_example() -> dict[str, str]:
    values = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        match = re.match(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if match:
            values[match.group(1)] = match.group(2).strip()
    return values


def _interpolate(value: str, values: dict[str, str]) -> str:
    def one(match: re.Match) -> str:
        name, op, default = match.group(1), match.group(2) or "", match.group(3) or ""
        have = values.get(name, "")
        if op == ":-":
            return have or default
        if op == ":+":
            return default if have else ""
        return have

    return re.sub(r"\$\{(\w+)(:-|:\+)?([^}]*)\}", one, value)


def compose_profiles() -> dict[str, dict[str, str]]:
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    values = env_example()
    out = {}
    for name, service in data["services"].items():
        command = service.get("command") or []
        entry = service.get("entrypoint") or []
        if "router" in name or "grafana" in name or "prometheus" in name:
            continue
        if name == "exposure-check" or "healthcheck" in str(entry + command):
            continue
        env = service.get("environment") or {}
        out[name] = {k: _interpolate(str(v), values) for k, v in env.items()}
    return out


@pytest.mark.parametrize("profile", sorted(compose_profiles()))
def test_each_compose_profile_with_env_example_passes(profile):
    env = compose_profiles()[profile]
    recipe = env.get("SM12X_RECIPE")
    given = set(load_recipe(recipe).env) if recipe and recipe != "auto" else set()
    full = {**image_env(env.get("SM12X_TRACK") or "pinned"), **env}
    assert environment.refused(full, given) == [], profile


def test_every_allowlist_entry_says_why():
    for table in (environment.ALLOWLIST, environment.DROPPED):
        for name, why in table.items():
            assert re.fullmatch(r"[A-Z_][A-Z0-9_]*\*?", name) and len(why) > 10, name
    # The allowlist passes nothing of sglang's own namespace but the image's caches.
    assert [n for n in environment.ALLOWLIST if n.startswith(("SGLANG", "SGL_"))] == [
        "SGLANG_DG_CACHE_DIR",
        "SGLANG_JIT_CACHE_DIR",
    ]
