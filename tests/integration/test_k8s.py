"""Kubernetes manifests (sm12x/deploy/k8s.py, deploy/k8s/): validated, generated, and
checked against the recipes and against compose.yaml.

Validation: every Kubernetes object is validated by kubernetes-validate
against the Kubernetes 1.32 schemas in strict mode (unknown fields are
errors). LeaderWorkerSet is a custom resource, and its CRD's schema is not
available offline (kubernetes-validate ships only built-in kinds, and the
upstream CRD is about 1.2 MB of generated OpenAPI not vendored here). So the
LWS objects are checked in two parts: their leader and worker pod templates
are validated as core v1 PodTemplates (the PodTemplateSpec type the CRD
embeds) with the same strict schemas, and the LWS envelope by a structural
schema below, written from the leaderworkerset.x-k8s.io/v1 API's fields. That
structural schema is not the CRD's: it catches misspelt or misplaced fields
and bad enum values in the envelope, not everything the API server would.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from sm12x.deploy import k8s
from sm12x.deploy.router import RouterSettings, command
from sm12x.keyed import with_key
from sm12x.launch.plan import build_launch
from sm12x.launch.render import LaunchContext
from sm12x.recipe import load_all
from sm12x.settings import Settings, env_name, load, meta
from tests.support.cli import assert_one_clear_error, run_sm12x
from tests.support.compose import config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "k8s"
RECIPES = load_all()
OPTS = k8s.K8sOptions()
TREE = k8s.tree(OPTS)


def docs_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


ALL_DOCS = [(name, doc) for name, text in sorted(TREE.items()) for doc in docs_of(text)]


def doc_id(item) -> str:
    name, doc = item
    return f"{name}:{doc['kind']}/{doc['metadata']['name']}"


def workload(recipe) -> dict:
    workload, policy = docs_of(TREE[f"{recipe.name}.yaml"])
    assert policy["kind"] == "NetworkPolicy"
    return workload


def pod_templates(recipe) -> dict[str, dict]:
    """role -> pod template (server, and worker for a multi-node recipe)."""
    doc = workload(recipe)
    if doc["kind"] == "Deployment":
        return {"server": doc["spec"]["template"]}
    lwt = doc["spec"]["leaderWorkerTemplate"]
    return {"server": lwt["leaderTemplate"], "worker": lwt["workerTemplate"]}


def router_docs() -> dict[str, dict]:
    return {d["kind"]: d for d in docs_of(TREE["router.yaml"])}


# --- generated, checked in ----------------------------------------------------------


def test_render_prints_the_checked_in_manifests():
    for recipe in RECIPES:
        result = run_sm12x("render", "--k8s", recipe.name)
        assert result.returncode == 0, result.stderr
        assert result.stdout == (DEPLOY / f"{recipe.name}.yaml").read_text()
    result = run_sm12x("render", "--k8s", "router")
    assert result.stdout == (DEPLOY / "router.yaml").read_text()


def test_render_writes_the_tree(tmp_path):
    result = run_sm12x("render", "--k8s", "all", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == TREE


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--k8s", "all"], "--out"),
        (["--k8s", "router", "--port", "1"], "--port"),
        (["--k8s", "rtx-pro-6000-tp4", "--explain"], "--explain"),
        (["rtx-pro-6000-tp4", "--model-pvc", "m"], "--k8s"),
        (["--k8s", "rtx-pro-6000-tp4", "--model-pvc", "m", "--model-host-path", "/m"], "not both"),
        (["--k8s", "no-such-rig"], "no-such-rig"),
    ],
)
def test_render_bad_input_is_one_clear_error(args, needle):
    assert_one_clear_error(run_sm12x("render", *args), needle)


# --- valid against Kubernetes ----------------------------------------------------------


@pytest.mark.parametrize(
    "item", [i for i in ALL_DOCS if i[1]["kind"] != "LeaderWorkerSet"], ids=doc_id
)
def test_every_object_validates_against_kubernetes(item):
    _, doc = item
    kubernetes_validate.validate(doc, k8s.K8S_VERSION, strict=True)


def as_pod_template(template: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "t"},
        "template": template,
    }


LWS_MULTINODE = [r for r in RECIPES if r.is_multinode]


@pytest.mark.parametrize("recipe", LWS_MULTINODE, ids=lambda r: r.name)
def test_lws_pod_templates_validate_as_kubernetes_pod_templates(recipe):
    for template in pod_templates(recipe).values():
        kubernetes_validate.validate(as_pod_template(template), k8s.K8S_VERSION, strict=True)


# Structural schema of the LeaderWorkerSet envelope (leaderworkerset.x-k8s.io/v1),
# from the API's documented fields; NOT the CRD's own schema (see the docstring).
_POD_TEMPLATE = {
    "type": "object",
    "required": ["spec"],
    "properties": {"metadata": {"type": "object"}, "spec": {"type": "object"}},
    "additionalProperties": False,
}
LWS_STRUCTURE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "leaderworkerset.x-k8s.io/v1"},
        "kind": {"const": "LeaderWorkerSet"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["leaderWorkerTemplate"],
            "additionalProperties": False,
            "properties": {
                "replicas": {"type": "integer", "minimum": 0},
                "startupPolicy": {"enum": ["LeaderCreated", "LeaderReady"]},
                "rolloutStrategy": {"type": "object"},
                "networkConfig": {
                    "type": "object",
                    "properties": {"subdomainPolicy": {"enum": ["Shared", "UniquePerReplica"]}},
                },
                "leaderWorkerTemplate": {
                    "type": "object",
                    "required": ["workerTemplate"],
                    "additionalProperties": False,
                    "properties": {
                        "leaderTemplate": _POD_TEMPLATE,
                        "workerTemplate": _POD_TEMPLATE,
                        "size": {"type": "integer", "minimum": 1},
                        "restartPolicy": {
                            "enum": [
                                "RecreateGroupOnPodRestart",
                                "RecreateGroupAfterStart",
                                "None",
                                "Default",
                            ]
                        },
                        "subGroupPolicy": {"type": "object"},
                        "volumeClaimTemplates": {"type": "array"},
                    },
                },
            },
        },
    },
}


@pytest.mark.parametrize("recipe", LWS_MULTINODE, ids=lambda r: r.name)
def test_lws_envelope_structure(recipe):
    jsonschema.validate(workload(recipe), LWS_STRUCTURE)


def test_the_validators_really_reject_mistakes():
    deployment = workload(next(r for r in RECIPES if not r.is_multinode))
    broken = copy.deepcopy(deployment)
    broken["spec"]["replica"] = 1  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, k8s.K8S_VERSION, strict=True)
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["resources"]["limit"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, k8s.K8S_VERSION, strict=True)
    for recipe in LWS_MULTINODE:
        lws = copy.deepcopy(workload(recipe))
        lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(lws, LWS_STRUCTURE)
        lws = copy.deepcopy(workload(recipe))
        lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["hostNetwrok"] = True
        with pytest.raises(kubernetes_validate.ValidationError):
            template = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
            kubernetes_validate.validate(as_pod_template(template), k8s.K8S_VERSION, strict=True)


# --- what the recipes say ----------------------------------------------------------------


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_one_workload_per_recipe(recipe):
    doc = workload(recipe)
    if recipe.is_multinode:
        assert doc["kind"] == "LeaderWorkerSet"
        assert doc["spec"]["leaderWorkerTemplate"]["size"] == recipe.hardware.nodes
        assert doc["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    else:
        assert doc["kind"] == "Deployment"
        assert doc["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_pods_get_the_recipes_hardware(recipe):
    for template in pod_templates(recipe).values():
        spec = template["spec"]
        (container,) = spec["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == recipe.gpu_count_per_node
        arch = {"x86_64": "amd64", "aarch64": "arm64"}[recipe.hardware.cpu_arch]
        assert spec["nodeSelector"] == {"kubernetes.io/arch": arch}
        want = recipe.container
        # The RoCE link comes from a Multus network, not the host's (--host-network).
        assert "hostNetwork" not in spec
        if want.host_network:
            networks = template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
            assert networks == OPTS.roce_network
        else:
            assert "annotations" not in template["metadata"]
        security = container["securityContext"]
        assert security["capabilities"] == (
            {"drop": ["ALL"], "add": want.cap_add} if want.cap_add else {"drop": ["ALL"]}
        )
        assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
        # Devices come from the RDMA device plugin: no host path under /dev.
        assert not [v for v in spec["volumes"] if "hostPath" in v and v["name"] != "model"]
        limits = container["resources"]["limits"]
        assert (OPTS.rdma_resource in limits) == bool(want.devices)


@pytest.mark.parametrize("recipe", LWS_MULTINODE, ids=lambda r: r.name)
def test_rdma_resource_and_roce_network_can_be_named(recipe):
    opts = k8s.K8sOptions(rdma_resource="nvidia.com/hostdev", roce_network="infra/roce-a")
    lws, _ = k8s.rig_manifests(recipe, opts)
    for key in ("leaderTemplate", "workerTemplate"):
        template = lws["spec"]["leaderWorkerTemplate"][key]
        (container,) = template["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/hostdev"] == 1
        assert template["metadata"]["annotations"] == {
            "k8s.v1.cni.cncf.io/networks": "infra/roce-a"
        }
        kubernetes_validate.validate(as_pod_template(template), k8s.K8S_VERSION, strict=True)


@pytest.mark.parametrize("recipe", LWS_MULTINODE, ids=lambda r: r.name)
def test_host_network_only_when_asked(recipe):
    lws, _ = k8s.rig_manifests(recipe, k8s.K8sOptions(host_network=True))
    for key in ("leaderTemplate", "workerTemplate"):
        template = lws["spec"]["leaderWorkerTemplate"][key]
        spec = template["spec"]
        assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert "annotations" not in template["metadata"]
        (container,) = spec["containers"]
        host = next(e for e in container["env"] if e["name"] == "SM12X_HOST")
        assert host["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        # Still not privileged, still no host devices.
        assert container["securityContext"]["privileged"] is False
        kubernetes_validate.validate(as_pod_template(template), k8s.K8S_VERSION, strict=True)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_the_model_is_mounted_read_only(recipe):
    for opts in (OPTS, k8s.K8sOptions(model_pvc="deepseek-v4-flash")):
        doc, _ = k8s.rig_manifests(recipe, opts)
        templates = (
            [doc["spec"]["template"]]
            if doc["kind"] == "Deployment"
            else [
                doc["spec"]["leaderWorkerTemplate"][k] for k in ("leaderTemplate", "workerTemplate")
            ]
        )
        for template in templates:
            (container,) = template["spec"]["containers"]
            (mount,) = [m for m in container["volumeMounts"] if m["name"] == "model"]
            assert (mount["mountPath"], mount["readOnly"]) == ("/model", True)
            (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "model"]
            if opts.model_pvc:
                assert volume["persistentVolumeClaim"] == {
                    "claimName": "deepseek-v4-flash",
                    "readOnly": True,
                }
            else:
                assert volume["hostPath"] == {"path": opts.model_host_path, "type": "Directory"}
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["SM12X_MODEL_DIR"] == "/model"


def test_model_default_is_the_env_example_folder():
    text = (ROOT / ".env.example").read_text()
    (folder,) = re.findall(r"(?m)^SM12X_MODEL_DIR=(.*)$", text)
    assert OPTS.model_host_path == folder


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_site_values_are_optional_and_the_api_key_secret_is_required(recipe):
    site = [name for name, var in recipe.env.items() if var.from_host]
    for template in pod_templates(recipe).values():
        (container,) = template["spec"]["containers"]
        refs = {e["name"]: e["valueFrom"] for e in container["env"] if "valueFrom" in e}
        for name in site:
            assert refs[name]["configMapKeyRef"] == {
                "name": "sm12x-site",
                "key": name,
                "optional": True,
            }
        # The key is a file from a required Secret, never an environment variable.
        assert "SM12X_API_KEY" not in {e["name"] for e in container["env"]}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["SM12X_API_KEY_FILE"] == "/run/secrets/sm12x/api-key"
        (volume,) = [v for v in template["spec"]["volumes"] if "secret" in v]
        assert volume["secret"]["secretName"] == "sm12x-api-key"
        assert volume["secret"]["optional"] is False
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert (mount["mountPath"], mount["readOnly"]) == ("/run/secrets/sm12x", True)


def test_an_open_deployment_says_so_everywhere():
    opts = k8s.K8sOptions(insecure_no_api_key=True)
    for recipe in RECIPES:
        text = k8s.render(recipe.name, opts)
        assert "# OPEN: rendered with --insecure-no-api-key" in text
        assert "SM12X_INSECURE_NO_API_KEY" in text and "secretName" not in text
    assert "# OPEN" in k8s.render("router", opts)


def test_no_sglang_flag_is_written_in_the_manifests():
    # The pods run `sm12x launch`, which renders the flags from the recipe.
    # (`sm12x healthcheck --router` is the router's probe: sm12x's flag.)
    text = "".join(TREE.values()).replace("- --router\n", "")
    assert not re.search(r"(?m)^[^#]*\s--[a-z]", text)
    for recipe in RECIPES:
        for name in recipe.flags:
            assert name not in text
        for template in pod_templates(recipe).values():
            (container,) = template["spec"]["containers"]
            assert container["command"] == ["sm12x", "launch"]
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["SM12X_RECIPE"] == recipe.name


# --- the pods launch what compose launches ---------------------------------------------------


def kubernetes_env(
    container: dict,
    injected: dict[str, str],
    fields: dict[str, str],
    configmap: dict[str, str],
    secret: dict[str, str],
) -> dict[str, str]:
    """The environment the kubelet gives the container: injected variables first
    (as the LWS webhook prepends its own), then the list in order, $(VAR)
    expanded from what is defined before it, optional refs skipped if absent."""
    env = dict(injected)
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = re.sub(
                r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), item["value"]
            )
            continue
        ref = item["valueFrom"]
        if "fieldRef" in ref:
            env[item["name"]] = fields[ref["fieldRef"]["fieldPath"]]
        elif "configMapKeyRef" in ref and ref["configMapKeyRef"]["key"] in configmap:
            env[item["name"]] = configmap[ref["configMapKeyRef"]["key"]]
        elif "secretKeyRef" in ref and ref["secretKeyRef"]["key"] in secret:
            env[item["name"]] = secret[ref["secretKeyRef"]["key"]]
    return env


def settings_of(env: dict[str, str]):
    """What sm12x reads in the pod: its environment, no .env."""
    return load(environ=env, env_file=os.devnull)


def test_pods_get_settings_under_their_one_name():
    names = {env_name(n) for n in Settings.model_fields}
    old = {o for n in Settings.model_fields for o in meta(n).old}
    for doc in [d for text in TREE.values() for d in docs_of(text)]:
        spec = doc.get("spec", {})
        templates = (
            [spec["template"]]
            if "template" in spec
            else [spec["leaderWorkerTemplate"][k] for k in ("leaderTemplate", "workerTemplate")]
            if "leaderWorkerTemplate" in spec
            else []
        )
        for template in templates:
            for container in template["spec"]["containers"]:
                for item in container.get("env", []):
                    assert item["name"] not in old, item["name"]
                    if item["name"].startswith("SM12X_"):
                        assert item["name"] in names, item["name"]


def argv_dict(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, token in enumerate(argv):
        if token.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[token] = None if nxt is None or nxt.startswith("--") else nxt
    return out


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_pods_launch_the_recipe_with_their_rank_and_leader(recipe, tmp_path):
    leader = f"sm12x-{recipe.name}-0.sm12x-{recipe.name}.sm12x"
    site = {name: var.example or "x" for name, var in recipe.env.items() if var.from_host}
    # The Secret as the kubelet mounts it, at a path this test can write.
    key_file = tmp_path / "api-key"
    key_file.write_text("sk-k8s\n")
    for rank, (role, template) in enumerate(pod_templates(recipe).items()):
        (container,) = template["spec"]["containers"]
        # What every LWS release gives a pod: the leader's address and the group
        # size prepended to the environment, and the worker-index label.
        injected = (
            {"LWS_LEADER_ADDRESS": leader, "LWS_GROUP_SIZE": str(recipe.hardware.nodes)}
            if recipe.is_multinode
            else {}
        )
        fields = {
            "status.podIP": f"10.0.0.{rank + 1}",
            "metadata.namespace": "sm12x",
            f"metadata.labels['{k8s.WORKER_INDEX_LABEL}']": str(rank),
        }
        env = kubernetes_env(container, injected, fields, site, {})
        assert env["SM12X_API_KEY_FILE"] == k8s.API_KEY_FILE
        env["SM12X_API_KEY_FILE"] = str(key_file)
        plan = build_launch(recipe, LaunchContext.from_settings(settings_of(env)))
        argv = plan.command("python3", env)
        args = argv_dict(plan.argv(env))
        # The key reaches sglang through sm12x.keyed, in memory: not in argv.
        assert argv[1:4] == ["-m", "sm12x.keyed", "sglang.launch_server"]
        assert "sk-k8s" not in " ".join(argv) and "--api-key" not in args
        assert with_key(plan.argv(env), env)[-1] == "--api-key=sk-k8s"
        assert args["--model-path"] == "/model"
        assert args["--port"] == str(recipe.serve.port)
        assert args["--tp-size"] == str(recipe.flag_value("--tp-size"))
        # Pod networking (the RoCE link is a second interface): bind every address.
        assert args["--host"] == "0.0.0.0"
        if recipe.is_multinode:
            assert args["--node-rank"] == str(rank)
            assert args["--dist-init-addr"] == f"{leader}:{recipe.multinode.dist_init_port}"
            assert role == ("server" if rank == 0 else "worker")
        for name, value in site.items():
            assert plan.env_dict(env)[name] == value
        assert plan.unresolved(env) == []


# --- probes are compose's healthcheck ----------------------------------------------------------


@pytest.fixture(scope="module")
def compose_services(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("env")
    (tmp / "model").mkdir()
    text = re.sub(
        r"(?m)^SM12X_MODEL_DIR=.*$",
        f"SM12X_MODEL_DIR={tmp / 'model'}",
        (ROOT / ".env.example").read_text(),
    )
    (tmp / ".env").write_text(text)
    return config("*", env_file=tmp / ".env")["services"]


def seconds(duration: str) -> int:
    total = 0
    for amount, unit in re.findall(r"(\d+)([hms])", duration):
        total += int(amount) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


def compose_health(service: dict) -> k8s.Health:
    h = service["healthcheck"]
    return k8s.Health(
        seconds(h["interval"]), seconds(h["timeout"]), h["retries"], seconds(h["start_period"])
    )


def assert_readiness_is_the_healthcheck(container: dict, service: dict, health) -> None:
    """The pod's readiness probe runs compose's healthcheck command, on its timings."""
    ready = container["readinessProbe"]
    assert ["CMD", *ready["exec"]["command"]] == service["healthcheck"]["test"]
    assert (ready["periodSeconds"], ready["timeoutSeconds"], ready["failureThreshold"]) == (
        health.interval,
        health.timeout,
        health.retries,
    )


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_rig_probes_are_the_compose_healthcheck(recipe, compose_services):
    profile = f"{recipe.name}-node0" if recipe.is_multinode else recipe.name
    service = compose_services[profile]
    health = compose_health(service)
    assert health == k8s.RIG_HEALTH
    (container,) = pod_templates(recipe)["server"]["spec"]["containers"]
    # Readiness: compose's healthcheck, one generated token, with its timings.
    assert_readiness_is_the_healthcheck(container, service, health)
    # Startup and liveness: sglang's /health (200 once any output arrived, no
    # key needed), so a saturated pod is not restarted for a slow token.
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
        assert container[probe]["periodSeconds"] == health.interval
        # sglang's own wait (SGLANG_HEALTH_CHECK_TIMEOUT, 20 s) fits in the probe's.
        assert container[probe]["timeoutSeconds"] > 20
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= health.start_period
    assert container["livenessProbe"]["failureThreshold"] == health.retries
    assert pod_templates(recipe)["server"]["spec"]["terminationGracePeriodSeconds"] == seconds(
        service["stop_grace_period"]
    )
    if recipe.is_multinode:
        # No HTTP server on the other nodes: no probes, as compose disables node1's.
        (worker,) = pod_templates(recipe)["worker"]["spec"]["containers"]
        assert not {"startupProbe", "livenessProbe", "readinessProbe"} & set(worker)
        assert compose_services[f"{recipe.name}-node1"]["healthcheck"] == {"disable": True}


def test_router_probes_match_the_compose_router(compose_services):
    service = compose_services["router"]
    health = compose_health(service)
    assert health == k8s.ROUTER_HEALTH
    (container,) = router_docs()["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert_readiness_is_the_healthcheck(container, service, health)
    assert container["livenessProbe"]["httpGet"] == {"path": "/liveness", "port": "http"}
    spec = router_docs()["Deployment"]["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == seconds(service["stop_grace_period"])


# --- the router finds exactly the serving pods -----------------------------------------------


def router_env() -> dict[str, str]:
    """The router's environment, with the key file the Secret would mount left out."""
    (container,) = router_docs()["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = kubernetes_env(container, {}, {"metadata.namespace": "sm12x"}, {}, {})
    assert env.pop("SM12X_API_KEY_FILE") == k8s.API_KEY_FILE
    return env


def test_router_runs_sm12x_router_with_discovery():
    from sglang_router.launch_router import parse_router_args

    (container,) = router_docs()["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["sm12x", "router"]
    env = router_env()
    parsed = parse_router_args(
        command(RouterSettings.from_settings(settings_of(env)), environ=env)[3:]
    )
    assert parsed.service_discovery is True
    assert parsed.service_discovery_namespace == "sm12x"
    assert parsed.service_discovery_port == RECIPES[0].serve.port
    assert parsed.worker_urls == []
    assert parsed.policy == "cache_aware"
    assert (parsed.host, parsed.port) == ("0.0.0.0", 8000)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": parsed.port, "metrics": parsed.prometheus_port}


def test_router_selector_matches_serving_pods_only():
    from sglang_router.launch_router import parse_router_args

    env = router_env()
    selector = parse_router_args(
        command(RouterSettings.from_settings(settings_of(env)))[3:]
    ).selector

    def matches(labels: dict) -> bool:  # the router matches every pair exactly
        return all(labels.get(k) == v for k, v in selector.items())

    for recipe in RECIPES:
        templates = pod_templates(recipe)
        assert matches(templates["server"]["metadata"]["labels"]), recipe.name
        if "worker" in templates:
            assert not matches(templates["worker"]["metadata"]["labels"]), recipe.name
        for template in templates.values():
            (container,) = template["spec"]["containers"]
            assert container.get("ports", [{}])[0].get("containerPort", recipe.serve.port) == (
                recipe.serve.port
            )
    router_pod = router_docs()["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert not matches(router_pod)


def test_router_may_watch_pods_in_its_namespace_and_nothing_else():
    docs = router_docs()
    (rule,) = docs["Role"]["rules"]
    assert rule == {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    binding = docs["RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": docs["Role"]["metadata"]["name"],
    }
    account = docs["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": OPTS.namespace}
    ]
    assert docs["ServiceAccount"]["metadata"]["name"] == account


def test_the_service_is_the_routers():
    docs = router_docs()
    service = docs["Service"]
    assert (
        service["spec"]["selector"] == docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    )
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {
        "http": "http",
        "metrics": "metrics",
    }


def test_a_namespace_option_moves_every_object(tmp_path):
    result = run_sm12x("render", "--k8s", "all", "--out", str(tmp_path), "--namespace", "llm")
    assert result.returncode == 0, result.stderr
    for path in tmp_path.iterdir():
        for doc in docs_of(path.read_text()):
            if doc["kind"] == "Namespace":
                assert doc["metadata"]["name"] == "llm"
            else:
                assert doc["metadata"]["namespace"] == "llm", (path.name, doc["kind"])
            if doc["kind"] == "RoleBinding":
                assert doc["subjects"][0]["namespace"] == "llm"
