"""Every server each track's sglang can start, and every computed read, each judged.

tests/support/sglang_tree.py finds the server starts (by path::function) and
the reads whose variable name is computed; each must match a row here (an
fnmatch pattern on path::function), or `unjudged()` names it and
tests/unit/test_sglang_tree.py fails: a server a new release adds is a test
failure until it is judged. A row's gate is how sm12x governs the server:

- a name of sm12x.launch.judge.SURFACE (a flag's dest or a variable): the
  server opens only when that is set, and SURFACE's rule judges it;
- API: sglang's HTTP API itself (host, port: the exposure rule);
- INTERNAL: a socket between sglang's own processes or a port probe: IPC, a
  loopback or ephemeral port bound and closed, or NCCL/torch's rendezvous
  (docs/security.md, scope);
- ENTRY: another entry point than `python -m sglang.launch_server` (the only
  one sm12x runs: the diffusion runtime, a standalone tool);
- TEST: sglang's own test code.
"""

from __future__ import annotations

import fnmatch

from tests.support import sglang_tree

SPECIAL = ("API", "INTERNAL", "ENTRY", "TEST")
MM = "sglang/multimodal_gen/"

SERVERS: tuple[tuple[str, str, str], ...] = (
    (f"{MM}test/*", "TEST", "the diffusion runtime's tests"),
    (f"{MM}*", "ENTRY", "the diffusion runtime (`sglang generate`, its own server)"),
    ("sglang/srt/entrypoints/http_server.py::*", "API", "sglang's HTTP API (uvicorn)"),
    ("sglang/srt/utils/common.py::launch_dummy_health_check_server", "API",
     "a health server on the API's host and port, for nodes without the API (rank > 0)"),
    ("sglang/srt/debug_utils/dumper.py::*", "DUMPER_SERVER_PORT",
     "the tensor dumper's HTTP server (0.0.0.0) and ZMQ RPC (tcp://*)"),
    ("sglang/srt/disaggregation/common/conn.py::*", "disaggregation_mode",
     "the prefill side's bootstrap server"),
    ("sglang/srt/disaggregation/encode*", "encoder_bootstrap_port",
     "the encoder disaggregation servers (--encoder-only / EPD)"),
    ("sglang/srt/disaggregation/encoder/*", "encoder_bootstrap_port",
     "the encoder disaggregation servers (--encoder-only / EPD)"),
    ("sglang/srt/disaggregation/kv_events.py::*", "kv_events_config",
     "the KV-event ZMQ publisher and its replay socket"),
    ("sglang/srt/distributed/gated_launch.py::*", "gated_launch_port", "the gated-launch server"),
    ("sglang/srt/entrypoints/engine_info_bootstrap_server.py::*", "engine_info_bootstrap_port",
     "the engine-info bootstrap server"),
    ("sglang/srt/entrypoints/grpc_server.py::*", "smg_http_sidecar_port",
     "the SMG gRPC server's HTTP sidecar"),
    ("sglang/srt/managers/scheduler_components/load_publisher.py::*", "load_publish_endpoint",
     "the runtime-load publisher"),
    ("sglang/srt/managers/load_snapshot.py::*", "SGLANG_LOAD_SNAPSHOT_USE_ZMQ",
     "the load snapshot's ZMQ socket (IPC between sglang's processes)"),
    ("sglang/srt/observability/forward_pass_metrics.py::*", "INTERNAL",
     "the forward-pass metrics publisher: IPC between sglang's processes"),
    ("sglang/srt/elastic_ep/expert_backup_manager.py::*", "INTERNAL",
     "elastic EP's expert backup: ZMQ between sglang's own processes"),
    ("sglang/srt/mem_cache/storage/hf3fs/mini_3fs_metadata_server.py::*", "ENTRY",
     "a standalone 3FS metadata server (its own __main__)"),
    ("sglang/srt/weight_cache/daemon.py::*", "weight_cache_socket",
     "the weight-cache daemon: a Unix socket, and loopback ports it probes"),
    ("sglang/srt/utils/network.py::*", "INTERNAL",
     "sglang's port probes and its ZMQ helper (IPC between its processes)"),
    ("sglang/srt/distributed/device_communicators/*", "INTERNAL",
     "a Unix socket or ZMQ queue between the ranks of one launch"),
    ("sglang/srt/utils/cuda_vmm*", "INTERNAL", "a Unix socket passing CUDA handles between ranks"),
)  # fmt: skip

DYNAMIC: tuple[tuple[str, str], ...] = (
    (f"{MM}*", "the diffusion runtime (its own entry point) and its tests"),
    ("sglang/srt/environ.py::*", "sglang's Env registry: the names are environ.py's declarations"),
    ("sglang/srt/lora/trtllm_lora_temp/environ.py::*", "a second Env registry, declared names"),
    ("sglang/srt/debug_utils/dumper.py::*",
     "the dumper's config: _env_prefix() + each field (read by name as DUMPER_*)"),
    ("sglang/srt/utils/common.py::get_*env_var", "the helpers: their callers pass the name"),
    ("sglang/srt/utils/common.py::temp_set_env", "restores what it set"),
    ("sglang/benchmark/*", "sglang's benchmark client"),
    ("sglang/check_env.py::*", "sglang's environment report tool"),
    ("sglang/kernel_api_logging.py::*", "kernel API logging switches (0.5.17)"),
    ("sglang/kernels/*", "kernel switches named by the kernel's own prefix (not a listener)"),
    ("sglang/srt/debug_utils/cuda_coredump.py::_inject_env", "CUDA's coredump variables it sets"),
    ("sglang/srt/disaggregation/mooncake/utils.py::*", "PYTORCH_CUDA_ALLOC_CONF-style lists"),
    ("sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py::*",
     "copies variables into a child process's environment"),
    ("sglang/srt/hardware_backend/npu/*", "an Ascend NPU library path"),
    ("sglang/srt/layers/moe/flashinfer_megamoe_autotune.py::*", "restores a variable it set"),
    ("sglang/srt/managers/scheduler.py::Scheduler.init_deterministic_inference_config",
     "a size variable named by the attention backend (SGLANG_*_SIZE)"),
    ("sglang/srt/mem_cache/storage/*", "a KV-cache storage backend's config path or switches"),
    ("sglang/srt/observability/metrics_collector.py::*", "histogram bucket variables"),
    ("sglang/srt/observability/trace.py::*", "OpenTelemetry's protocol variable"),
    ("sglang/srt/rust_extensions/loader.py::*", "a tuple of build variables it records"),
    ("sglang/srt/weight_cache/daemon.py::*", "PYTORCH_CUDA_ALLOC_CONF"),
    ("sglang/srt/distributed/device_communicators/*", "a communicator's own switches"),
)  # fmt: skip


def _judgment(key: str, table) -> tuple | None:
    return next((row for row in table if fnmatch.fnmatchcase(key, row[0])), None)


def server_rows(version: str) -> list[tuple[str, list[str], tuple[str, str, str] | None]]:
    found = sglang_tree.of_version(version).servers
    return [(key, calls, _judgment(key, SERVERS)) for key, calls in sorted(found.items())]


def unjudged() -> list[str]:
    from sm12x.launch.judge import SURFACE

    problems = []
    for version in sglang_tree.versions():
        inventory = sglang_tree.of_version(version)
        for key, calls in sorted(inventory.servers.items()):
            row = _judgment(key, SERVERS)
            if row is None:
                problems.append(
                    f"sglang {version}: server {key} ({', '.join(calls)}) is not judged"
                )
        for key, lines in sorted(inventory.dynamic.items()):
            if _judgment(key, DYNAMIC) is None:
                problems.append(f"sglang {version}: computed read {key}:{lines[0]} is not judged")
    problems += [
        f"SERVERS: {pattern}'s gate {gate} is neither a SURFACE name nor one of {SPECIAL}"
        for pattern, gate, _ in SERVERS
        if gate not in SURFACE and gate not in SPECIAL
    ]
    return problems


def stale(version: str, inventory: sglang_tree.Inventory) -> list[str]:
    """What `inventory` (a track's tree, or a copy of it) holds that the committed
    files and tables do not: a variable read missing from sglang_env.json, a
    variable-path route missing from sglang_routes.json, or a server or computed
    read no row judges. Empty for the pinned wheel's own tree."""
    import json

    from sm12x.launch import routes as launch_routes
    from sm12x.launch_env import READS_FILE

    reads = json.loads(READS_FILE.read_text(encoding="utf-8")).get(version, {})
    routed = json.loads(launch_routes.ROUTES_FILE.read_text(encoding="utf-8"))
    routed = routed.get(version, {}).get("routes", {})
    problems = [
        f"sglang {version}: {name} ({where}) is read but not in sm12x/launch/sglang_env.json"
        for name, where in sorted(inventory.reads.items())
        if name not in reads
    ]
    problems += [
        f"sglang {version}: the route at {where} takes its path from "
        f"{variable or 'a value that is no variable'}, not in sm12x/launch/sglang_routes.json"
        for where, (variable, _) in sorted(inventory.routes.items())
        if variable is None or variable not in routed
    ]
    problems += [
        f"sglang {version}: server {key} ({', '.join(calls)}) is not judged"
        for key, calls in sorted(inventory.servers.items())
        if _judgment(key, SERVERS) is None
    ]
    problems += [
        f"sglang {version}: computed read {key}:{lines[0]} is not judged"
        for key, lines in sorted(inventory.dynamic.items())
        if _judgment(key, DYNAMIC) is None
    ]
    return problems
