"""sm12x's own Kubernetes policies, run by checkov beside its built-in ones.

Loaded by checkov (`--external-checks-dir tests/policy`), not by pytest.
Each closes a weakness checkov has no check for; tests/integration/
test_k8s_policy.py renders a manifest with that weakness and shows the check
fail on it, and the generated manifests pass.

SM12X_K8S_1  the API key Secret is required, or the pod is loudly open
SM12X_K8S_2  liveness asks /health (or /liveness), never a generated token
SM12X_K8S_3  devices come from a device plugin, never a hostPath under /dev
SM12X_K8S_4  a non-root pod can write what it mounts writable
SM12X_K8S_5  capabilities: none added but IPC_LOCK, and that only with an RDMA device
"""

from __future__ import annotations

from typing import Any

from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.kubernetes.checks.resource.base_container_check import BaseK8sContainerCheck
from checkov.kubernetes.checks.resource.base_spec_check import BaseK8Check

KEY_FILE_ENV = "SM12X_API_KEY_FILE"
OPEN_ENV = "SM12X_INSECURE_NO_API_KEY"
SM12X_COMMANDS = (["sm12x", "launch"], ["sm12x", "router"])
# Resources that are not devices a capability could be for.
PLAIN_RESOURCES = ("cpu", "memory", "ephemeral-storage", "nvidia.com/gpu")


def pod_spec(conf: dict[str, Any], entity: str) -> dict[str, Any] | None:
    if entity == "Pod":
        return conf.get("spec")
    if entity == "PodTemplate":
        return (conf.get("template") or {}).get("spec")
    if entity == "CronJob":
        return (
            conf.get("spec", {})
            .get("jobTemplate", {})
            .get("spec", {})
            .get("template", {})
            .get("spec")
        )
    return ((conf.get("spec") or {}).get("template") or {}).get("spec")


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for key in ("initContainers", "containers") for c in spec.get(key) or []]


class _PodCheck(BaseK8Check):
    def __init__(self, name: str, id: str) -> None:
        super().__init__(
            name=name,
            id=id,
            categories=[CheckCategories.KUBERNETES],
            supported_entities=BaseK8sContainerCheck.SUPPORTED_ENTITIES,
        )

    def get_resource_id(self, conf: dict[str, Any]) -> str:
        meta = conf["metadata"]
        return f"{conf['kind']}.{meta.get('namespace', 'default')}.{meta['name']}"

    def scan_spec_conf(self, conf: dict[str, Any]) -> CheckResult:
        spec = pod_spec(conf, self.entity_type)
        if not isinstance(spec, dict):
            return CheckResult.UNKNOWN
        return CheckResult.PASSED if self.pod_ok(spec) else CheckResult.FAILED

    def pod_ok(self, spec: dict[str, Any]) -> bool:
        raise NotImplementedError


class ApiKeySecretRequired(_PodCheck):
    """No optional Secret anywhere; an sm12x server reads its key from a
    required Secret volume (SM12X_API_KEY_FILE) or says it is open."""

    def __init__(self) -> None:
        super().__init__(
            "sm12x: the API key Secret is required (or the pod is loudly open)", "SM12X_K8S_1"
        )

    def pod_ok(self, spec: dict[str, Any]) -> bool:
        required_dirs = {}
        for volume in spec.get("volumes") or []:
            secret = volume.get("secret")
            if secret is not None:
                if secret.get("optional"):
                    return False
                required_dirs[volume["name"]] = secret
            for source in (volume.get("projected") or {}).get("sources") or []:
                if (source.get("secret") or {}).get("optional"):
                    return False
        for container in containers(spec):
            env = {e.get("name"): e for e in container.get("env") or []}
            for item in env.values():
                if ((item.get("valueFrom") or {}).get("secretKeyRef") or {}).get("optional"):
                    return False
            for source in container.get("envFrom") or []:
                if (source.get("secretRef") or {}).get("optional"):
                    return False
            if list(container.get("command") or [])[:2] not in SM12X_COMMANDS:
                continue
            if (env.get(OPEN_ENV) or {}).get("value") == "1":
                continue
            path = (env.get(KEY_FILE_ENV) or {}).get("value")
            mounts = [
                m
                for m in container.get("volumeMounts") or []
                if m.get("name") in required_dirs
                and path
                and path.startswith(m.get("mountPath", "").rstrip("/") + "/")
            ]
            if not mounts:
                return False
        return True


class LivenessWithoutGeneration(_PodCheck):
    """A liveness probe that generates a token queues behind a saturated
    server's requests and restarts a healthy pod: ask /health instead."""

    ALLOWED_PATHS = ("/health", "/liveness")

    def __init__(self) -> None:
        super().__init__("sm12x: liveness asks /health, never a generated token", "SM12X_K8S_2")

    def pod_ok(self, spec: dict[str, Any]) -> bool:
        for container in spec.get("containers") or []:
            for key in ("livenessProbe", "startupProbe"):
                probe = container.get(key)
                if probe is None:
                    continue
                http = probe.get("httpGet")
                if http is None or http.get("path") not in self.ALLOWED_PATHS:
                    return False
        return True


class NoHostDevices(_PodCheck):
    def __init__(self) -> None:
        super().__init__("sm12x: devices come from a device plugin, not a hostPath", "SM12X_K8S_3")

    def pod_ok(self, spec: dict[str, Any]) -> bool:
        for volume in spec.get("volumes") or []:
            host = volume.get("hostPath")
            if host is None:
                continue
            if str(host.get("path", "")).startswith("/dev") or host.get("type") in (
                "CharDevice",
                "BlockDevice",
            ):
                return False
        return True


class WritableVolumesOwned(_PodCheck):
    """A hostPath is created root-owned and fsGroup never applies to it: a
    non-root pod cannot write it. A writable PVC needs fsGroup."""

    def __init__(self) -> None:
        super().__init__("sm12x: a non-root pod can write what it mounts writable", "SM12X_K8S_4")

    def pod_ok(self, spec: dict[str, Any]) -> bool:
        volumes = {v.get("name"): v for v in spec.get("volumes") or []}
        fs_group = (spec.get("securityContext") or {}).get("fsGroup")
        for container in containers(spec):
            for mount in container.get("volumeMounts") or []:
                if mount.get("readOnly"):
                    continue
                volume = volumes.get(mount.get("name"), {})
                if "hostPath" in volume:
                    return False
                if "persistentVolumeClaim" in volume and fs_group is None:
                    return False
        return True


class OnlyNeededCapabilities(BaseK8sContainerCheck):
    def __init__(self) -> None:
        super().__init__(
            name="sm12x: no capability added but IPC_LOCK, and that only with an RDMA device",
            id="SM12X_K8S_5",
        )

    def scan_container_conf(self, metadata: dict[str, Any], conf: dict[str, Any]) -> CheckResult:
        added = ((conf.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        if not added:
            return CheckResult.PASSED
        if set(added) != {"IPC_LOCK"}:
            return CheckResult.FAILED
        limits = (conf.get("resources") or {}).get("limits") or {}
        # checkov adds __startline__/__endline__ keys to every mapping it parses.
        devices = [
            r
            for r in limits
            if r not in PLAIN_RESOURCES and not str(r).startswith(("hugepages-", "__"))
        ]
        return CheckResult.PASSED if devices else CheckResult.FAILED


ApiKeySecretRequired()
LivenessWithoutGeneration()
NoHostDevices()
WritableVolumesOwned()
OnlyNeededCapabilities()
