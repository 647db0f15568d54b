"""`sm12x doctor` against recorded machines: every rig passes, each broken
thing fails the check it should, with a fix, and only that one."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from sm12x import cli
from sm12x.doctor import main as doctor_main
from sm12x.doctor import rdma
from sm12x.doctor.checks import Doctor, Options
from sm12x.doctor.host import Host, Output
from sm12x.errors import UserError
from tests.support import checkpoint
from tests.support.doctor_rigs import GIB, IBV, IMAGE_ID, failing, rig, spark_rig
from tests.support.doctor_rigs import run_doctor as run

# --- every rig, healthy --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fixture, recipe",
    [
        ("rtx-pro-6000-maxq-x2.csv", "rtx-pro-6000-tp2"),
        ("rtx-pro-6000-x4.csv", "rtx-pro-6000-tp4"),
        ("rtx-pro-6000-server-x8.csv", "rtx-pro-6000-tp4"),
        ("rtx-5090-x8.csv", "rtx-5090-tp8"),
    ],
)
def test_healthy_single_node_rigs_are_ready(tmp_path, fixture, recipe):
    result = run(rig(tmp_path, fixture))
    assert result["failed"] == []
    checks = result["checks"]
    assert checks["recipe"].data["recipe"] == recipe
    for id in (
        "gpus",
        "driver",
        "recipe",
        "gpu-memory",
        "docker",
        "compose",
        "buildx",
        "nvidia-runtime",
        "image",
        "model-dir",
        "model-config",
        "model-shards",
        "model-revision",
        "tokenizer",
        "disk",
        "shm",
    ):
        assert checks[id].verdict == "ok", (id, checks[id])
    # No Spark-pair check on a single-node rig.
    assert "rdma" not in checks and "peer" not in checks


def test_healthy_spark_node_runs_the_pair_checks(tmp_path):
    result = run(spark_rig(tmp_path))
    checks = result["checks"]
    assert result["failed"] == []
    assert checks["recipe"].data["recipe"] == "dgx-spark-tp2"
    assert checks["gpu-memory"].verdict == "ok" and "unified" in checks["gpu-memory"].detail
    for id in (
        "rdma",
        "roce-gid",
        "nccl-socket-ifname",
        "gloo-socket-ifname",
        "peer",
        "same-image",
    ):
        assert checks[id].verdict == "ok", (id, checks[id])
    assert "rocep1s0f0" in checks["rdma"].detail
    assert "192.168.100.1" in checks["peer"].detail and "enp1s0f0np0" in checks["peer"].detail
    assert checks["same-image"].data == {"local": IMAGE_ID, "peer": IMAGE_ID}
    # No swap on unified memory: a warning with the field's advice, not a failure.
    assert checks["swap"].verdict == "warn" and "swap" in checks["swap"].fix


def test_spark_head_node_needs_peer_to_check_reachability(tmp_path):
    host = spark_rig(tmp_path, node=0)
    checks = run(host)["checks"]
    assert checks["peer"].verdict == "skip" and "--peer" in checks["peer"].fix
    checks = run(spark_rig(tmp_path / "again", node=0), peer="192.168.100.2")["checks"]
    assert checks["peer"].verdict == "ok"


# --- GPUs ----------------------------------------------------------------------------------------


def test_wrong_gpu_fails_gpus_and_recipe(tmp_path):
    result = run(rig(tmp_path, "h100-x8.csv"))
    checks = result["checks"]
    assert {"gpus", "recipe"} <= set(result["failed"])
    assert "compute capability 9.0" in checks["gpus"].detail
    assert "sm_120/sm_121" in checks["gpus"].detail


def test_too_few_gpus_for_any_recipe(tmp_path):
    result = run(rig(tmp_path, "rtx-5090-x2.csv"))
    assert result["failed"] == ["recipe"]
    assert "need at least 8 GPUs per node, found 2" in result["checks"]["recipe"].detail


def test_mixed_gpus(tmp_path):
    result = run(rig(tmp_path, "mixed-pro6000-5090.csv"))
    assert "recipe" in result["failed"]
    assert "not all the same kind" in result["checks"]["recipe"].detail


def test_named_recipe_that_does_not_fit(tmp_path):
    result = run(rig(tmp_path, "rtx-pro-6000-maxq-x2.csv"), recipe="rtx-pro-6000-tp4")
    assert result["failed"] == ["recipe"]
    assert "needs 4x rtx-pro-6000" in result["checks"]["recipe"].detail


def test_no_nvidia_smi(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.tools.discard("nvidia-smi")
    result = run(host)
    assert {"gpus", "recipe"} <= set(result["failed"])
    assert "not installed" in result["checks"]["gpus"].detail
    assert "driver" in result["checks"]["gpus"].fix


def test_old_driver(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.nvidia_smi(
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 4, 12.0, 97887 MiB, 575.51.03\n" * 4
    )
    result = run(host)
    assert result["failed"] == ["driver"]
    assert "575.51.03" in result["checks"]["driver"].detail
    assert "580" in result["checks"]["driver"].fix


def test_small_cards_for_the_recipe(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.nvidia_smi(
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 4, 12.0, 49152 MiB, 580.95.05\n" * 4
    )
    result = run(host)
    assert result["failed"] == ["gpu-memory"]


# --- Docker --------------------------------------------------------------------------------------


def test_docker_daemon_down(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.tools.add("dockerd")
    (host.root / "run" / "systemd" / "system").mkdir(parents=True)
    host.answer(
        ("docker", "version"),
        failing("Cannot connect to the Docker daemon at unix:///var/run/docker.sock."),
    )
    result = run(host)
    assert result["failed"] == ["docker"]
    checks = result["checks"]
    assert "Cannot connect" in checks["docker"].detail
    assert "systemctl start docker" in checks["docker"].fix
    # `docker compose version` needs no daemon: Compose is still checked.
    assert checks["compose"].verdict == "ok"
    assert checks["nvidia-runtime"].verdict == checks["image"].verdict == "skip"


def _daemon_fix(tmp_path, *, dockerd: bool, systemd: bool = False, init_script: bool = False):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.answer(("docker", "version"), failing("Cannot connect to the Docker daemon"))
    if dockerd:
        host.tools.add("dockerd")
    if systemd:
        (host.root / "run" / "systemd" / "system").mkdir(parents=True)
    if init_script:
        (host.root / "etc" / "init.d").mkdir(parents=True)
        (host.root / "etc" / "init.d" / "docker").write_text("#!/bin/sh\n")
    return run(host)["checks"]["docker"].fix


def test_the_daemon_fix_is_the_init_system_s(tmp_path):
    """Issue 29: "sudo systemctl start docker" on a host with no systemd and no Engine."""
    assert "sudo systemctl start docker" in _daemon_fix(tmp_path / "a", dockerd=True, systemd=True)
    fix = _daemon_fix(tmp_path / "b", dockerd=True, init_script=True)
    assert "sudo service docker start" in fix and "systemctl" not in fix
    fix = _daemon_fix(tmp_path / "c", dockerd=True)
    assert "no systemd and no init script" in fix and "sudo dockerd" in fix
    assert "systemctl" not in fix


def test_no_engine_is_told_to_install_one_not_to_start_it(tmp_path):
    fix = _daemon_fix(tmp_path, dockerd=False, systemd=True)
    assert "no Docker Engine (no dockerd)" in fix and "install it" in fix
    assert "systemctl" not in fix


def test_compose_missing_while_the_daemon_is_down_is_still_reported(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.answer(("docker", "version"), failing("Cannot connect to the Docker daemon"))
    host.answer(
        ("docker", "compose", "version"),
        failing(
            "docker: unknown command: docker compose\n\nRun 'docker --help' for more information"
        ),
    )
    result = run(host)
    assert result["failed"] == ["docker", "compose"]
    assert "unknown shorthand flag: 'd'" in result["checks"]["compose"].detail


def test_no_docker_cli_skips_compose(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.tools.discard("docker")
    checks = run(host)["checks"]
    assert checks["docker"].verdict == "fail" and "install Docker Engine" in checks["docker"].fix
    assert checks["compose"].verdict == checks["buildx"].verdict == "skip"


OS_RELEASE = {  # written from the format; Debian and Ubuntu: tests/unit/test_doctor_packages.py
    "fedora-41": 'PRETTY_NAME="Fedora Linux 41"\nID=fedora\nVERSION_ID=41\n',
    "rocky-9": 'PRETTY_NAME="Rocky Linux 9.5"\nID="rocky"\nID_LIKE="rhel centos fedora"\n',
    "arch": 'PRETTY_NAME="Arch Linux"\nID=arch\n',
}


@pytest.mark.parametrize(
    ("system", "docker_ce", "fix"),
    [
        ("fedora-41", True, "sudo dnf install docker-compose-plugin"),
        ("rocky-9", False, "sudo dnf install docker-compose-plugin"),
        ("arch", False, "docker-compose-plugin from Docker's repository"),
    ],
)
def test_no_compose_plugin_outside_debian_names_docker_s_package(tmp_path, system, docker_ce, fix):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.answer(
        ("docker", "compose", "version"), failing("docker: 'compose' is not a docker command.")
    )
    (host.root / "etc").mkdir(exist_ok=True)
    (host.root / "etc" / "os-release").write_text(OS_RELEASE[system])
    host.tools |= {"rpm"}
    host.answer(
        ("rpm",),
        "docker-ce-cli-28.0.1-1.fc41.x86_64\n"
        if docker_ce
        else failing("package docker-ce-cli is not installed"),
    )
    check = run(host)["checks"]["compose"]
    assert check.verdict == "fail"
    assert fix in check.fix, check.fix
    assert ("like this machine's docker-ce-cli" in check.fix) == docker_ce


def test_no_nvidia_container_toolkit(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.tools.discard("nvidia-container-runtime-hook")
    host.answer(("docker", "info"), json.dumps({"Runtimes": {"runc": {}}}))
    result = run(host)
    assert result["failed"] == ["nvidia-runtime"]
    assert "nvidia-ctk runtime configure" in result["checks"]["nvidia-runtime"].fix


def test_no_compose_plugin(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.answer(
        ("docker", "compose", "version"), failing("docker: 'compose' is not a docker command.")
    )
    result = run(host)
    assert result["failed"] == ["compose"]


def test_image_not_pulled_is_a_warning(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.answer(("docker", "image", "inspect"), failing("Error: No such image"))
    result = run(host)
    assert result["failed"] == []
    assert result["checks"]["image"].verdict == "warn"
    # Not published yet: build it (README, "Build or pull the image") for the
    # recipe's arch; pull it later.
    assert "docker buildx bake image-amd64 --load" in result["checks"]["image"].fix
    assert "docker compose pull" in result["checks"]["image"].fix


def test_image_to_build_follows_the_recipes_arch(tmp_path):
    host = spark_rig(tmp_path)
    host.answer(("docker", "image", "inspect"), failing("Error: No such image"))
    result = run(host)
    assert "docker buildx bake image-arm64 --load" in result["checks"]["image"].fix
    assert "docker save" in result["checks"]["same-image"].fix


# --- the model folder ----------------------------------------------------------------------------


def test_model_dir_unset(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    del host.environ["SM12X_MODEL_DIR"]
    result = run(host)
    assert result["failed"] == ["model-dir"]
    assert "cp .env.example .env" in result["checks"]["model-dir"].fix


def test_model_dir_from_env_file(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    model = host.environ.pop("SM12X_MODEL_DIR")
    env_file = tmp_path / ".env"
    env_file.write_text(f"# compose settings\nSM12X_MODEL_DIR={model}\nNCCL_IB_HCA=\n")
    checks = Doctor(host, Options(env_file=env_file)).run()
    assert {c.id: c.verdict for c in checks}["model-shards"] == "ok"


def test_a_relative_model_dir_in_env_file_is_taken_from_its_folder(tmp_path, monkeypatch):
    # doctor run from another folder finds the same checkpoint compose mounts.
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    model = Path(host.environ.pop("SM12X_MODEL_DIR"))
    env_file = model.parent / ".env"
    env_file.write_text(f"SM12X_MODEL_DIR=./{model.name}\n")
    monkeypatch.chdir(tmp_path / "root")
    checks = {c.id: c for c in Doctor(host, Options(env_file=env_file)).run()}
    assert checks["model-dir"].detail == str(model)
    assert checks["model-shards"].verdict == "ok"


@pytest.mark.parametrize(
    "breaker, says",
    [
        (checkpoint.remove_shard, "1 shard(s) missing: model-00002-of-00003.safetensors"),
        (checkpoint.truncate_shard, "truncated or padded: model-00002-of-00003.safetensors"),
        (checkpoint.empty_shard, "1 shard(s) empty: model-00001-of-00003.safetensors"),
        (checkpoint.swap_in_other_revision, "holding other tensors than the index says"),
        (checkpoint.leave_incomplete, "an interrupted download left"),
    ],
)
def test_broken_checkpoints(tmp_path, breaker, says):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    breaker(Path(host.environ["SM12X_MODEL_DIR"]))
    result = run(host)
    assert result["failed"] == ["model-shards"]
    shards = result["checks"]["model-shards"]
    assert says in shards.detail
    assert "hf download" in shards.fix


def test_hash_check_finds_same_size_corruption(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    checkpoint.corrupt_shard_bytes(Path(host.environ["SM12X_MODEL_DIR"]))
    assert run(host)["failed"] == []  # sizes are right: only the hashes can tell
    result = run(host, verify_hashes=True)
    assert result["failed"] == ["model-shards"]
    assert "sha256 other than the Hub's" in result["checks"]["model-shards"].detail


def test_missing_index_and_config(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    model = Path(host.environ["SM12X_MODEL_DIR"])
    (model / "model.safetensors.index.json").unlink()
    checkpoint.wrong_architecture(model)
    result = run(host)
    assert set(result["failed"]) == {"model-shards", "model-config"}
    assert "LlamaForCausalLM" in result["checks"]["model-config"].detail


def test_other_revision_is_a_warning(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    model = Path(host.environ["SM12X_MODEL_DIR"])
    checkpoint.write_checkpoint(model, revision="0" * 40)
    result = run(host)
    assert result["failed"] == []
    revision = result["checks"]["model-revision"]
    assert revision.verdict == "warn" and "9e165c30e270" in revision.detail


def test_hub_cache_snapshot_revision(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    snapshot = (
        tmp_path
        / "hub"
        / "models--deepseek-ai--DeepSeek-V4-Flash-0731"
        / "snapshots"
        / (checkpoint.REVISION)
    )
    checkpoint.write_checkpoint(snapshot, metadata=False)
    host.environ["SM12X_MODEL_DIR"] = str(snapshot)
    checks = run(host)["checks"]
    assert checks["model-revision"].verdict == "ok"
    assert "snapshot" in checks["model-revision"].detail


# --- disk and shared memory ----------------------------------------------------------------------


def test_too_little_shared_memory(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.disks["/dev/shm"] = (64 * 1024**2, 64 * 1024**2)  # Docker's default 64 MB kind
    result = run(host)
    assert result["failed"] == ["shm"]
    assert "remount,size=64G" in result["checks"]["shm"].fix


def test_small_shared_memory_is_a_warning(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.disks["/dev/shm"] = (16 * GIB, 16 * GIB)
    result = run(host)
    assert result["failed"] == [] and result["checks"]["shm"].verdict == "warn"


def test_full_disk(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.disks["/var/lib/docker"] = (2000 * GIB, 3 * GIB)
    result = run(host)
    assert result["failed"] == ["disk"]
    assert "3 GiB free" in result["checks"]["disk"].detail


# --- the Spark pair, broken ----------------------------------------------------------------------


def test_rdma_link_down(tmp_path):
    host = spark_rig(tmp_path)
    host.answer(("ibv_devinfo",), (IBV / "dgx-spark-link-down.txt").read_text())
    result = run(host)
    assert "rdma" in result["failed"]
    assert "PORT_DOWN" in result["checks"]["rdma"].detail
    assert "PORT_ACTIVE" in result["checks"]["rdma"].fix


def test_no_rdma_tools(tmp_path):
    host = spark_rig(tmp_path)
    host.tools.discard("ibv_devinfo")
    result = run(host)
    assert "rdma" in result["failed"]
    assert "rdma-core" in result["checks"]["rdma"].fix


def test_nccl_ib_hca_names_a_down_device(tmp_path):
    host = spark_rig(tmp_path)
    host.environ["NCCL_IB_HCA"] = "rocep1s0f1"
    result = run(host)
    assert result["failed"] == ["rdma"]
    assert "NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0" in result["checks"]["rdma"].fix


def test_nccl_ib_hca_unset(tmp_path):
    host = spark_rig(tmp_path)
    del host.environ["NCCL_IB_HCA"]
    result = run(host)
    assert result["failed"] == ["rdma"]


def test_socket_interface_missing_or_down(tmp_path):
    host = spark_rig(tmp_path)
    host.environ["NCCL_SOCKET_IFNAME"] = "eth7"
    host.environ["GLOO_SOCKET_IFNAME"] = "enp1s0f1np1"
    result = run(host)
    checks = result["checks"]
    assert {"nccl-socket-ifname", "gloo-socket-ifname"} <= set(result["failed"])
    assert "does not exist" in checks["nccl-socket-ifname"].detail
    assert "enP2p1s0f0np0" in checks["nccl-socket-ifname"].fix  # suggested from the active HCAs
    assert "is down" in checks["gloo-socket-ifname"].detail


def test_gid_index_not_roce_v2(tmp_path):
    host = spark_rig(tmp_path)
    host.environ["NCCL_IB_GID_INDEX"] = "2"
    result = run(host)
    assert result["failed"] == ["roce-gid"]
    assert "IB/RoCE v1" in result["checks"]["roce-gid"].detail


def test_peer_unreachable(tmp_path):
    host = spark_rig(tmp_path)
    host.answer(("ping",), failing("2 packets transmitted, 0 received, 100% packet loss"))
    result = run(host)
    assert "peer" in result["failed"]
    assert "100% packet loss" in result["checks"]["peer"].detail


def test_peer_routed_over_the_wrong_interface(tmp_path):
    host = spark_rig(tmp_path)
    host.answer(("ip", "route", "get"), "192.168.100.1 via 10.0.0.1 dev wlP9s9 src 10.0.0.23\n")
    result = run(host)
    assert result["failed"] == []
    assert result["checks"]["peer"].verdict == "warn"
    assert "wlP9s9" in result["checks"]["peer"].detail


def test_different_image_on_the_peer(tmp_path):
    host = spark_rig(tmp_path)
    host.answer(("ssh",), "sha256:" + "ff" * 32 + "\n")
    result = run(host)
    assert result["failed"] == ["same-image"]
    assert "docker save" in result["checks"]["same-image"].fix
    assert "pin it" in result["checks"]["same-image"].fix


def test_peer_image_from_its_report(tmp_path):
    host = spark_rig(tmp_path)
    host.tools.discard("ssh")
    checks = run(host)["checks"]
    assert checks["same-image"].verdict == "warn" and "--peer-report" in checks["same-image"].fix
    other = spark_rig(tmp_path / "other", node=0)
    report = doctor_main.report(Doctor(other, Options(env_file=os.devnull)).run(), None)
    path = tmp_path / "peer.json"
    path.write_text(json.dumps(report))
    checks = run(host, peer_report=path)["checks"]
    assert checks["same-image"].verdict == "ok" and "--peer-report" in checks["same-image"].detail


# --- parsers -------------------------------------------------------------------------------------


def test_ibv_devinfo_parser():
    devices = rdma.parse_ibv_devinfo((IBV / "dgx-spark.txt").read_text())
    assert [d.name for d in devices] == ["rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1"]
    assert [d.active for d in devices] == [True, False, True, False]
    assert devices[0].ports[0].link_layer == "Ethernet"
    assert devices[0].fields["vendor_part_id"] == "4129"
    assert rdma.split_hca_list("^=mlx5_0:1,mlx5_1") == ["mlx5_0", "mlx5_1"]


# --- the CLI -------------------------------------------------------------------------------------


def test_cli_json_and_exit_status(tmp_path, monkeypatch, capsys):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    monkeypatch.setattr(doctor_main, "make_host", lambda: host)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "sm12x-doctor/1" and data["passed"] is True
    assert data["recipe"] == "rtx-pro-6000-tp4"
    assert {c["id"] for c in data["checks"]} >= {"gpus", "recipe", "model-shards", "shm"}

    host.disks["/dev/shm"] = (64 * 1024**2, 64 * 1024**2)
    assert cli.main(["doctor", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is False
    assert [c["id"] for c in data["checks"] if c["verdict"] == "fail"] == ["shm"]


def test_cli_table_says_verdicts_and_fixes(tmp_path, monkeypatch, capsys):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    checkpoint.remove_shard(Path(host.environ["SM12X_MODEL_DIR"]))
    monkeypatch.setattr(doctor_main, "make_host", lambda: host)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "model shards" in out and "fail" in out and "hf download" in out
    assert "not ready: 1 required check(s) failed (model-shards)" in out


def test_commands_end_at_their_limit_whatever_they_do(tmp_path):
    """Host.run kills the command's whole process group at the limit (a grandchild
    holding the output pipe cannot make it wait) and caps what it keeps."""
    import inspect
    import time

    from sm12x.doctor import checks, container, core, gpu, host, pair, storage

    for module in (checks, core, gpu, container, storage, pair):
        source = inspect.getsource(module)
        assert "subprocess" not in source, f"{module.__name__} must go through Host.run"
    hung = host.Host(environ={"PATH": "/usr/bin:/bin"}, timeout=0.5)
    started = time.monotonic()
    out = hung.run(["sleep", "5"])
    assert not out.ok and "did not answer within 0.5 s" in out.why()
    assert isinstance(out, Output)
    # The shell exits at once; its background sleep keeps stdout open.
    out = hung.run(["sh", "-c", "sleep 30 & echo started"])
    assert out.ok and out.stdout.strip() == "started"
    out = hung.run(["sh", "-c", "(sleep 30; echo late) & sleep 30"])
    assert not out.ok and "did not answer" in out.why()
    out = hung.run(["yes"])
    assert not out.ok and "printed more than 4 MiB" in out.why()
    assert len(out.stdout) <= 4 * 1024 * 1024 + 65536
    assert time.monotonic() - started < 10


# --- host names go to ssh and ping only as host names -------------------------------------------

PROXY = "-oProxyCommand=touch /tmp/sm12x-pwned"


def test_an_option_disguised_as_a_head_address_is_refused_before_anything_runs(tmp_path):
    # SM12X_HEAD_ADDR is a setting: checked as it is read, one clear error.
    host = spark_rig(tmp_path)
    host.environ["SM12X_HEAD_ADDR"] = PROXY
    with pytest.raises(UserError, match="SM12X_HEAD_ADDR=.* in the environment: is not a host"):
        run(host)
    assert host.calls == []


@pytest.mark.parametrize("where", ["--peer"])
def test_an_option_disguised_as_a_peer_never_reaches_ssh_or_ping(tmp_path, where):
    host = spark_rig(tmp_path)
    result = run(host, peer=PROXY)
    peer = result["checks"]["peer"]
    assert peer.verdict == "fail" and "is not a host name or IP address" in peer.detail
    assert where in peer.detail
    ran = [c for c in host.calls if c[0] in ("ssh", "ping")]
    assert ran == [], ran
    assert not any(PROXY in " ".join(c) for c in host.calls)


def test_ssh_and_ping_end_their_options_before_the_host(tmp_path):
    host = spark_rig(tmp_path)
    run(host)
    ping = next(c for c in host.calls if c[0] == "ping")
    ssh = next(c for c in host.calls if c[0] == "ssh")
    assert ping[-2:] == ("--", "192.168.100.1")
    assert ssh[ssh.index("--") + 1] == "192.168.100.1"
    assert ssh.index("--") < ssh.index("docker")  # the remote command follows the host


def test_the_cli_refuses_a_peer_that_is_not_a_host(tmp_path):
    from tests.support.cli import assert_one_clear_error, run_sm12x

    result = run_sm12x("doctor", "--peer", PROXY, "--json", cwd=tmp_path)
    assert_one_clear_error(result, "--peer", "not a host name or IP address")


# --- .env and git: the real git, in a repository made for the test ----------------------------


def env_in_git(tmp_path, key: str, *, track: bool = False, ignore: bool = False, git: bool = True):
    repo = tmp_path / "checkout"
    repo.mkdir()
    if git:
        subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    if ignore:
        (repo / ".gitignore").write_text(".env\n")
    env_file = repo / ".env"
    env_file.write_text(f"SM12X_API_KEY={key}\n")
    if track:
        subprocess.run(["git", "-C", str(repo), "add", "-f", ".env"], check=True, timeout=30)
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.tools.add("git")
    host.answer(("git",), lambda argv: Host(environ={"PATH": "/usr/bin:/bin"}).run(argv))
    return Doctor(host, Options(env_file=env_file)).run()


@pytest.mark.parametrize(
    ("key", "track", "ignore", "git", "verdict", "says"),
    [
        ("s3cret", True, True, True, "warn", "git tracks it"),
        ("s3cret", False, False, True, "warn", "`git add -A` would commit it"),
        ("s3cret", False, True, True, "ok", "git ignores it"),
        ("", True, False, True, "ok", "holds no key"),
        ("s3cret", False, False, False, "ok", "not in a git work tree"),
    ],
)
def test_a_key_bearing_env_file_in_git_is_a_warning(
    tmp_path, key, track, ignore, git, verdict, says
):
    checks = {c.id: c for c in env_in_git(tmp_path, key, track=track, ignore=ignore, git=git)}
    check = checks["env-git"]
    assert (check.verdict, check.required) == (verdict, False), check
    assert says in check.detail, check.detail
    if track and key:
        assert "git rm --cached .env" in check.fix
    assert "s3cret" not in check.detail + (check.fix or "")  # names the key, never its value


def test_every_check_is_a_row_of_docs_doctor_md(tmp_path):
    doc = (Path(__file__).parents[2] / "docs" / "doctor.md").read_text()
    rows = {
        name
        for line in doc.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`([a-z0-9-]+)`", line.split("|")[1])
    }
    ids = {c.id for c in Doctor(spark_rig(tmp_path / "spark"), Options(env_file=os.devnull)).run()}
    ids |= set(run(rig(tmp_path / "rtx", "rtx-pro-6000-x4.csv"))["checks"])
    assert {"buildx", "env-git", "compose"} <= ids
    assert ids <= rows, sorted(ids - rows)


# --- the model line: the folder must hold the recipe's line ------------------------------------

V41_RECIPE = "rtx-pro-6000-tp8-v41"


V41_REVISION = "fb2764a5cf321eaa5070ca8f9e892818f477c16d"  # the V4.1 recipes' pin


def _v41_rig(tmp_path, config, revision=V41_REVISION):
    host = rig(tmp_path, "rtx-pro-6000-server-x8.csv", env={"SM12X_RECIPE": V41_RECIPE})
    model = Path(host.environ["SM12X_MODEL_DIR"])
    (model / "config.json").unlink()
    checkpoint.write_checkpoint(model, revision=revision, config=config)
    return host


def test_a_v41_checkpoint_passes_for_the_v41_recipe(tmp_path):
    result = run(_v41_rig(tmp_path, checkpoint.V41_CONFIG))
    checks = result["checks"]
    assert checks["recipe"].data["recipe"] == V41_RECIPE
    assert checks["model-config"].verdict == "ok", checks["model-config"].detail
    assert "DeepSeek-V4.1-Flash" in checks["model-config"].detail
    assert "vision tower" in checks["model-config"].detail
    # the shards are checked as for V4 (index, headers, sizes)
    assert checks["model-shards"].verdict == "ok"
    # the recipe pins the field's commit, and the download is that commit
    assert checks["model-revision"].verdict == "ok", checks["model-revision"].detail
    assert V41_REVISION[:12] in checks["model-revision"].detail


def test_a_v41_download_of_another_commit_is_named(tmp_path):
    result = run(_v41_rig(tmp_path, checkpoint.V41_CONFIG, revision=checkpoint.REVISION))
    check = result["checks"]["model-revision"]
    assert check.verdict != "ok"
    assert V41_REVISION[:12] in check.detail + (check.fix or "")


@pytest.mark.parametrize(
    "config, says, fix",
    [
        (None, "is DeepSeek-V4-Flash-0731", "deepseek-ai/DeepSeek-V4.1-Flash"),
        (
            {**checkpoint.V41_CONFIG, "architectures": ["DeepseekV41ForConditionalGeneration"]},
            "maps only DeepseekV41ForCausalLM",
            "DeepseekV41ForCausalLM",
        ),
        (
            {k: v for k, v in checkpoint.V41_CONFIG.items() if k != "vision_config"},
            "has no vision_config",
            "model.vision: false",
        ),
    ],
)
def test_a_v41_recipe_refuses_another_checkpoint(tmp_path, config, says, fix):
    host = rig(tmp_path, "rtx-pro-6000-server-x8.csv", env={"SM12X_RECIPE": V41_RECIPE})
    if config is not None:
        model = Path(host.environ["SM12X_MODEL_DIR"])
        (model / "config.json").unlink()
        checkpoint.write_checkpoint(model, config=config)
    result = run(host)
    config_check = result["checks"]["model-config"]
    assert "model-config" in result["failed"]
    assert says in config_check.detail, config_check.detail
    assert fix in config_check.fix, config_check.fix


def test_a_v4_recipe_refuses_a_v41_checkpoint(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    model = Path(host.environ["SM12X_MODEL_DIR"])
    (model / "config.json").unlink()
    checkpoint.write_checkpoint(model, config=checkpoint.V41_CONFIG)
    result = run(host)
    assert result["failed"] == ["model-config"]
    detail = result["checks"]["model-config"]
    assert "is DeepSeek-V4.1-Flash" in detail.detail and "v4.1-flash line" in detail.fix


@pytest.mark.parametrize(
    "mem_kib, verdict, says",
    [
        (263842104, "ok", "251.6 GiB of host memory"),
        (209715200, "warn", "200.0 GiB of host memory"),
        (134217728, "fail", "pins the engram tables, 188.8 GiB"),
    ],
)
def test_the_host_engram_recipe_needs_the_host_ram_for_the_tables(tmp_path, mem_kib, verdict, says):
    host = rig(tmp_path, "rtx-pro-6000-x4.csv", env={"SM12X_RECIPE": "rtx-pro-6000-tp4-v41"})
    (host.root / "proc" / "meminfo").write_text(
        f"MemTotal:       {mem_kib} kB\nMemAvailable:   {mem_kib // 2} kB\nSwapTotal:       0 kB\n"
    )
    check = run(host)["checks"]["engram-host-memory"]
    assert check.verdict == verdict, check
    assert says in check.detail


def test_a_recipe_with_the_tables_on_the_gpus_has_no_host_engram_check(tmp_path):
    host = rig(tmp_path, "rtx-pro-6000-server-x8.csv", env={"SM12X_RECIPE": V41_RECIPE})
    assert "engram-host-memory" not in run(host)["checks"]
