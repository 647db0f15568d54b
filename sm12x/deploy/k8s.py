"""Kubernetes manifests from the recipes (`sm12x render --k8s`, deploy/k8s/).

- A Deployment per single-node recipe; a LeaderWorkerSet (the LWS API,
  leaderworkerset.x-k8s.io/v1) for a multi-node one, one group = one model
  replica: the leader is node 0 and serves HTTP, the workers are nodes 1..N-1.
- The router: sglang-router finding the rigs by label (Kubernetes service
  discovery), its ServiceAccount and namespaced Role, a Deployment and a
  Service, the one endpoint clients use.
- A NetworkPolicy per file: the pods take connections only from pods in
  their own namespace (the router, the namespace's clients, a Spark group's
  other node).

Launch arguments are not written here. Like every compose service, each pod
runs the image's `sm12x launch` with SM12X_RECIPE=<name>, which renders the sglang
command from the recipe inside the container (sm12x.launch.plan).
So a manifest cannot drift from the recipe the image carries, and a recipe
change needs a new image, not new manifests. What Kubernetes itself must know
is taken from the recipe's deployment plan (sm12x.launch.plan.deployment, the
plan compose.yaml's services are written from too): the track and its image,
the port sglang serves, the site variables; and from its recipe the GPUs per
node, node count, CPU architecture and capabilities; the tests prove each equal
to the recipe. The router pod runs `sm12x router`, the compose router's entrypoint
(sm12x.deploy.router).

Closed by default (docs/security.md): the API key Secret is required (a pod
does not start without it) unless --insecure-no-api-key renders an open
deployment; every pod runs as the image's non-root user with no privilege
escalation, all capabilities dropped (the Spark pods keep IPC_LOCK, the one
the recipe asks for RDMA), the runtime's default seccomp profile, and CPU
and memory requests and limits. The Spark pods get /dev/infiniband from an
RDMA device plugin and the RoCE link from a Multus network: never privileged,
never host devices; host networking only with --host-network.

Probes: readiness is compose's healthcheck (`sm12x healthcheck`: one
generated token, with its timings); liveness and startup ask sglang's
/health, which answers 200 as soon as the server produced any output, so a
saturated but healthy pod is never restarted for being slow to serve one more
token.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator

from sm12x.apikey import FILE_ENV, OPEN_ENV
from sm12x.deploy.router import DEFAULT_METRICS_PORT, DEFAULT_PORT
from sm12x.errors import UserError
from sm12x.fields import AbsPath, ImageRef, K8sName, K8sNetworkName, K8sResourceName, Track
from sm12x.launch import plan as launch_plan
from sm12x.launch.plan import LaunchPlan
from sm12x.recipe import Recipe, load_all, load_recipe
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


# A hostPath mounted into a pod exposes that part of the node: the whole
# filesystem, or the node's own system folders, is never a model folder.
SYSTEM_PATHS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/containers",
    "/var/lib/kubelet",
    "/var/lib/cri-o",
    "/var/lib/etcd",
)
# Folders whose own mount would hand the pod every user's or service's files.
SHARED_ROOTS = ("/home", "/var", "/var/lib", "/srv", "/mnt", "/opt", "/media", "/tmp")


def _model_folder(value: str) -> str:
    path = posixpath.normpath("/" + value.strip())
    path = "/" + path.lstrip("/")  # normpath keeps a leading '//'
    under = [p for p in SYSTEM_PATHS if path == p or path.startswith(p + "/")]
    if path == "/" or under or path in SHARED_ROOTS:
        what = (
            f"under {under[0]}, a system folder"
            if under
            else "the node's root or a system folder (a root every user or service shares)"
        )
        raise ValueError(
            f"{value} is {what} (its sockets, credentials or other users' files would be "
            "mounted into the pod): give the folder that holds the checkpoint "
            "(e.g. /srv/models/DeepSeek-V4-Flash-0731)"
        )
    return value


ModelHostPath = Annotated[AbsPath, AfterValidator(_model_folder)]


class K8sOptions(BaseModel):
    """What `sm12x render --k8s` takes besides the recipe, each value typed
    (sm12x.fields): a bad namespace or image is refused before anything renders."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: K8sName = "sm12x"
    # None: each recipe's own track's image (its deployment plan's). Given
    # (SM12X_IMAGE or SM12X_TRACK), it is `track`'s image, and a recipe that does
    # not run on that track is refused rather than written to crash-loop.
    image: ImageRef | None = None
    track: Track | None = None
    # The checkpoint on each GPU node (as SM12X_MODEL_DIR in .env.example), or
    # a PersistentVolumeClaim holding it; mounted read-only either way.
    model_host_path: ModelHostPath = "/srv/models/DeepSeek-V4-Flash-0731"
    model_pvc: K8sName | None = None
    # JIT/compile caches. Default: an emptyDir (the pod's user can write it;
    # kernels recompile after a pod is replaced). A PVC keeps them across pods;
    # fsGroup makes it writable for the pod's user.
    cache_pvc: K8sName | None = None
    # The RDMA device plugin resource that gives a multi-node pod /dev/infiniband
    # (e.g. the k8s-rdma-shared-dev-plugin's rdma/rdma_shared_device_a).
    rdma_resource: K8sResourceName = "rdma/rdma_shared_device_a"
    # The Multus network (NetworkAttachmentDefinition, e.g. macvlan on the
    # ConnectX-7 port) that puts the RoCE link in a multi-node pod.
    roce_network: K8sNetworkName = "sm12x-roce"
    # Instead of roce_network: the node's own network (NetworkPolicy does not
    # apply to host-network pods, so these then rely on the API key alone).
    host_network: bool = False
    # Secret (key `api-key`) with the API key: required unless insecure_no_api_key.
    api_key_secret: K8sName = "sm12x-api-key"
    insecure_no_api_key: bool = False
    # ConfigMap with the site values a recipe takes from the host (RoCE NIC names).
    site_configmap: K8sName = "sm12x-site"

    @model_validator(mode="after")
    def _open_only_off_host_network(self) -> K8sOptions:
        if self.host_network and self.insecure_no_api_key:
            raise ValueError(
                "--insecure-no-api-key does not go with --host-network: a host-network pod "
                "serves on the node's own address, where no NetworkPolicy applies, so the "
                "key is all that stands between the API and the network"
            )
        return self


# The image's user (Dockerfile: useradd --uid 10001, USER 10001:0).
RUN_AS_USER = 10001
# Where the Secret's key is mounted; SM12X_API_KEY_FILE points at it.
API_KEY_DIR = "/run/secrets/sm12x"
API_KEY_FILE = f"{API_KEY_DIR}/api-key"
# The JIT cache emptyDir's cap: flashinfer/Triton/DeepGEMM/CUDA caches (not
# measured; doctor's disk check keeps a 50 GiB margin for image plus caches).
CACHE_SIZE_LIMIT = "50Gi"
# sglang's /health waits up to SGLANG_HEALTH_CHECK_TIMEOUT (20 s) for the
# scheduler before answering 503; the probe waits longer than that.
HEALTH_PROBE_TIMEOUT_S = 30
MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"


def _exec_probe(health: Health, failure_threshold: int, *args: str) -> dict:
    return {
        "exec": {"command": ["sm12x", "healthcheck", *args]},
        "periodSeconds": health.interval,
        "timeoutSeconds": health.timeout,
        "failureThreshold": failure_threshold,
    }


def _health_probe(health: Health, failure_threshold: int) -> dict:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": health.interval,
        "timeoutSeconds": HEALTH_PROBE_TIMEOUT_S,
        "failureThreshold": failure_threshold,
    }


def rig_probes(health: Health = RIG_HEALTH) -> dict:
    """Probes of a pod that serves HTTP.

    startupProbe: sglang's /health through the start period (no restart while
    weights load and graphs capture, up to 2 h); livenessProbe: /health with
    compose's interval and retries: it fails only when the scheduler produced
    nothing for 20 s, never because a busy server queues a probe; readinessProbe:
    compose's healthcheck, one generated token (generation works end to end),
    with its interval, timeout and retries.
    """
    return {
        "startupProbe": _health_probe(health, math.ceil(health.start_period / health.interval)),
        "livenessProbe": _health_probe(health, health.retries),
        "readinessProbe": _exec_probe(health, health.retries),
    }


@dataclass(frozen=True)
class Resources:
    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str

    def as_dict(self, extra_limits: dict) -> dict:
        return {
            "requests": {"cpu": self.cpu_request, "memory": self.memory_request},
            "limits": {"cpu": self.cpu_limit, "memory": self.memory_limit, **extra_limits},
        }


def rig_resources(recipe: Recipe) -> Resources:
    """CPU and memory for one node of a recipe. NOT measured on the hardware.

    CPU: sglang runs a busy scheduler per GPU plus the tokenizer and
    detokenizer: one core per GPU and two more requested, twice that as the
    limit. Memory: the processes' own memory (CUDA contexts, torch, the
    tokenizer), about 6 GiB per GPU plus 8 GiB, requested, twice that as the
    limit; the checkpoint's page cache is charged to the pod but reclaimable.
    Unified memory (DGX Spark): the GPU's memory is the node's memory, so the
    limit is the whole node (recipe's memory_gib_per_gpu) and cannot bite
    before the node itself runs out.
    """
    gpus = recipe.gpu_count_per_node
    cpu = 2 + gpus
    memory_gib = 8 + 6 * gpus
    limit_gib = (
        recipe.hardware.memory_gib_per_gpu if recipe.hardware.unified_memory else 2 * memory_gib
    )
    return Resources(str(cpu), str(2 * cpu), f"{memory_gib}Gi", f"{limit_gib}Gi")


ROUTER_RESOURCES = Resources("1", "4", "2Gi", "8Gi")


def pod_security_context() -> dict:
    """The pod's user: the image's non-root UID; volumes group-owned by it."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        # Change a volume's group only when its top folder is not already ours:
        # a persistent cache is not re-chowned file by file on every start.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context(cap_add: Sequence[str] = ()) -> dict:
    capabilities: dict = {"drop": ["ALL"]}
    if cap_add:
        capabilities["add"] = list(cap_add)
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "capabilities": capabilities,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _labels(recipe: Recipe, role: str) -> dict:
    return {NAME: APP, INSTANCE: recipe.name, COMPONENT: "server", ROLE: role}


def _meta(name: str, opts: K8sOptions, labels: dict) -> dict:
    return {"name": name, "namespace": opts.namespace, "labels": labels}


def _api_key_env(opts: K8sOptions) -> list[dict]:
    if opts.insecure_no_api_key:
        # Loudly named at every level: the flag, this variable, the launcher's check.
        return [{"name": OPEN_ENV, "value": "1"}]
    return [{"name": FILE_ENV, "value": API_KEY_FILE}]


def _api_key_volume(opts: K8sOptions) -> tuple[list[dict], list[dict]]:
    """(mounts, volumes) for the key Secret: required, read-only, mode 0440.

    Not `optional`: without the Secret the pod does not start (the kubelet
    reports the missing Secret) instead of serving an open API.
    """
    if opts.insecure_no_api_key:
        return [], []
    mount = {"name": "api-key", "mountPath": API_KEY_DIR, "readOnly": True}
    volume = {
        "name": "api-key",
        "secret": {
            "secretName": opts.api_key_secret,
            "items": [{"key": "api-key", "path": "api-key"}],
            "defaultMode": 0o440,
            "optional": False,
        },
    }
    return [mount], [volume]


def _env(plan: LaunchPlan, opts: K8sOptions) -> list[dict]:
    recipe = plan.recipe
    env: list[dict] = [
        {"name": "SM12X_RECIPE", "value": recipe.name},
        {"name": "SM12X_MODEL_DIR", "value": "/model"},
        {"name": "SM12X_CACHE_DIR", "value": "/cache"},
        {"name": "HF_HUB_OFFLINE", "value": "1"},
    ]
    if _host_network(recipe, opts):
        # Host networking: the pod's IP is the node's; sglang binds it (not
        # 0.0.0.0, which would be every interface of the node).
        env.append({"name": "SM12X_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    else:
        env.append({"name": "SM12X_HOST", "value": "0.0.0.0"})
    # Written out so `sm12x healthcheck` (the probes) asks the port sglang serves.
    env.append({"name": "SM12X_PORT", "value": str(plan.port())})
    if recipe.is_multinode:
        env += [
            # The pod's index in its group (0 on the leader), from the label LWS
            # puts on every pod; every LWS release sets it (LWS_WORKER_INDEX,
            # the same number, is only injected by newer ones).
            {
                "name": "SM12X_NODE_RANK",
                "valueFrom": {"fieldRef": {"fieldPath": WORKER_INDEX_FIELD}},
            },
            # The leader pod's DNS name. LWS puts LWS_LEADER_ADDRESS at the front
            # of every container's environment, so the reference expands.
            {"name": "SM12X_HEAD_ADDR", "value": "$(LWS_LEADER_ADDRESS)"},
        ]
    for name in plan.site_variables():
        env.append(
            {
                "name": name,
                "valueFrom": {
                    "configMapKeyRef": {"name": opts.site_configmap, "key": name, "optional": True}
                },
            }
        )
    return env + _api_key_env(opts)


def _host_network(recipe: Recipe, opts: K8sOptions) -> bool:
    """Only a multi-node recipe that needs the host network in compose, and only
    when asked: by default its RoCE link comes from a Multus network."""
    return recipe.container.host_network and opts.host_network


def _model_volume(opts: K8sOptions) -> dict:
    if opts.model_pvc:
        return {
            "name": "model",
            "persistentVolumeClaim": {"claimName": opts.model_pvc, "readOnly": True},
        }
    # type Directory: a missing folder is an error, not an empty one created.
    return {"name": "model", "hostPath": {"path": opts.model_host_path, "type": "Directory"}}


def _cache_volume(opts: K8sOptions) -> dict:
    if opts.cache_pvc:
        return {"name": "cache", "persistentVolumeClaim": {"claimName": opts.cache_pvc}}
    return {"name": "cache", "emptyDir": {"sizeLimit": CACHE_SIZE_LIMIT}}


def plan_for(recipe: Recipe, opts: K8sOptions) -> LaunchPlan:
    """The recipe's deployment plan for the track and image given: its pods run
    the plan's image, refused when that image's track cannot run the recipe (the
    launcher would refuse it in every pod)."""
    return launch_plan.deployment(recipe, track=opts.track, image=opts.image)


def router_image(opts: K8sOptions) -> str:
    """The router's image: any track's carries sglang-router; the given one, else the
    default track's."""
    return opts.image or load_versions(opts.track)["SM12X_IMAGE"]


def _pod_spec(plan: LaunchPlan, opts: K8sOptions, serves_http: bool) -> dict:
    recipe = plan.recipe
    container: dict = {
        "name": "sglang",
        "image": plan.image(),
        "command": ["sm12x", "launch"],
        "env": _env(plan, opts),
    }
    if serves_http:
        container["ports"] = [{"name": "http", "containerPort": plan.port()}]
    limits: dict = {"nvidia.com/gpu": recipe.gpu_count_per_node}
    key_mounts, key_volumes = _api_key_volume(opts)
    mounts = [
        {"name": "model", "mountPath": "/model", "readOnly": True},
        {"name": "cache", "mountPath": "/cache"},
        {"name": "dshm", "mountPath": "/dev/shm"},
        *key_mounts,
    ]
    volumes = [
        _model_volume(opts),
        _cache_volume(opts),
        # sglang's processes share tensors through /dev/shm (compose: ipc: host).
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        *key_volumes,
    ]
    if recipe.container.devices:
        # The device plugin puts /dev/infiniband in the container and allows it
        # in the device cgroup: no host path, no privileged.
        limits[opts.rdma_resource] = 1
    container["resources"] = rig_resources(recipe).as_dict(limits)
    container["volumeMounts"] = mounts
    container["securityContext"] = container_security_context(recipe.container.cap_add)
    if serves_http:
        container.update(rig_probes())
    spec: dict = {
        "terminationGracePeriodSeconds": RIG_STOP_GRACE_S,
        "nodeSelector": {"kubernetes.io/arch": ARCH[recipe.hardware.cpu_arch]},
        # sglang never talks to the Kubernetes API: no token in the pod.
        "automountServiceAccountToken": False,
        # No service-link variables: a Service named sglang in the namespace
        # would otherwise inject SGLANG_PORT, which sglang reads (sm12x launch
        # refuses a variable sglang reads that the recipe does not give).
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": volumes,
    }
    if _host_network(recipe, opts):
        # ClusterFirstWithHostNet: a host-network pod still resolves cluster
        # names (the leader's address).
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return spec


def _template_metadata(recipe: Recipe, opts: K8sOptions, role: str) -> dict:
    meta: dict = {"labels": _labels(recipe, role)}
    if recipe.container.host_network and not opts.host_network:
        # The RoCE link as a second interface (Multus): NCCL_SOCKET_IFNAME and
        # NCCL_IB_HCA in the site ConfigMap name it inside the pod.
        meta["annotations"] = {MULTUS_NETWORKS: opts.roce_network}
    return meta


def rig_name(recipe: Recipe) -> str:
    return f"{APP}-{recipe.name}"


def deployment(plan: LaunchPlan, opts: K8sOptions) -> dict:
    recipe = plan.recipe
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
                "metadata": _template_metadata(recipe, opts, "server"),
                "spec": _pod_spec(plan, opts, serves_http=True),
            },
        },
    }


def leader_worker_set(plan: LaunchPlan, opts: K8sOptions) -> dict:
    recipe = plan.recipe
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
                    "metadata": _template_metadata(recipe, opts, "server"),
                    "spec": _pod_spec(plan, opts, serves_http=True),
                },
                # Ranks 1..N-1 have no HTTP server (sglang serves from rank 0):
                # no probes, as compose disables node1's healthcheck.
                "workerTemplate": {
                    "metadata": _template_metadata(recipe, opts, "worker"),
                    "spec": _pod_spec(plan, opts, serves_http=False),
                },
            },
        },
    }


def network_policy(name: str, pods: dict, opts: K8sOptions, labels: dict) -> dict:
    """Ingress to `pods` only from pods in the same namespace: the router, the
    namespace's clients and a Spark group's other node. Nothing from other
    namespaces or outside the cluster (add a policy for an ingress controller).
    Host-network pods are outside any NetworkPolicy (--host-network)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name, opts, labels),
        "spec": {
            "podSelector": {"matchLabels": pods},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {}}]}],
        },
    }


def rig_manifests(recipe: Recipe, opts: K8sOptions) -> list[dict]:
    """The recipe's workload and NetworkPolicy, from its deployment plan."""
    plan = plan_for(recipe, opts)
    multinode = plan.recipe.is_multinode
    workload = leader_worker_set(plan, opts) if multinode else deployment(plan, opts)
    pods = {NAME: APP, INSTANCE: recipe.name}
    return [workload, network_policy(rig_name(recipe), pods, opts, pods)]


def _serve_port(recipes: Sequence[Recipe]) -> int:
    """The one port every rig's sglang serves (each recipe's plan on its own track)."""
    ports = {launch_plan.deployment(r).port() for r in recipes}
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
        "image": router_image(opts),
        "command": ["sm12x", "router"],
        "env": [
            {"name": "SM12X_ROUTER_BIND", "value": "0.0.0.0"},
            {"name": "SM12X_ROUTER_PORT", "value": str(DEFAULT_PORT)},
            {"name": "SM12X_ROUTER_SELECTOR", "value": selector},
            {
                "name": "SM12X_ROUTER_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            {"name": "SM12X_ROUTER_DISCOVERY_PORT", "value": str(_serve_port(recipes))},
            {"name": "SM12X_ROUTER_POLICY", "value": "cache_aware"},
            {"name": "SM12X_ROUTER_METRICS_BIND", "value": "0.0.0.0"},
            {"name": "SM12X_ROUTER_METRICS_PORT", "value": str(DEFAULT_METRICS_PORT)},
            *_api_key_env(opts),
        ],
        "ports": [
            {"name": "http", "containerPort": DEFAULT_PORT},
            {"name": "metrics", "containerPort": DEFAULT_METRICS_PORT},
        ],
        # Ready (in the Service) once one generated token comes back through it,
        # compose's router healthcheck; no startupProbe: readiness never restarts.
        "readinessProbe": _exec_probe(ROUTER_HEALTH, ROUTER_HEALTH.retries, "--router"),
        # Restart only if the router process itself stops answering: rigs being
        # down is not fixed by restarting the router.
        "livenessProbe": {
            "httpGet": {"path": "/liveness", "port": "http"},
            "periodSeconds": ROUTER_HEALTH.interval,
            "timeoutSeconds": 10,
            "failureThreshold": ROUTER_HEALTH.retries,
        },
        "resources": ROUTER_RESOURCES.as_dict({}),
        "securityContext": container_security_context(),
    }
    key_mounts, key_volumes = _api_key_volume(opts)
    if key_mounts:
        container["volumeMounts"] = key_mounts
    pod_spec: dict = {
        # The one pod that talks to the Kubernetes API: its token is how
        # service discovery watches the rig pods (the Role below).
        "serviceAccountName": name,
        "automountServiceAccountToken": True,
        # No service-link variables in the router's environment either.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": ROUTER_STOP_GRACE_S,
        "securityContext": pod_security_context(),
        "containers": [container],
    }
    if key_volumes:
        pod_spec["volumes"] = key_volumes
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
                "template": {"metadata": {"labels": labels}, "spec": pod_spec},
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
        network_policy(name, labels, opts, labels),
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
        "# sm12x/deploy/k8s.py and run scripts/regen. Validated against Kubernetes "
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
            )
            + (
                "# OPEN: rendered with --insecure-no-api-key.\n"
                if opts.insecure_no_api_key
                else f"# Needs the Secret {opts.api_key_secret} (key api-key).\n"
            ),
        )
    recipe = load_recipe(name)
    kind = "LeaderWorkerSet (needs the LWS controller)" if recipe.is_multinode else "Deployment"
    return dump(
        rig_manifests(recipe, opts),
        _header(
            f"recipes/{recipe.name}.yaml as a {kind} and its NetworkPolicy.",
            f"sm12x render --k8s {recipe.name}",
        )
        + _needs(recipe, opts),
    )


def _needs(recipe: Recipe, opts: K8sOptions) -> str:
    """What the pods need before they start, said at the top of the file."""
    lines = []
    if opts.insecure_no_api_key:
        lines.append(
            "# OPEN: rendered with --insecure-no-api-key; anyone in the namespace can use it."
        )
    else:
        lines.append(
            f"# Needs the Secret {opts.api_key_secret} (key api-key): without it the pods do "
            "not start."
        )
    if recipe.container.devices:
        lines.append(f"# Needs the RDMA device plugin resource {opts.rdma_resource}.")
    if recipe.container.host_network and not opts.host_network:
        lines.append(f"# Needs the Multus network {opts.roce_network} on the RoCE link.")
    return "".join(line + "\n" for line in lines)


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
    written = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in tree(opts).items():
            path = out / name
            path.write_text(text)
            written.append(path)
    except OSError as exc:
        raise UserError(
            f"--out {out}: cannot write the manifests there "
            f"({exc.strerror or exc}): give a folder you can write"
        ) from None
    return written
