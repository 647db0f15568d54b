"""Run by server_args_check.py in a subprocess, one sglang tree per process.

Reads one JSON request on stdin (or, with `--serve`, many: server_args_zygote.py): {"argv": [...], "gpu": {...}, "gpus": N}, and
optionally "fields" (more ServerArgs fields to read back) and "env_claims" ({variable:
a value as a recipe writes it}: the answer gives, per variable, sglang's own value
with the variable unset and the claim parsed by sglang's own parser). The
environment (the recipe's variables) is already set by the caller. It stubs the
GPU (the only thing this machine lacks), then runs what `python -m
sglang.launch_server` runs before it starts any process: `prepare_server_args`
(sglang's parser, then ServerArgs.__post_init__: every default, model-specific
adjustment and validation, reading the model's config.json) and
`ServerArgs.check_server_args()` (Engine._launch_subprocesses' check). Prints
one JSON line: {"ok": true, "resolved": {...}, "warnings": [...]} or
{"ok": false, "error": "...", "type": "...", "warnings": [...]}.

What is stubbed, and only that (the device):
- torch.cuda.is_available / device_count / current_device / get_device_name /
  get_device_capability / get_device_properties / mem_get_info answer as the
  GPU named in the request would (torch here is a CPU build);
- torch.version.cuda is the image's CUDA (13.0), since sglang's is_cuda() asks it;
- `nvidia-smi` (sglang reads each GPU's memory from it) is a script first on
  PATH that the caller writes, answering that query only;
- the compiled CUDA kernel libraries sglang imports at module level once CUDA is
  present (CUDA_ONLY) are import placeholders whose functions raise if called:
  they need a driver to load, and argument validation never runs a kernel.
Nothing of sglang is replaced.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import logging
import sys
import traceback
import types

# Compiled CUDA kernel libraries sglang imports at module level once CUDA is present.
# They cannot load without a GPU driver; argument validation never calls them.
CUDA_ONLY = ("sgl_kernel", "deep_gemm")

# What the caller reads back from the resolved ServerArgs.
RESOLVED = (
    "tp_size",
    "dp_size",
    "attn_dp_size",
    "ep_size",
    "moe_dp_size",
    "enable_dp_attention",
    "enable_dp_lm_head",
    "chunked_prefill_size",
    "max_running_requests",
    "cuda_graph_max_bs_decode",
    "context_length",
    "mem_fraction_static",
    "page_size",
    "kv_cache_dtype",
    "moe_runner_backend",
    "attention_backend",
    "speculative_algorithm",
    "speculative_num_draft_tokens",
    "speculative_dspark_block_size",
    "speculative_draft_model_path",
    "speculative_dspark_sps_table_path",
    "load_balance_method",
    "enable_prefill_delayer",
    "enable_deepseek_v4_fp4_indexer",
    "disable_custom_all_reduce",
    "nnodes",
    "node_rank",
    "device",
    "swa_full_tokens_ratio",
)


def stub_device(gpu: dict, count: int) -> None:
    import torch

    props = types.SimpleNamespace(
        name=gpu["name"],
        major=gpu["capability"][0],
        minor=gpu["capability"][1],
        total_memory=gpu["memory_mib"] << 20,
        multi_processor_count=gpu["sm_count"],
        is_integrated=gpu.get("integrated", False),
        uuid="GPU-sm12x-stub",
        L2_cache_size=gpu.get("l2_bytes", 128 << 20),
        warp_size=32,
    )
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: count
    cuda.current_device = lambda: 0
    cuda.get_device_name = lambda device=None: gpu["name"]
    cuda.get_device_capability = lambda device=None: tuple(gpu["capability"])
    cuda.get_device_properties = lambda device=None: props
    cuda.mem_get_info = lambda device=None: (props.total_memory, props.total_memory)
    torch.version.cuda = gpu.get("cuda", "13.0")


class _Kernel(type):
    """A name from a CUDA kernel library: any attribute is another one."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Kernel(name, (), {})

    def __call__(cls, *args, **kwargs):
        raise RuntimeError(
            f"{cls.__name__}: a CUDA kernel, called during argument "
            "validation (the stand-in device cannot run it)"
        )


class _KernelModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _Kernel(name, (), {})
        setattr(self, name, value)
        return value


class _CudaOnly(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in CUDA_ONLY:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _KernelModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+stub"
        return module

    def exec_module(self, module):
        pass


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def resolved(args, name: str):
    """A field after resolution: sglang >= 0.5.23 keeps the input on the record and the
    resolution as declarations (resolution_result reads the last one)."""
    if hasattr(args, "resolve_once"):
        from sglang.srt.arg_groups.overrides import resolution_result

        return resolution_result(args, name)
    return getattr(args, name, None)


def env_defaults(claims: dict) -> dict:
    """{variable: [sglang's value with it unset, the claim parsed as sglang parses it]};
    [None, None] for a variable this sglang does not declare."""
    import os

    from sglang.srt.environ import envs

    out = {}
    for name, claim in claims.items():
        field = getattr(envs, name, None)
        if field is None or not hasattr(field, "parse"):
            out[name] = [None, None]
            continue
        held = os.environ.pop(name, None)
        try:
            out[name] = [_plain(field.get()), _plain(field.parse(claim))]
        finally:
            if held is not None:
                os.environ[name] = held
    return out


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def answer(request: dict) -> dict:
    """sglang's launch-time validation of one request; the JSON line's object."""
    stub_device(request["gpu"], request["gpus"])
    if not any(isinstance(f, _CudaOnly) for f in sys.meta_path):
        sys.meta_path.insert(0, _CudaOnly())
    from sm12x.selftest.env import stub_torchvision

    stub_torchvision()
    # sglang's own loggers: prepare_server_args re-configures the root logger
    # (basicConfig(force=True)), which would drop a handler put there.
    collect = _Collect()
    logging.getLogger("sglang").addHandler(collect)
    out: dict = {}
    try:
        from sglang.srt.server_args import prepare_server_args

        args = prepare_server_args(request["argv"])
        # sglang >= 0.5.23 leaves construction unresolved; the launcher resolves
        # (Engine._launch_subprocesses: resolve_once, then check_server_args).
        if hasattr(args, "resolve_once"):
            args.resolve_once()
        args.check_server_args()
        fields = (*RESOLVED, *request.get("fields", ()))
        out = {"ok": True, "resolved": {k: _plain(resolved(args, k)) for k in fields}}
        out["env_defaults"] = env_defaults(request.get("env_claims", {}))
    except SystemExit as err:  # argparse: an unknown flag or a value outside its choices
        out = {
            "ok": False,
            "type": "SystemExit",
            "error": f"sglang's parser exited with {err.code} (its message is on stderr)",
            "traceback": "",
        }
    except Exception as err:  # what launch_server would die of (asserts included)
        out = {
            "ok": False,
            "type": type(err).__name__,
            "error": str(err) or repr(err),
            "traceback": traceback.format_exc()[-4000:],
        }
    out["warnings"] = collect.messages
    return out


def main() -> int:
    if sys.argv[1:] == ["--serve"]:
        from server_args_zygote import serve  # beside this file

        return serve(answer, stub_device)
    print(json.dumps(answer(json.loads(sys.stdin.read()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
