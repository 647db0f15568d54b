"""The environment sglang and the router start with: built, never inherited.

What they get is exactly what the recipe's `env:` renders (sm12x.launch.render),
what the settings give (the API key, for sm12x.keyed) and what ALLOWLIST
passes from the caller. A caller's variable that sglang reads
(sm12x/launch/sglang_env.json, found in each track's whole tree by
tests/support/sglang_env_reads.py, and any SGLANG_/SGL_ name) that none of
these give is refused in one line naming it, in a dry run too: a variable set
in a shell must not switch on a debug server, move a route under a keyless
prefix, or re-enable a verify mode the recipe refused. Anything else the caller
set (a variable neither sglang nor the allowlist names) is not passed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from sm12x.errors import UserError

READS_FILE = Path(__file__).parent / "launch" / "sglang_env.json"
# sglang's own namespace: a name there is read by sglang or reserved by it.
SGLANG_PREFIXES = ("SGLANG_", "SGL_")

# What passes from the caller, each with why. A name ending in "*" is a prefix.
ALLOWLIST: dict[str, str] = {
    "PATH": "where the interpreter and CUDA's tools are (the base images put a venv and "
    "/usr/local/cuda/bin there)",
    "HOME": "the user's home: tools without a cache variable of their own write under it",
    "LANG": "the locale Python decodes file names with",
    "LC_*": "the locale Python decodes file names with",
    "TZ": "log timestamps in the site's time zone",
    "TMPDIR": "where temporary files go (sglang and torch write some)",
    "HOSTNAME": "the container's name, which sglang and torch log",
    "PYTHONUNBUFFERED": "the image sets it: log lines reach `docker logs` at once",
    "PYTHONPATH": "packages outside site-packages (a checkout of sm12x run from source)",
    "LD_LIBRARY_PATH": "where the CUDA base image's libraries are found",
    "LIBRARY_PATH": "where the CUDA base image's libraries are found at JIT link time",
    "CUDA_*": "the CUDA runtime and toolkit: which GPUs (CUDA_VISIBLE_DEVICES), their order, "
    "the toolkit (CUDA_HOME), the PTX cache (CUDA_CACHE_PATH)",
    "NVIDIA_*": "the NVIDIA container runtime's variables the CUDA base image sets",
    "NV_*": "the CUDA base image's version records",
    "NCCL_*": "NCCL's transport for the site's fabric (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...)",
    "GLOO_SOCKET_IFNAME": "the interface torch's gloo binds on a multi-node rig",
    "TP_SOCKET_IFNAME": "the interface torch's tensorpipe binds on a multi-node rig",
    "NVSHMEM_*": "NVSHMEM's transport (the sglang base image sets NVSHMEM_DIR)",
    "GDRCOPY_HOME": "the sglang base image's GDRCopy",
    "HF_*": "the Hugging Face cache and offline switch (HF_HOME, HF_HUB_OFFLINE), and a "
    "token for a gated download",
    "TRANSFORMERS_*": "transformers' offline switch and cache",
    "XDG_CACHE_HOME": "the cache of tools that follow the XDG convention (tvm-ffi, cutlass-dsl)",
    "FLASHINFER_*": "flashinfer's JIT workspace and its build switches",
    "TRITON_*": "Triton's kernel cache",
    "TORCHINDUCTOR_*": "torch.compile's cache",
    "TORCH_*": "torch's build and debug switches (TORCH_CUDA_ARCH_LIST, TORCH_NCCL_*)",
    "PYTORCH_*": "torch's allocator (PYTORCH_CUDA_ALLOC_CONF)",
    "SGLANG_DG_CACHE_DIR": "DeepGEMM's JIT cache: the image sets it under the cache volume",
    "TVM_FFI_CACHE_DIR": "tvm-ffi's JIT cache (sglang 0.5.17's JIT kernels): the image sets it "
    "under the cache volume",
    "TILELANG_CACHE_DIR": "TileLang's kernel cache (DeepSeek-V4's MHC prenorm): sglang 0.5.23 "
    "sets it itself when its environ module is imported, as the launcher's parser check does",
    "SGLANG_JIT_CACHE_DIR": "sglang 0.5.23's JIT kernel cache: the image sets it under the "
    "cache volume",
    "OMP_NUM_THREADS": "CPU threads per process",
    "MKL_NUM_THREADS": "CPU threads per process",
    "TOKENIZERS_PARALLELISM": "the tokenizer's thread pool",
}

# Names sglang reads only for its own CI (warm-up, core-dump upload, test
# reports): not passed, and not refused, so a launch from a CI job serves as
# it would anywhere (the launcher says it left them out).
DROPPED: dict[str, str] = {
    "CI": "sglang's multimodal warm-up changes under its own CI",
    "GITHUB_*": "sglang uploads core dumps and test reports from its own CI",
    "RUNNER_*": "sglang's CI runner's folders and names",
    "PYTEST_*": "sglang's own tests",
    "COVERAGE_PROCESS_START": "sglang's own tests",
}

FIX = (
    "unset it, or set it in the recipe's env: (a variable sglang reads is passed only from "
    "the recipe, the settings or sm12x/launch_env.py's ALLOWLIST)"
)


def _listed(name: str, table: Mapping[str, str]) -> bool:
    return any(
        name.startswith(entry[:-1]) if entry.endswith("*") else entry == name for entry in table
    )


def allowed(name: str) -> bool:
    """True when ALLOWLIST passes `name` from the caller."""
    return _listed(name, ALLOWLIST)


def dropped(environ: Mapping[str, str]) -> list[str]:
    """The caller's CI variables left out (DROPPED), sorted."""
    return sorted(n for n in environ if _listed(n, DROPPED) and not allowed(n))


@functools.cache
def sglang_reads() -> dict[str, str]:
    """Every variable a track's sglang reads, with where (both tracks merged)."""
    data = json.loads(READS_FILE.read_text(encoding="utf-8"))
    merged: dict[str, str] = {}
    for version in sorted(data):
        for name, where in data[version].items():
            merged.setdefault(name, f"sglang {version} {where}")
    return merged


def sglang_reads_name(name: str) -> bool:
    return name.startswith(SGLANG_PREFIXES) or name in sglang_reads()


def refused(environ: Mapping[str, str], given: Iterable[str]) -> list[str]:
    """The caller's variables sglang reads that nothing here gives, sorted."""
    have = set(given)
    return sorted(
        n
        for n in environ
        if n not in have and not allowed(n) and not _listed(n, DROPPED) and sglang_reads_name(n)
    )


def refusal(names: list[str], program: str = "sglang") -> str:
    first = names[0]
    where = sglang_reads().get(first, "its SGLANG_ namespace")
    others = f" (and {', '.join(names[1:])})" if len(names) > 1 else ""
    return (
        f"{first}{others} is set in the environment and {program} reads it ({where}), but "
        f"neither the recipe nor the allowlist passes it: {FIX}"
    )


def passed(environ: Mapping[str, str], given: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted part of `environ` with `given` over it (the router's: it
    reads none of sglang's variables, so nothing is refused)."""
    env = {n: v for n, v in environ.items() if allowed(n)}
    env.update(given)
    return env


def build(
    environ: Mapping[str, str], given: Mapping[str, str], program: str = "sglang"
) -> dict[str, str]:
    """The environment to exec with: the allowlisted part of `environ`, then `given`
    (the recipe's rendered env and the settings') over it. Raises UserError naming
    the first caller variable sglang reads that neither gives."""
    names = refused(environ, given)
    if names:
        raise UserError(refusal(names, program))
    return passed(environ, given)
