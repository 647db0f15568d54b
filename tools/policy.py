"""The Kubernetes policy check: checkov, with sm12x's own checks beside its built-in ones.

checkov (Prisma Cloud's IaC scanner, from PyPI) lives in its own virtualenv
(scripts/test makes it at $SM12X_CACHE/checkov, version TEST_CHECKOV_VERSION
in versions.env): its pins would fight the test environment's. It runs
offline (--skip-download: no guideline download, no upload).

checkov knows Deployments, StatefulSets, Pods and PodTemplates, not the
LeaderWorkerSet custom resource. The LWS controller turns a LWS into
StatefulSets (one for the leaders, one per group for the workers) made from
its leaderTemplate and workerTemplate, so each template is checked as such a
StatefulSet (`policy_objects`).

What the generated manifests are allowed to fail, each with its reason
(docs/security.md shows this table): GLOBAL_SKIPS apply to every object,
EXCEPTIONS to the objects named.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CUSTOM_CHECKS = ROOT / "tests" / "policy"

GLOBAL_SKIPS = {
    "CKV_K8S_15": "imagePullPolicy stays IfNotPresent (the default for a tag): restarting a pod "
    "must not depend on the registry; pin what runs with --image NAME@sha256:DIGEST instead",
    "CKV_K8S_22": "a read-only root filesystem is not set: sglang, flashinfer and Triton write "
    "temporary files whose full list has not been measured on a GPU; the caches are on /cache",
    "CKV_K8S_43": "the image is a tag until the project publishes digests "
    "(versions.env SM12X_IMAGE); --image NAME@sha256:DIGEST renders a digest",
}
# (check, kind, name suffix) -> why that object may fail that check.
EXCEPTIONS = {
    ("CKV_K8S_38", "Deployment", "sm12x-router"): "the router watches pods for service "
    "discovery: its service account token is how (a namespaced Role, get/list/watch pods)",
    ("CKV_K8S_25", "StatefulSet", "-leader"): "IPC_LOCK, the one capability RDMA memory "
    "registration can need (ibv_reg_mr pins pages past RLIMIT_MEMLOCK only with it); "
    "SM12X_K8S_5 allows no other, and this one only beside an RDMA device resource",
    ("CKV_K8S_25", "StatefulSet", "-worker"): "as above (the worker rank registers the same "
    "RDMA memory)",
    ("CKV_K8S_8", "StatefulSet", "-worker"): "a Spark worker (rank 1) serves no HTTP: "
    "nothing to probe; if its process dies the container exits and the group restarts",
    ("CKV_K8S_9", "StatefulSet", "-worker"): "as above: no HTTP server, so no readiness; the "
    "router only ever sends to the leader",
}


def checkov_binary() -> Path:
    cache = Path(os.environ.get("SM12X_CACHE", ROOT / ".cache"))
    path = Path(os.environ.get("SM12X_CHECKOV", cache / "checkov" / "bin" / "checkov"))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run scripts/test (it installs checkov)")
    return path


def as_statefulset(lws: dict, key: str, role: str) -> dict:
    meta = lws["metadata"]
    template = copy.deepcopy(lws["spec"]["leaderWorkerTemplate"][key])
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {**meta, "name": f"{meta['name']}-{role}"},
        "spec": {
            "serviceName": meta["name"],
            "selector": {"matchLabels": template["metadata"]["labels"]},
            "template": template,
        },
    }


def policy_objects(docs: Iterable[dict]) -> list[dict]:
    """The objects checkov reads: LWS templates as the StatefulSets made from them."""
    out = []
    for doc in docs:
        if doc["kind"] == "LeaderWorkerSet":
            out.append(as_statefulset(doc, "leaderTemplate", "leader"))
            out.append(as_statefulset(doc, "workerTemplate", "worker"))
        else:
            out.append(doc)
    return out


def run_checkov(files: Mapping[str, list[dict]], tmp: Path) -> dict[str, set[tuple[str, str]]]:
    """{file name: {(check id, resource id) that failed}} for each set of objects."""
    import yaml

    folder = tmp / "manifests"
    folder.mkdir()
    for name, docs in files.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump_all(policy_objects(docs)))
    done = subprocess.run(
        [
            str(checkov_binary()),
            "--directory",
            str(folder),
            "--framework",
            "kubernetes",
            "--external-checks-dir",
            str(CUSTOM_CHECKS),
            "--skip-check",
            ",".join(GLOBAL_SKIPS),
            "--skip-download",
            "--output",
            "json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )
    # checkov exits 1 when a check failed; anything else is checkov failing.
    if done.returncode not in (0, 1):
        raise RuntimeError(f"checkov exit {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    reports = report if isinstance(report, list) else [report]
    failed: dict[str, set[tuple[str, str]]] = {name: set() for name in files}
    for part in reports:
        for check in (part.get("results") or {}).get("failed_checks", []):
            name = Path(check["file_path"]).stem
            failed.setdefault(name, set()).add((check["check_id"], check["resource"]))
    return failed


def excused(check_id: str, resource: str) -> bool:
    """resource is checkov's KIND.NAMESPACE.NAME (graph checks: KIND.NAMESPACE.NAME.labels...)."""
    kind, _, rest = resource.partition(".")
    name = rest.partition(".")[2]
    return any(
        check_id == c and kind == k and name.endswith(suffix) for (c, k, suffix) in EXCEPTIONS
    )


# --- the exceptions, as docs/security.md shows them -------------------------------------------

DOC = ROOT / "docs" / "security.md"
BEGIN = "<!-- policy-exceptions:begin (generated by tools/policy.py) -->"
END = "<!-- policy-exceptions:end -->"


def table() -> str:
    lines = ["| check | applies to | why it is allowed to fail |", "|---|---|---|"]
    lines += [f"| {check} | every object | {why} |" for check, why in GLOBAL_SKIPS.items()]
    lines += [
        f"| {check} | {kind} `*{suffix}` | {why} |"
        for (check, kind, suffix), why in EXCEPTIONS.items()
    ]
    return "\n".join(lines)


def block_in_doc() -> str:
    text = DOC.read_text()
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n")


def render_doc() -> str:
    """docs/security.md with the exceptions table in place (no checkov needed:
    the table is EXCEPTIONS and GLOBAL_SKIPS as written here)."""
    text = DOC.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + table() + "\n" + text[end:]
