"""A bundle's provenance: bench's (sm12x.bench.provenance.collect: the image,
versions, GPUs, each with its source), extended with what a qualification needs
(the track and its patch series' hash, the model's revision and weights index
hash, driver and CUDA, GPU count, PCIe links, P2P, IOMMU, power limits).

It keeps names and versions only: never a serial, GPU UUID, host name, IP
address, absolute path or key (model_path and the tokenizer's folder become
their last part; nvidia-smi is asked for fields that hold none of those). What
cannot be found is null with the reason in `unknown`.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path
from typing import Any

from sm12x.bench import provenance
from sm12x.patches import series as patch_series
from sm12x.paths import data_path
from sm12x.qualify.bundle import Provenance
from sm12x.versions import load_versions, tracks

LINKS = "pcie.link.gen.max,pcie.link.width.max,power.limit,driver_version"
TIMEOUT = 20.0


def series_hashes() -> dict[str, str]:
    out = {}
    folder = data_path("patches") / "sglang"
    for track in tracks():
        version = load_versions(track)["SGLANG_VERSION"]
        digest = hashlib.sha256()
        for entry in sorted(patch_series.series(version), key=lambda e: str(e.get("file"))):
            name = str(entry.get("file"))
            digest.update(name.encode() + b"\0")
            path = folder / name
            digest.update(path.read_bytes() if path.is_file() else b"(missing)")
        out[track] = "sha256:" + digest.hexdigest()
    return out


def _nvidia_smi(args: list[str]) -> tuple[str | None, str | None]:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None, "nvidia-smi is not on PATH here"
    return provenance.run([binary, *args], TIMEOUT)


def weights_index(model_dir: str | None) -> tuple[str | None, str | None]:
    if not model_dir:
        return None, "SM12X_MODEL_DIR is not set here"
    path = Path(model_dir) / "model.safetensors.index.json"
    if not path.is_file():
        return None, "no model.safetensors.index.json in SM12X_MODEL_DIR"
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest(), None


def base_names(server: dict[str, Any]) -> dict[str, Any]:
    """The server's summary with paths cut to their last part."""
    out = dict(server)
    for key in ("model_path", "speculative_dspark_sps_table_path", "tokenizer_path"):
        if isinstance(out.get(key), str) and "/" in out[key]:
            out[key] = out[key].rstrip("/").rsplit("/", 1)[-1]
    return out


def collect(
    base_url: str,
    info: dict | None,
    track: str,
    model_dir: str | None,
    overrides: provenance.Overrides,
) -> tuple[Provenance, dict[str, Any], list[str]]:
    """(the provenance, the server's arguments with base names, notes)."""
    facts = provenance.collect(base_url, info, sys.executable, overrides, timeout=TIMEOUT)
    unknown: dict[str, str] = {
        k: v for k, v in facts.environment.sources.items() if v.startswith("unknown")
    }
    summary = base_names(facts.server)
    revision = summary.get("revision")
    if not revision:
        unknown["model_revision"] = "the server's /server_info names no revision"
    index, why = weights_index(model_dir)
    if why:
        unknown["weights_index_sha256"] = why
    out, problem = _nvidia_smi([f"--query-gpu={LINKS}", "--format=csv,noheader,nounits"])
    pcie: list[dict[str, str]] = []
    power: list[float] = []
    driver = facts.environment.gpu_driver
    if out is None:
        unknown["pcie"] = unknown["power_limits_w"] = f"nvidia-smi: {problem}"
    else:
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 4:
                unknown["pcie"] = "nvidia-smi printed no PCIe/power fields"
                break
            pcie.append({"gen": parts[0], "width": parts[1]})
            try:
                power.append(float(parts[2]))
            except ValueError:
                unknown["power_limits_w"] = f"nvidia-smi power.limit: {parts[2][:40]}"
            driver = driver or parts[3]
    cuda = None
    head, problem = _nvidia_smi([])
    for line in (head or "").splitlines():
        if "CUDA Version:" in line:
            cuda = line.split("CUDA Version:", 1)[1].split()[0].strip(" |")
    if cuda is None:
        unknown["cuda"] = f"nvidia-smi printed no CUDA version ({problem or 'not in its header'})"
    p2p, problem = _nvidia_smi(["topo", "-p2p", "r"])
    if p2p is None:
        unknown["p2p"] = f"nvidia-smi topo: {problem}"
    else:
        # Rows and columns are named GPU0..GPUn: keep the matrix, drop nothing else.
        p2p = "\n".join(line.rstrip() for line in p2p.splitlines() if line.strip())[:4000]
    iommu_dir = Path("/sys/class/iommu")
    iommu = None
    if iommu_dir.is_dir():
        iommu = "on" if any(iommu_dir.iterdir()) else "off"
    else:
        unknown["iommu"] = "/sys/class/iommu is not readable here"
    if driver is None:
        unknown["driver"] = "nvidia-smi gave no driver version"
    result = Provenance(
        mock=provenance.is_mock(info),
        environment=facts.environment,
        track=track,
        patch_series=series_hashes(),
        model_revision=revision,
        weights_index_sha256=index,
        driver=driver,
        cuda=cuda,
        gpu_count=len(facts.environment.gpus),
        pcie=pcie,
        p2p=p2p,
        iommu=iommu,
        power_limits_w=power,
        unknown=unknown,
    )
    return result, summary, facts.notes


# Fields a rig's bundle must have found (a mock's may lack them: it is never verified).
REQUIRED = (
    "model_revision",
    "weights_index_sha256",
    "driver",
    "cuda",
    "pcie",
    "power_limits_w",
)


def incomplete(p: Provenance) -> list[str]:
    missing = [name for name in REQUIRED if getattr(p, name) in (None, [], "")]
    env = p.environment
    if not env.gpus:
        missing.append("environment.gpus")
    for key in ("sglang_version", "flashinfer_version", "torch_version"):
        if getattr(env, key) is None:
            missing.append(f"environment.{key}")
    missing += [f"nodes[{n.rank}].gpus" for n in p.nodes if not n.gpus]
    if env.image.digest is None and env.image.id is None:
        missing.append("environment.image.digest")
    return missing
