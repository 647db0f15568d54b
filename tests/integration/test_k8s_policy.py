"""The Kubernetes manifests pass a policy check, and the check fails on each weakness.

The policy is checkov's Kubernetes checks plus sm12x's own (tests/policy/
sm12x_checks.py), run on every generated object (LWS templates as the
StatefulSets the LWS controller makes of them; tools/policy.py).
The generated tree must pass with only the exceptions listed there, each with
its reason. Then, for every weakness issue 14 found in the manifests main
rendered before (an optional key Secret, no NetworkPolicy, no securityContext,
no requests or limits, a privileged host-network Spark pod with host devices,
a liveness probe that needs a generated token, a root-owned cache hostPath
under a non-root pod, ...), the same objects with that weakness put back must
fail the named check. One checkov run covers all of it: each case is written
in its own namespace and under its own labels (`weakened`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import yaml

from sm12x.deploy import k8s
from sm12x.recipe import load_recipe
from tools.policy import EXCEPTIONS, GLOBAL_SKIPS, excused, policy_objects, run_checkov

OPTS = k8s.K8sOptions()
TREE = k8s.tree(OPTS)


def docs(name: str, opts: k8s.K8sOptions = OPTS) -> list[dict]:
    text = TREE[f"{name}.yaml"] if opts is OPTS else k8s.render(name, opts)
    return [d for d in yaml.safe_load_all(text) if d]


def workload(objects: list[dict]) -> dict:
    return next(d for d in objects if d["kind"] in ("Deployment", "LeaderWorkerSet"))


def pod_specs(objects: list[dict]) -> list[dict]:
    doc = workload(objects)
    if doc["kind"] == "Deployment":
        return [doc["spec"]["template"]["spec"]]
    lwt = doc["spec"]["leaderWorkerTemplate"]
    return [lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]]


def containers(objects: list[dict]) -> list[dict]:
    return [c for spec in pod_specs(objects) for c in spec["containers"]]


# --- the weaknesses, put back one at a time -------------------------------------------------


def optional_secret(objects):
    for spec in pod_specs(objects):
        for volume in spec["volumes"]:
            if "secret" in volume:
                volume["secret"]["optional"] = True


def key_from_optional_env(objects):
    """main's manifests: SM12X_API_KEY from an optional secretKeyRef."""
    for spec in pod_specs(objects):
        spec["volumes"] = [v for v in spec["volumes"] if "secret" not in v]
        for c in spec["containers"]:
            c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "api-key"]
            c["env"] = [e for e in c["env"] if e["name"] != "SM12X_API_KEY_FILE"]
            c["env"].append(
                {
                    "name": "SM12X_API_KEY",
                    "valueFrom": {
                        "secretKeyRef": {
                            "name": "sm12x-api-key",
                            "key": "api-key",
                            "optional": True,
                        }
                    },
                }
            )


def no_key_at_all(objects):
    for spec in pod_specs(objects):
        spec["volumes"] = [v for v in spec["volumes"] if "secret" not in v]
        for c in spec["containers"]:
            c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "api-key"]
            c["env"] = [e for e in c["env"] if e["name"] != "SM12X_API_KEY_FILE"]


def no_network_policy(objects):
    objects[:] = [d for d in objects if d["kind"] != "NetworkPolicy"]


def no_security_context(objects):
    for spec in pod_specs(objects):
        spec.pop("securityContext")
        for c in spec["containers"]:
            c.pop("securityContext")


def escalation_allowed(objects):
    for c in containers(objects):
        c["securityContext"]["allowPrivilegeEscalation"] = True


def runs_as_root(objects):
    for spec in pod_specs(objects):
        spec["securityContext"]["runAsNonRoot"] = False
        spec["securityContext"]["runAsUser"] = 0
        for c in spec["containers"]:
            c["securityContext"]["runAsNonRoot"] = False
            c["securityContext"]["runAsUser"] = 0


def capabilities_kept(objects):
    for c in containers(objects):
        c["securityContext"]["capabilities"].pop("drop")


def extra_capability(objects):
    for c in containers(objects):
        c["securityContext"]["capabilities"]["add"] = ["IPC_LOCK", "SYS_ADMIN"]


def ipc_lock_without_rdma(objects):
    for c in containers(objects):
        c["securityContext"]["capabilities"]["add"] = ["IPC_LOCK"]


def no_seccomp(objects):
    for spec in pod_specs(objects):
        spec["securityContext"].pop("seccompProfile")
        for c in spec["containers"]:
            c["securityContext"].pop("seccompProfile")


def gpu_limit_only(objects):
    """main's rig pods: a GPU limit, no CPU or memory request or limit."""
    for c in containers(objects):
        gpus = c["resources"]["limits"]["nvidia.com/gpu"]
        c["resources"] = {"limits": {"nvidia.com/gpu": gpus}}


def no_resources(objects):
    for c in containers(objects):
        c.pop("resources")


def privileged(objects):
    for c in containers(objects):
        c["securityContext"]["privileged"] = True


def host_network(objects):
    for spec in pod_specs(objects):
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"


def host_devices(objects):
    """main's Spark pods: /dev/infiniband from the host instead of the device plugin."""
    for spec in pod_specs(objects):
        spec["volumes"].append({"name": "device0", "hostPath": {"path": "/dev/infiniband"}})
        for c in spec["containers"]:
            c["volumeMounts"].append({"name": "device0", "mountPath": "/dev/infiniband"})
            c["resources"]["limits"].pop(OPTS.rdma_resource)


def liveness_generates(objects):
    """main's rig liveness: `sm12x healthcheck`, one generated token."""
    for c in containers(objects):
        if "livenessProbe" in c:
            c["livenessProbe"] = {
                "exec": {"command": ["sm12x", "healthcheck"]},
                "periodSeconds": 60,
                "timeoutSeconds": 60,
                "failureThreshold": 5,
            }


def no_liveness(objects):
    for c in containers(objects):
        c.pop("livenessProbe", None)


def root_owned_cache(objects):
    """main's cache: a hostPath the kubelet creates root-owned, under a UID 10001 pod."""
    for spec in pod_specs(objects):
        (volume,) = [v for v in spec["volumes"] if v["name"] == "cache"]
        volume.clear()
        volume.update(
            {"name": "cache", "hostPath": {"path": "/var/cache/sm12x", "type": "DirectoryOrCreate"}}
        )


def cache_pvc_without_fsgroup(objects):
    for spec in pod_specs(objects):
        spec["securityContext"].pop("fsGroup")
        spec["securityContext"].pop("fsGroupChangePolicy")
        (volume,) = [v for v in spec["volumes"] if v["name"] == "cache"]
        volume.clear()
        volume.update({"name": "cache", "persistentVolumeClaim": {"claimName": "cache"}})


def token_mounted(objects):
    for spec in pod_specs(objects):
        spec["automountServiceAccountToken"] = True


def key_as_env(objects):
    for c in containers(objects):
        c["env"].append(
            {
                "name": "SM12X_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": "sm12x-api-key", "key": "api-key"}},
            }
        )


RTX = "rtx-pro-6000-tp4"
SPARK = "dgx-spark-tp2"
# (case id, file, the weakness put back, checks that must fail on it)
WEAKNESSES: list[tuple[str, str, Callable[[list[dict]], None], set[str]]] = [
    ("optional-key-secret", RTX, optional_secret, {"SM12X_K8S_1"}),
    ("key-from-optional-env", RTX, key_from_optional_env, {"SM12X_K8S_1", "CKV_K8S_35"}),
    ("no-key-at-all", RTX, no_key_at_all, {"SM12X_K8S_1"}),
    ("router-optional-key", "router", optional_secret, {"SM12X_K8S_1"}),
    ("no-network-policy", RTX, no_network_policy, {"CKV2_K8S_6"}),
    ("router-no-network-policy", "router", no_network_policy, {"CKV2_K8S_6"}),
    (
        "no-security-context",
        RTX,
        no_security_context,
        {
            "CKV_K8S_20",
            "CKV_K8S_23",
            "CKV_K8S_28",
            "CKV_K8S_29",
            "CKV_K8S_30",
            "CKV_K8S_31",
            "CKV_K8S_37",
            "CKV_K8S_40",
        },
    ),
    ("router-no-security-context", "router", no_security_context, {"CKV_K8S_20", "CKV_K8S_23"}),
    ("privilege-escalation", RTX, escalation_allowed, {"CKV_K8S_20"}),
    ("runs-as-root", RTX, runs_as_root, {"CKV_K8S_23", "CKV_K8S_40"}),
    ("capabilities-not-dropped", RTX, capabilities_kept, {"CKV_K8S_37", "CKV_K8S_28"}),
    ("capability-beyond-ipc-lock", SPARK, extra_capability, {"SM12X_K8S_5", "CKV_K8S_39"}),
    ("ipc-lock-without-rdma-device", RTX, ipc_lock_without_rdma, {"SM12X_K8S_5"}),
    ("no-seccomp-profile", RTX, no_seccomp, {"CKV_K8S_31"}),
    ("cpu-and-memory-unbounded", RTX, gpu_limit_only, {"CKV_K8S_11", "CKV_K8S_13"}),
    (
        "no-requests-or-limits",
        RTX,
        no_resources,
        {"CKV_K8S_10", "CKV_K8S_11", "CKV_K8S_12", "CKV_K8S_13"},
    ),
    ("spark-privileged", SPARK, privileged, {"CKV_K8S_16"}),
    ("spark-host-network", SPARK, host_network, {"CKV_K8S_19"}),
    ("spark-host-devices", SPARK, host_devices, {"SM12X_K8S_3"}),
    ("liveness-generates-a-token", RTX, liveness_generates, {"SM12X_K8S_2"}),
    ("spark-liveness-generates-a-token", SPARK, liveness_generates, {"SM12X_K8S_2"}),
    ("no-liveness", RTX, no_liveness, {"CKV_K8S_8"}),
    ("root-owned-cache-hostpath", RTX, root_owned_cache, {"SM12X_K8S_4"}),
    ("cache-pvc-without-fsgroup", RTX, cache_pvc_without_fsgroup, {"SM12X_K8S_4"}),
    ("service-account-token-in-rig", RTX, token_mounted, {"CKV_K8S_38"}),
    ("key-in-environment", RTX, key_as_env, {"CKV_K8S_35"}),
]


def _relabel(node, value: str) -> None:
    if isinstance(node, dict):
        if node.get(k8s.NAME) == k8s.APP:
            node[k8s.NAME] = value
        for child in node.values():
            _relabel(child, value)
    elif isinstance(node, list):
        for child in node:
            _relabel(child, value)


def weakened(case: str, file: str, mutate) -> list[dict]:
    """The file's objects with one weakness, in a namespace and under a name
    label of their own: checkov 3.3 matches NetworkPolicies to pods by labels
    alone, ignoring namespaces, so another file's policy must not cover them."""
    objects = copy.deepcopy(docs(file))
    mutate(objects)
    own = f"weak-{case}"[:63]
    for doc in objects:
        doc["metadata"]["namespace"] = own
    _relabel(objects, own)
    return objects


@pytest.fixture(scope="module")
def findings(tmp_path_factory) -> dict[str, set[tuple[str, str]]]:
    files = {name[: -len(".yaml")]: docs(name[: -len(".yaml")]) for name in TREE}
    files["open-" + RTX] = docs(RTX, k8s.K8sOptions(insecure_no_api_key=True))
    files["host-network-" + SPARK] = docs(SPARK, k8s.K8sOptions(host_network=True))
    files["cache-pvc-" + RTX] = docs(RTX, k8s.K8sOptions(cache_pvc="sm12x-cache"))
    for case, file, mutate, _ in WEAKNESSES:
        files[f"weak-{case}"] = weakened(case, file, mutate)
    return run_checkov(files, tmp_path_factory.mktemp("policy"))


@pytest.mark.parametrize("name", sorted(n[: -len(".yaml")] for n in TREE))
def test_generated_manifests_pass_the_policy(name, findings):
    failed = sorted(f for f in findings[name] if not excused(*f))
    assert failed == [], f"deploy/k8s/{name}.yaml fails {failed}"


def test_the_loud_options_render_what_they_say(findings):
    # --insecure-no-api-key: open, and it says so in SM12X_INSECURE_NO_API_KEY=1.
    assert not [f for f in findings["open-" + RTX] if not excused(*f)]
    (container,) = containers(docs(RTX, k8s.K8sOptions(insecure_no_api_key=True)))
    assert {"name": "SM12X_INSECURE_NO_API_KEY", "value": "1"} in container["env"]
    # --host-network: only the host-network check fails, nothing else.
    failed = {c for c, r in findings["host-network-" + SPARK] if not excused(c, r)}
    assert failed == {"CKV_K8S_19"}
    # --cache-pvc: a persistent cache the pod's user can write (fsGroup).
    assert not [f for f in findings["cache-pvc-" + RTX] if not excused(*f)]


@pytest.mark.parametrize(
    ("case", "want"), [(c, w) for c, _, _, w in WEAKNESSES], ids=[c for c, *_ in WEAKNESSES]
)
def test_the_policy_fails_on_each_weakness(case, want, findings):
    failed = {check for check, _ in findings[f"weak-{case}"]}
    assert want <= failed, (
        f"{case}: {sorted(want - failed)} did not fail (failed: {sorted(failed)})"
    )


def test_every_exception_has_a_reason():
    for reason in [*GLOBAL_SKIPS.values(), *EXCEPTIONS.values()]:
        assert len(reason) > 40


def test_policy_objects_cover_both_lws_templates():
    objects = policy_objects(docs(SPARK))
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "StatefulSet"]
    assert names == [f"sm12x-{SPARK}-leader", f"sm12x-{SPARK}-worker"]
    assert load_recipe(SPARK).is_multinode
