"""A recipe's launch through sglang's real argument validation, on a CPU.

    from tests.support.server_args_check import validate, V4_FLASH_0731
    verdict = validate(recipe, node_rank=0, track="current", model_dir=V4_FLASH_0731)
    verdict.ok, verdict.error, verdict.resolved["dp_size"], verdict.warnings

`validate` renders one node of a recipe with sm12x's own `build_launch` (the
argv and environment its compose service execs, `--model-path` pointing at
`model_dir`, a folder holding the checkpoint's config.json), then, in a
subprocess running that track's sglang (the wheel from versions.env, patched by
scripts/apply-patches as the image is; torch CPU), runs what `sglang.launch_server`
runs before it starts any process: the real parser, the whole
`ServerArgs.__post_init__` (defaults, DeepSeek-V4 adjustments, parallelism,
DP attention, MoE, speculative-decoding and memory checks, reading config.json)
and `check_server_args()`. server_args_probe.py is that subprocess.

Only the device is stubbed, because there is none here: torch.cuda answers as
the recipe's GPU would (`GPUS`: name, compute capability, memory, SM count, as
the RTX PRO 6000 Workstation (96 GB, 12.0), GeForce RTX 5090 (32 GB, 12.0) and
GB10 (unified 128 GB, 12.1) report them), torch.version.cuda is 13.0 (the image's
CUDA), and a stand-in `nvidia-smi` on PATH answers sglang's memory query with
the same figure. sglang's code is not touched.

Model configs: tests/fixtures/models/<name>/config.json, written from the
checkpoint's published facts (README.md there says which). Another model (V4.1)
is another folder; pass it as `model_dir`.

`Verdict.ok` is False when sglang would refuse to launch; `error` is its message
(`raise_for_refusal()` turns that into an AssertionError for a test). `resolved`
holds ServerArgs fields after resolution (server_args_probe.RESOLVED), e.g.
chunked_prefill_size after DP attention divided it, max_running_requests after
sglang's DeepSeek-V4 default, speculative_num_draft_tokens; `warnings` every warning sglang
logged while resolving.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sm12x.launch.plan import build_launch  # noqa: E402
from sm12x.mock import serving as sglang_serving  # noqa: E402
from sm12x.mock import wheels  # noqa: E402
from sm12x.recipe import Recipe  # noqa: E402
from sm12x.versions import load_versions  # noqa: E402
from tests.support import server_args_zygotes as zygotes  # noqa: E402
from tools import golden  # noqa: E402

PROBE = Path(__file__).with_name("server_args_probe.py")
MODELS = ROOT / "tests" / "fixtures" / "models"
V4_FLASH_0731 = MODELS / "DeepSeek-V4-Flash-0731"
V41_FLASH = MODELS / "DeepSeek-V4.1-Flash"
LINE_MODELS = {"v4-flash-0731": V4_FLASH_0731, "v4.1-flash": V41_FLASH}


def model_dir(recipe: Recipe) -> Path:
    """The config.json fixture of the recipe's model line."""
    return LINE_MODELS[recipe.model.line]


@dataclass(frozen=True)
class Gpu:
    """What torch.cuda and nvidia-smi report for one GPU."""

    name: str
    capability: tuple[int, int]
    memory_mib: int
    sm_count: int
    integrated: bool = False


# nvidia-smi's names and memory.total (tests/fixtures/nvidia-smi/); GB10 reports no
# memory.total, and its CUDA device is the whole 128 GB of unified memory.
GPUS = {
    "rtx-pro-6000": Gpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0), 97887, 188),
    "rtx-5090": Gpu("NVIDIA GeForce RTX 5090", (12, 0), 32607, 170),
    "gb10": Gpu("NVIDIA GB10", (12, 1), 128 * 1024, 48, integrated=True),
}


@dataclass(frozen=True)
class Verdict:
    recipe: str
    node_rank: int
    track: str
    sglang: str
    argv: list[str]
    env: dict[str, str]
    ok: bool
    error: str | None = None
    resolved: dict = field(default_factory=dict)
    env_defaults: dict = field(default_factory=dict)  # probe's env_defaults (env_claims)
    warnings: list[str] = field(default_factory=list)
    log: str = ""  # the subprocess's stderr (sglang's log), for a failing test

    def raise_for_refusal(self) -> None:
        if not self.ok:
            raise AssertionError(
                f"sglang {self.sglang} ({self.track} track) refuses {self.recipe} node "
                f"{self.node_rank}: {self.error}\n--- its log ---\n{self.log[-3000:]}"
            )


# Variables of the developer's shell that would change what sglang resolves.
_DROPPED_ENV = ("SGLANG_", "SM12X_", "CUDA_VISIBLE_DEVICES", "NCCL_", "HF_", "TORCH_CUDA")


def _fake_nvidia_smi(folder: Path, gpu: Gpu, count: int) -> None:
    script = folder / "nvidia-smi"
    lines = "\\n".join([str(gpu.memory_mib)] * count)
    script.write_text(
        "#!/bin/sh\n"
        "# Stand-in for the GPU's nvidia-smi: answers sglang's memory query only.\n"
        'case "$*" in\n'
        f'  *--query-gpu=memory.total*) printf "{lines}\\n" ;;\n'
        '  *) echo "stand-in nvidia-smi: unexpected query: $*" >&2; exit 9 ;;\n'
        "esac\n"
    )
    script.chmod(0o755)


_CACHE: list[tempfile.TemporaryDirectory] = []


def _cache_dir() -> Path:
    if not _CACHE:
        _CACHE.append(tempfile.TemporaryDirectory(prefix="sm12x-server-args-cache-"))
    return Path(_CACHE[0].name)


def flashinfer_tree(version: str) -> Path:
    """flashinfer-python `version` unpacked once (the track's pin: sglang imports it at
    module level once CUDA is present), renamed into place so a half tree never shows."""
    site = sglang_serving.cache_root() / f"flashinfer-{version}"
    if (site / ".complete").exists():
        return site
    building = site.with_name(f".{site.name}.{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    wheels.unpack("flashinfer-python", version, building, members=("flashinfer/",))
    (building / ".complete").write_text("unpacked\n")
    try:
        building.rename(site)
    except OSError:  # another process got there first
        shutil.rmtree(building, ignore_errors=True)
    return site


def validate(
    recipe: Recipe,
    node_rank: int,
    track: str,
    model_dir: Path = V4_FLASH_0731,
    *,
    gpu: Gpu | None = None,
    env: dict[str, str] | None = None,
    fields: tuple[str, ...] = (),
    env_claims: dict[str, str] | None = None,
    timeout: int = 600,
) -> Verdict:
    """Run sglang's launch-time validation of one node of `recipe` on `track`'s sglang.

    `env` adds or replaces variables after the recipe's (a negative test's mistake).
    `fields`: ServerArgs fields to read back besides server_args_probe.RESOLVED;
    `env_claims`: variables whose sglang default to read, with a claimed value to
    parse as sglang does (Verdict.env_defaults).
    """
    pins = load_versions(track)
    version = pins["SGLANG_VERSION"]
    gpu = gpu or GPUS[recipe.hardware.gpu]
    site = sglang_serving.tree(version, patched=True)
    flashinfer = flashinfer_tree(pins["FLASHINFER_VERSION"])
    with tempfile.TemporaryDirectory(prefix="sm12x-server-args-") as tmp:
        work = Path(tmp)
        context = replace(
            golden.context(recipe, node_rank),
            model_path=str(model_dir),
            # one cache folder per process, not per call: its path is in the
            # environment sglang's import reads (server_args_zygote.py)
            cache_dir=str(_cache_dir()),
        )
        plan = build_launch(recipe, context)
        argv = plan.argv(context.host_env)
        recipe_env = plan.env_dict(context.host_env)
        # Until the launcher renders dspark.ragged_verify (issue 19's launcher part),
        # pass the mode the recipe asks for; a no-op once the plan carries it.
        if recipe.dspark.ragged_verify != "static":
            recipe_env.setdefault("SGLANG_RAGGED_VERIFY_MODE", recipe.dspark.ragged_verify)
        recipe_env.update(env or {})
        _fake_nvidia_smi(work, gpu, recipe.hardware.gpus_per_node)
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_ENV)}
        full_env.update(recipe_env)
        full_env.update(
            {
                "PATH": f"{work}{os.pathsep}{os.environ.get('PATH', '')}",
                "PYTHONPATH": os.pathsep.join(
                    [*wheels.pythonpath(version), str(site), str(flashinfer), str(ROOT)]
                ),
                "HF_HUB_OFFLINE": "1",
                "OMP_NUM_THREADS": "1",
                "HOME": str(work),
            }
        )
        request = {
            "argv": argv,
            "fields": list(fields),
            "env_claims": dict(env_claims or {}),
            "gpus": recipe.hardware.gpus_per_node,
            "gpu": {
                "name": gpu.name,
                "capability": list(gpu.capability),
                "memory_mib": gpu.memory_mib,
                "sm_count": gpu.sm_count,
                "integrated": gpu.integrated,
            },
        }
        if zygotes.enabled():
            out = ZYGOTES.ask(full_env, work, request, timeout)
            if out is not None:
                return _verdict(recipe, node_rank, track, version, argv, recipe_env, out)
        proc = subprocess.run(
            [sys.executable, str(PROBE)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            cwd=work,
        )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        crash = f"the probe exited {proc.returncode}: {proc.stderr[-2000:]}"
        out = {"ok": False, "warnings": [], "log": proc.stderr}
        return _verdict(recipe, node_rank, track, version, argv, recipe_env, out, error=crash)
    out = json.loads(lines[-1])
    out["log"] = proc.stderr
    return _verdict(recipe, node_rank, track, version, argv, recipe_env, out)


def _verdict(
    recipe, node_rank, track, version, argv, recipe_env, out: dict, error: str | None = None
) -> Verdict:
    """The Verdict of one probe answer (one-shot or zygote); `error` for a probe
    that gave none."""
    log = out.get("log", "")
    if not out["ok"] and out.get("traceback"):
        log = log + "\n" + out["traceback"]
    return Verdict(
        recipe=recipe.name,
        node_rank=node_rank,
        track=track,
        sglang=version,
        argv=argv,
        env=recipe_env,
        log=log,
        ok=out["ok"],
        error=error or (None if out["ok"] else f"{out['type']}: {out['error']}"),
        resolved=out.get("resolved", {}),
        env_defaults=out.get("env_defaults", {}),
        warnings=out["warnings"],
    )


# One sglang import per track and GPU, a fork per validation (server_args_zygote.py).
ZYGOTES = zygotes.Zygotes(PROBE)
