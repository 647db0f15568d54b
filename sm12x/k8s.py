"""Kubernetes manifests from the recipes (`sm12x render --k8s`, deploy/k8s/).

- A Deployment per single-node recipe; a LeaderWorkerSet (the LWS API,
  leaderworkerset.x-k8s.io/v1) for a multi-node one, one group = one model
  replica: the leader is node 0 and serves HTTP, the workers are nodes 1..N-1.
- The router: sglang-router finding the rigs by label (Kubernetes service
  discovery), its ServiceAccount and namespaced Role, a Deployment and a
  Service, the one endpoint clients use.

Launch arguments are not written here. Like every compose service, each pod
runs the image's `sm12x launch` with RECIPE=<name>, which renders the sglang
command from the recipe inside the container (sm12x.launch.render.build_launch).
So a manifest cannot drift from the recipe the image carries, and a recipe
change needs a new image, not new manifests. What Kubernetes itself must know
is taken from the recipe here: GPUs per node, node count, CPU architecture,
host networking, devices, capabilities, the port, the site variables; the
tests prove each equal to the recipe. The router pod runs `sm12x router`, the
compose router's entrypoint (sm12x.router).

Probes are compose's healthcheck (`sm12x healthcheck`: one generated token),
with its timings: the startupProbe allows the same 2 h start period, the
livenessProbe the same interval, timeout and retries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sm12x.errors import UserError
from sm12x.recipe import Recipe, load_all, load_recipe
from sm12x.router import DEFAULT_METRICS_PORT, DEFAULT_PORT
from sm12x.versions import load_versions

# The Kubernetes version the manifests are validated against (tests, with
# kubernetes-validate in strict mode). Nothing newer is used.
K8S_VERSION = "1.32.0"

APP = "sm12x"
NAME = "app.kubernetes.io/name"
INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
# Which pods serve HTTP: the router discovers exactly these.
ROLE = "sm12x.io/role"
SERVER_LABELS = {NAME: APP, ROLE: "server"}

# The label LeaderWorkerSet gives each pod of a group: its index, 0 on the leader.
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
WORKER_INDEX_FIELD = f"metadata.labels['{WORKER_INDEX_LABEL}']"

# Names that `sm12x render --k8s` takes besides recipe names.
ROUTER = "router"
ALL = "all"


@dataclass(frozen=True)
class Health:
    """A compose healthcheck's timings, in seconds."""

    interval: int
    timeout: int
    retries: int
    start_period: int


# compose.yaml's healthchecks (tests/integration/test_k8s_compose.py proves it).
RIG_HEALTH = Health(interval=60, timeout=60, retries=5, start_period=7200)
ROUTER_HEALTH = Health(interval=30, timeout=60, retries=3, start_period=7200)
# compose's stop_grace_period for the rigs: sglang drains and frees GPU memory.
RIG_STOP_GRACE_S = 120
# sglang-router waits up to 180 s for in-flight requests on SIGTERM.
ROUTER_STOP_GRACE_S = 180

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclass(frozen=True)
class K8sOptions:
    namespace: str = "sm12x"
    image: str = field(default_factory=lambda: load_versions()["SM12X_IMAGE"])
    # The checkpoint on each GPU node (as SM12X_MODEL_DIR in .env.example), or
    # a PersistentVolumeClaim holding it; mounted read-only either way.
    model_host_path: str = "/srv/models/DeepSeek-V4-Flash-0731"
    model_pvc: str | None = None
    # JIT/compile caches survive pod restarts on the node.
    cache_host_path: str = "/var/cache/sm12x"
    # An RDMA device plugin's resource (e.g. rdma/rdma_shared_device_a): it
    # then provides /dev/infiniband, and the pod needs no privileges. Without
    # one the pod mounts the host's /dev/infiniband and runs privileged, which
    # is what opening those devices takes without a plugin.
    rdma_resource: str | None = None
    # Secret (key `api-key`) with the API key; optional: no Secret, no key.
    api_key_secret: str = "sm12x-api-key"
    # ConfigMap with the site values a recipe takes from the host (RoCE NIC names).
    site_configmap: str = "sm12x-site"


def _probe(health: Health, failure_threshold: int) -> dict:
    return {
        "exec": {"command": ["sm12x", "healthcheck"]},
        "periodSeconds": health.interval,
        "timeoutSeconds": health.timeout,
        "failureThreshold": failure_threshold,
    }


def rig_probes(health: Health = RIG_HEALTH) -> dict:
    """compose's healthcheck as Kubernetes probes.

    startupProbe: the start period (no restart while weights load and graphs
    capture, up to 2 h); livenessProbe: interval/timeout/retries after that;
    readinessProbe: the same probe, one miss marks the pod not ready (the
    router's own health checks decide about traffic).
    """
    return {
        "startupProbe": _probe(health, math.ceil(health.start_period / health.interval)),
        "livenessProbe": _probe(health, health.retries),
        "readinessProbe": _probe(health, 1),
    }


def _labels(recipe: Recipe, role: str) -> dict:
    return {NAME: APP, INSTANCE: recipe.name, COMPONENT: "server", ROLE: role}


def _meta(name: str, opts: K8sOptions, labels: dict) -> dict:
    return {"name": name, "namespace": opts.namespace, "labels": labels}


def _api_key_env(opts: K8sOptions) -> dict:
    return {
        "name": "SM12X_API_KEY",
        "valueFrom": {
            "secretKeyRef": {"name": opts.api_key_secret, "key": "api-key", "optional": True}
        },
    }


def _env(recipe: Recipe, opts: K8sOptions) -> list[dict]:
    env: list[dict] = [
        {"name": "RECIPE", "value": recipe.name},
        {"name": "SM12X_MODEL_PATH", "value": "/model"},
        {"name": "SM12X_CACHE_DIR", "value": "/cache"},
        {"name": "HF_HUB_OFFLINE", "value": "1"},
    ]
    if recipe.container.host_network:
        # Host networking: the pod's IP is the node's; sglang binds it (not
        # 0.0.0.0, which would be every interface of the node).
        env.append({"name": "SM12X_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    else:
        env.append({"name": "SM12X_HOST", "value": "0.0.0.0"})
    # Written out so `sm12x healthcheck` (the probes) asks the port sglang serves.
    env.append({"name": "SM12X_PORT", "value": str(recipe.serve.port)})
    if recipe.is_multinode:
        env += [
            # The pod's index in its group (0 on the leader), from the label LWS
            # puts on every pod; every LWS release sets it (LWS_WORKER_INDEX,
            # the same number, is only injected by newer ones).
            {"name": "NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": WORKER_INDEX_FIELD}}},
            # The leader pod's DNS name. LWS puts LWS_LEADER_ADDRESS at the front
            # of every container's environment, so the reference expands.
            {"name": "HEAD_ADDR", "value": "$(LWS_LEADER_ADDRESS)"},
        ]
    for name, var in recipe.env.items():
        if var.from_host:
            env.append(
                {
                    "name": name,
                    "valueFrom": {
                        "configMapKeyRef": {
                            "name": opts.site_configmap,
                            "key": name,
                            "optional": True,
                        }
                    },
                }
            )
    env.append(_api_key_env(opts))
    return env


def _model_volume(opts: K8sOptions) -> dict:
    if opts.model_pvc:
        return {
            "name": "model",
            "persistentVolumeClaim": {"claimName": opts.model_pvc, "readOnly": True},
        }
    # type Directory: a missing folder is an error, not an empty one created.
    return {"name": "model", "hostPath": {"path": opts.model_host_path, "type": "Directory"}}


def _pod_spec(recipe: Recipe, opts: K8sOptions, serves_http: bool) -> dict:
    container: dict = {
        "name": "sglang",
        "image": opts.image,
        "command": ["sm12x", "launch"],
        "env": _env(recipe, opts),
    }
    if serves_http:
        container["ports"] = [{"name": "http", "containerPort": recipe.serve.port}]
    limits: dict = {"nvidia.com/gpu": recipe.gpu_count_per_node}
    mounts = [
        {"name": "model", "mountPath": "/model", "readOnly": True},
        {"name": "cache", "mountPath": "/cache"},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    volumes = [
        _model_volume(opts),
        {"name": "cache", "hostPath": {"path": opts.cache_host_path, "type": "DirectoryOrCreate"}},
        # sglang's processes share tensors through /dev/shm (compose: ipc: host).
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    security: dict = {}
    if recipe.container.cap_add:
        security["capabilities"] = {"add": list(recipe.container.cap_add)}
    if recipe.container.devices:
        if opts.rdma_resource:
            limits[opts.rdma_resource] = 1
        else:
            security["privileged"] = True
            for i, path in enumerate(recipe.container.devices):
                name = f"device{i}"
                mounts.append({"name": name, "mountPath": path})
                volumes.append({"name": name, "hostPath": {"path": path}})
    container["resources"] = {"limits": limits}
    container["volumeMounts"] = mounts
    if security:
        container["securityContext"] = security
    if serves_http:
        container.update(rig_probes())
    spec: dict = {
        "terminationGracePeriodSeconds": RIG_STOP_GRACE_S,
        "nodeSelector": {"kubernetes.io/arch": ARCH[recipe.hardware.cpu_arch]},
        "containers": [container],
        "volumes": volumes,
    }
    if recipe.container.host_network:
        # ClusterFirstWithHostNet: a host-network pod still resolves cluster
        # names (the leader's address).
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return spec


def rig_name(recipe: Recipe) -> str:
    return f"{APP}-{recipe.name}"


def deployment(recipe: Recipe, opts: K8sOptions) -> dict:
    if recipe.is_multinode:
        raise UserError(f"{recipe.name} runs on {recipe.hardware.nodes} nodes: use its LWS")
    labels = _labels(recipe, "server")
    selector = {NAME: APP, INSTANCE: recipe.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(rig_name(recipe), opts, labels),
        "spec": {
            "replicas": 1,
            # The new pod needs the GPUs the old one holds.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
                "spec": _pod_spec(recipe, opts, serves_http=True),
            },
        },
    }


def leader_worker_set(recipe: Recipe, opts: K8sOptions) -> dict:
    if not recipe.is_multinode:
        raise UserError(f"{recipe.name} runs on one node: use its Deployment")
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(rig_name(recipe), opts, {NAME: APP, INSTANCE: recipe.name}),
        "spec": {
            "replicas": 1,
            # Workers are created with the leader and boot alongside it: the
            # ranks wait for each other in torch.distributed init.
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": recipe.hardware.nodes,
                # One node lost breaks the NCCL group: restart the whole group.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": _labels(recipe, "server")},
                    "spec": _pod_spec(recipe, opts, serves_http=True),
                },
                # Ranks 1..N-1 have no HTTP server (sglang serves from rank 0):
                # no probes, as compose disables node1's healthcheck.
                "workerTemplate": {
                    "metadata": {"labels": _labels(recipe, "worker")},
                    "spec": _pod_spec(recipe, opts, serves_http=False),
                },
            },
        },
    }


def rig_manifests(recipe: Recipe, opts: K8sOptions) -> list[dict]:
    return [leader_worker_set(recipe, opts) if recipe.is_multinode else deployment(recipe, opts)]


def _serve_port(recipes: Sequence[Recipe]) -> int:
    ports = {r.serve.port for r in recipes}
    if len(ports) != 1:
        raise UserError(
            f"the recipes serve on different ports ({sorted(ports)}): the router's discovery "
            "takes one port for every rig"
        )
    return ports.pop()


def router_manifests(recipes: Sequence[Recipe], opts: K8sOptions) -> list[dict]:
    labels = {NAME: APP, COMPONENT: "router"}
    name = f"{APP}-router"
    selector = " ".join(f"{k}={v}" for k, v in SERVER_LABELS.items())
    container = {
        "name": "router",
        "image": opts.image,
        "command": ["sm12x", "router"],
        "env": [
            {"name": "SM12X_HOST", "value": "0.0.0.0"},
            {"name": "SM12X_PORT", "value": str(DEFAULT_PORT)},
            {"name": "SM12X_ROUTER_SELECTOR", "value": selector},
            {
                "name": "SM12X_ROUTER_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            {"name": "SM12X_ROUTER_DISCOVERY_PORT", "value": str(_serve_port(recipes))},
            {"name": "SM12X_ROUTER_POLICY", "value": "cache_aware"},
            {"name": "SM12X_ROUTER_METRICS_HOST", "value": "0.0.0.0"},
            {"name": "SM12X_ROUTER_METRICS_PORT", "value": str(DEFAULT_METRICS_PORT)},
            _api_key_env(opts),
        ],
        "ports": [
            {"name": "http", "containerPort": DEFAULT_PORT},
            {"name": "metrics", "containerPort": DEFAULT_METRICS_PORT},
        ],
        # Ready (in the Service) once one generated token comes back through it,
        # compose's router healthcheck; no startupProbe: readiness never restarts.
        "readinessProbe": _probe(ROUTER_HEALTH, ROUTER_HEALTH.retries),
        # Restart only if the router process itself stops answering: rigs being
        # down is not fixed by restarting the router.
        "livenessProbe": {
            "httpGet": {"path": "/liveness", "port": "http"},
            "periodSeconds": ROUTER_HEALTH.interval,
            "timeoutSeconds": 10,
            "failureThreshold": ROUTER_HEALTH.retries,
        },
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, opts, labels)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(name, opts, labels),
            # Service discovery watches pods in this namespace, nothing else.
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(name, opts, labels),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": opts.namespace}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(name, opts, labels),
            "spec": {
                # One router: its cache-aware prefix tree is per process.
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": name,
                        "terminationGracePeriodSeconds": ROUTER_STOP_GRACE_S,
                        "containers": [container],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(APP, opts, labels),
            "spec": {
                "selector": labels,
                "ports": [
                    {"name": "http", "port": DEFAULT_PORT, "targetPort": "http"},
                    {"name": "metrics", "port": DEFAULT_METRICS_PORT, "targetPort": "metrics"},
                ],
            },
        },
    ]


def namespace_manifest(opts: K8sOptions) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": opts.namespace, "labels": {NAME: APP}},
    }


class _Dumper(yaml.SafeDumper):
    """Plain YAML: a dict used twice (labels) is written twice, not as an alias."""

    def ignore_aliases(self, data) -> bool:
        return True


def dump(docs: Sequence[dict], header: str) -> str:
    body = "---\n".join(
        yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
        for doc in docs
    )
    return header + body


def _header(what: str, command: str) -> str:
    return (
        f"# {what}\n"
        f"# Generated by `{command}`: do not edit. Change the recipe or\n"
        "# sm12x/k8s.py and run scripts/regen. Validated against Kubernetes "
        f"{K8S_VERSION.rsplit('.', 1)[0]}.\n"
    )


def render(name: str, opts: K8sOptions) -> str:
    """One recipe's manifests, or the router's (name `router`)."""
    if name == ROUTER:
        return dump(
            router_manifests(load_all(), opts),
            _header(
                "sglang-router in front of the rig pods labelled "
                + " ".join(f"{k}={v}" for k, v in SERVER_LABELS.items()),
                "sm12x render --k8s router",
            ),
        )
    recipe = load_recipe(name)
    kind = "LeaderWorkerSet (needs the LWS controller)" if recipe.is_multinode else "Deployment"
    return dump(
        rig_manifests(recipe, opts),
        _header(f"recipes/{recipe.name}.yaml as a {kind}.", f"sm12x render --k8s {recipe.name}"),
    )


def tree(opts: K8sOptions) -> dict[str, str]:
    """deploy/k8s/: file name -> text, for every recipe plus the router."""
    files = {
        "namespace.yaml": dump(
            [namespace_manifest(opts)],
            _header(f"The {opts.namespace} namespace.", "sm12x render --k8s all"),
        ),
        "router.yaml": render(ROUTER, opts),
    }
    for recipe in load_all():
        if recipe.name in (ROUTER, ALL, "namespace"):
            raise UserError(f"a recipe may not be named {recipe.name!r}: render --k8s uses it")
        files[f"{recipe.name}.yaml"] = render(recipe.name, opts)
    return files


def write_tree(out: Path, opts: K8sOptions) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in tree(opts).items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written
