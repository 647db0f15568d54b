"""doctor's Compose and buildx advice on each distribution, from what its
package tools print (tests/fixtures/packages: Debian 12 recorded here, the
others written from the tools' formats; the README there says which)."""

from __future__ import annotations

import json
import shutil

import pytest

from sm12x.doctor import compose_file, packages
from sm12x.doctor.host import Host, Output
from tests.support.doctor_rigs import PACKAGES, FakeHost, failing, on_distribution, rig
from tests.support.doctor_rigs import run_doctor as run

# Debian 12 records docker.io installed: the advice says it stays (issue 29: it did
# not say whether docker.io must go before Docker's repository's plugin).
KEEP_DOCKER_IO = (
    "; keep docker.io, nothing is removed first: the plugin needs no docker-ce, "
    "only Docker's Engine would replace docker.io"
)
# distribution -> (what the Compose fix must say, what the buildx fix must say)
EXPECTED = {
    "debian-12": (
        "Debian GNU/Linux 12 (bookworm)'s archive has no Compose v2 package (its docker-compose 1.29.2-3 is Compose v1, which "
        "`docker compose` does not run): add Docker's apt repository "
        f"({packages.DEBIAN_DOCKER_REPO}{KEEP_DOCKER_IO}) and sudo apt-get install "
        "docker-compose-plugin",
        "Debian GNU/Linux 12 (bookworm)'s archive has no buildx package: add Docker's apt "
        f"repository ({packages.DEBIAN_DOCKER_REPO}{KEEP_DOCKER_IO}) and sudo apt-get install "
        "docker-buildx-plugin",
    ),
    "debian-12-docker-ce": (
        "docker-compose-plugin, from Docker's repository like this machine's docker-ce-cli "
        "(2.34.0-1~debian.12~bookworm offered): sudo apt-get install docker-compose-plugin",
        "docker-buildx-plugin, from Docker's repository like this machine's docker-ce-cli "
        "(0.22.0-1~debian.12~bookworm offered): sudo apt-get install docker-buildx-plugin",
    ),
    "debian-13": (
        "docker-compose, Debian GNU/Linux 13 (trixie)'s Compose v2 for its docker.io "
        "(2.26.1-4 offered): sudo apt-get install docker-compose",
        "docker-buildx, Debian GNU/Linux 13 (trixie)'s buildx for its docker.io "
        "(0.13.1+ds1-3 offered): sudo apt-get install docker-buildx",
    ),
    "ubuntu-22.04": (
        "docker-compose-v2, Ubuntu 22.04.5 LTS's Compose v2 for its docker.io "
        "(2.24.6-0ubuntu1~22.04.1 offered): sudo apt-get install docker-compose-v2",
        "docker-buildx, Ubuntu 22.04.5 LTS's buildx for its docker.io "
        "(0.30.1-0ubuntu1~22.04.1 offered): sudo apt-get install docker-buildx",
    ),
    "ubuntu-24.04": (
        "docker-compose-v2, Ubuntu 24.04.3 LTS's Compose v2 for its docker.io "
        "(2.24.6+ds1-0ubuntu2 offered): sudo apt-get install docker-compose-v2",
        "docker-buildx, Ubuntu 24.04.3 LTS's buildx for its docker.io "
        "(0.30.1-0ubuntu1~24.04.1 offered): sudo apt-get install docker-buildx",
    ),
    "dgx-os": (
        "docker-compose-plugin, from Docker's repository like this machine's docker-ce-cli "
        "(2.34.0-1~ubuntu.24.04~noble offered): sudo apt-get install docker-compose-plugin",
        "docker-buildx-plugin, from Docker's repository like this machine's docker-ce-cli "
        "(0.22.0-1~ubuntu.24.04~noble offered): sudo apt-get install docker-buildx-plugin",
    ),
}


def test_every_fixture_has_its_expectation_and_its_readme_line():
    names = {p.stem for p in PACKAGES.glob("*.json")}
    assert names == set(EXPECTED)
    readme = (PACKAGES / "README.md").read_text()
    for name in names:
        assert f"`{name}.json`" in readme, f"tests/fixtures/packages/README.md: say what {name} is"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_missing_plugins_get_this_distribution_s_package(tmp_path, name):
    host = on_distribution(rig(tmp_path, "rtx-pro-6000-x4.csv"), name)
    checks = run(host)["checks"]
    compose_fix, buildx_fix = EXPECTED[name]
    compose, buildx = checks["compose"], checks["buildx"]
    # Then the source that needs no apt repository (sm12x.doctor.compose_file).
    want = f"install it: {compose_fix}; or, {compose_file.PYPI_SOURCE}"
    assert compose.verdict == "fail" and compose.fix == want, compose.fix
    assert buildx.verdict == "warn" and not buildx.required
    assert buildx.fix == f"install it to build the image: {buildx_fix}", buildx.fix
    # The line that says what is wrong, never the usage hint printed under it.
    for check in (compose, buildx):
        assert "--help" not in check.detail, check.detail
    assert "unknown flag: --load" in buildx.detail and "image-amd64 --load" in buildx.detail


def test_debian_12_s_not_installed_docker_ce_cli_is_not_installed(tmp_path):
    """The recorded answer: dpkg-query exits 0 with `unknown ok not-installed`
    for a package it has only heard of. That is not Docker's CLI."""
    recorded = json.loads((PACKAGES / "debian-12.json").read_text())
    answer = next(
        c
        for c in recorded["commands"]
        if c["argv"] == ["dpkg-query", "-W", "-f=${Status}", "docker-ce-cli"]
    )
    assert (answer["stdout"], answer["returncode"]) == ("unknown ok not-installed", 0)
    host = on_distribution(rig(tmp_path, "rtx-pro-6000-x4.csv"), "debian-12")
    assert packages.dpkg_state(host, "docker-ce-cli") == "not-installed"
    assert not packages.installed(host, "docker-ce-cli")
    assert packages.installed(host, "docker.io")
    check = run(host)["checks"]["compose"]
    assert "like this machine's docker-ce-cli" not in check.fix
    assert "unknown command: docker compose" in check.detail


@pytest.mark.parametrize(
    ("status", "code", "state"),
    [
        ("install ok installed", 0, "installed"),
        ("hold ok installed", 0, "installed"),
        ("unknown ok not-installed", 0, "not-installed"),
        ("deinstall ok config-files", 0, "config-files"),
        ("install ok half-configured", 0, "half-configured"),
    ],
)
def test_dpkg_state_is_the_third_word(tmp_path, status, code, state):
    host = FakeHost(environ={"PATH": "/usr/bin"}, root=tmp_path, tools={"dpkg-query"})
    host.answer(("dpkg-query",), Output((), status, "", code))
    assert packages.dpkg_state(host, "x") == state
    assert packages.installed(host, "x") == (state == "installed")


def test_dpkg_without_a_record_or_without_dpkg(tmp_path):
    host = FakeHost(environ={"PATH": "/usr/bin"}, root=tmp_path, tools={"dpkg-query"})
    host.answer(("dpkg-query",), failing("dpkg-query: no packages found matching x"))
    assert packages.dpkg_state(host, "x") == "not-installed"
    host.tools.clear()
    assert packages.dpkg_state(host, "x") is None


def test_apt_candidate_reads_the_named_package_s_block(tmp_path):
    host = FakeHost(environ={"PATH": "/usr/bin"}, root=tmp_path, tools={"apt-cache"})
    host.answer(("apt-cache", "policy", "a"), "")  # no source knows it: nothing printed
    host.answer(
        ("apt-cache", "policy", "b"),
        "b:\n  Installed: (none)\n  Candidate: (none)\n  Version table:\n",
    )
    host.answer(
        ("apt-cache", "policy", "c"),
        "c-doc:\n  Installed: (none)\n  Candidate: 9\n"
        "c:\n  Installed: (none)\n  Candidate: 1:2.0-1\n  Version table:\n",
    )
    assert packages.apt_candidate(host, "a") is None
    assert packages.apt_candidate(host, "b") is None
    assert packages.apt_candidate(host, "c") == "1:2.0-1"
    assert packages.major("1:2.0-1") == 2 and packages.major("1.29.2-3") == 1
    # Each first question asks for every name advice may need, once a host.
    asked = [c for c in host.calls if c[:2] == ("apt-cache", "policy")]
    assert asked[0] == ("apt-cache", "policy", "a", *packages.APT_NAMES)
    assert [c[2] for c in asked] == ["a", "b", "c"] and all(c[3:] == () for c in asked[1:])
    packages.apt_candidate(host, packages.APT_NAMES[-1])
    packages.apt_candidate(host, "c")
    assert len([c for c in host.calls if c[:2] == ("apt-cache", "policy")]) == 3


def test_a_doctor_run_asks_apt_cache_once(tmp_path):
    """Debian 12 without either plugin asks about docker-compose-plugin,
    docker-compose and docker-buildx-plugin: one apt-cache, not three."""
    host = on_distribution(rig(tmp_path, "rtx-pro-6000-x4.csv"), "debian-12")
    host.answer(("docker", "compose", "version"), failing("docker: 'compose' is not a command."))
    host.answer(("docker", "buildx", "version"), failing("docker: 'buildx' is not a command."))
    checks = run(host)["checks"]
    assert "docker-compose-plugin" in checks["compose"].fix
    assert "docker-buildx-plugin" in checks["buildx"].fix
    assert len([c for c in host.calls if c[:2] == ("apt-cache", "policy")]) == 1


def test_a_debian_archive_whose_docker_compose_is_still_v1_is_not_offered(tmp_path):
    """A Debian release the table puts on v2 whose archive turns out to carry
    v1 (a backport pinned back, a mirror behind): the candidate's version decides."""
    host = on_distribution(rig(tmp_path, "rtx-pro-6000-x4.csv"), "debian-13")
    host.answer(
        ("apt-cache", "policy", "docker-compose"),
        "docker-compose:\n  Installed: (none)\n  Candidate: 1.29.2-6\n",
    )
    fix = run(host)["checks"]["compose"].fix
    assert "is Compose v1" in fix and "docker-compose-plugin" in fix


def test_ubuntu_without_universe_says_to_enable_it(tmp_path):
    host = on_distribution(rig(tmp_path, "rtx-pro-6000-x4.csv"), "ubuntu-24.04")
    host.answer(("apt-cache", "policy", "docker-buildx"), "")
    fix = run(host)["checks"]["buildx"].fix
    assert "add-apt-repository universe" in fix and "sudo apt-get install docker-buildx" in fix


def test_dgx_os_is_named_as_such(tmp_path):
    host = on_distribution(rig(tmp_path, "rtx-pro-6000-x4.csv"), "dgx-os")
    assert packages.distro(host).label == "DGX OS 7.2.3 (Ubuntu 24.04.3 LTS)"


def test_buildx_present_with_bake(tmp_path):
    check = run(rig(tmp_path, "rtx-pro-6000-x4.csv"))["checks"]["buildx"]
    assert check.verdict == "ok" and check.detail == "buildx 0.17.1, bake available"


def test_buildx_whose_bake_answer_is_docker_s_own_help(tmp_path):
    """The recorded answer of a CLI without the plugin: `docker buildx bake
    --help` exits 0 with docker's top-level help; bake is not there."""
    host = on_distribution(rig(tmp_path, "rtx-pro-6000-x4.csv"), "debian-12")
    host.answer(("docker", "buildx", "version"), "github.com/docker/buildx 0.3.1 6db68d0\n")
    check = run(host)["checks"]["buildx"]
    assert check.verdict == "warn" and "has no `bake --load`" in check.detail
    assert "docker-buildx-plugin" in check.fix


@pytest.mark.skipif(
    shutil.which("dpkg-query") is None or shutil.which("apt-cache") is None,
    reason="not a Debian-like machine",
)
def test_the_parsers_read_this_machine_s_real_tools():
    host = Host()
    # Several names at once print their blocks in order, as one name at a time:
    # what apt_candidate's one question (and FakeHost.apt_policy) rests on.
    names = ["sm12x-no-such-package", "dpkg", *packages.APT_NAMES, "coreutils"]
    many = host.run(["apt-cache", "policy", *names])
    assert many.ok and many.stdout == "".join(
        Host().run(["apt-cache", "policy", n]).stdout for n in names
    )
    assert packages.dpkg_state(host, "dpkg") == "installed"
    assert packages.dpkg_state(host, "sm12x-no-such-package") == "not-installed"
    assert packages.apt_candidate(host, "sm12x-no-such-package") is None
    candidate = packages.apt_candidate(host, "dpkg")
    assert candidate is not None and packages.major(candidate) is not None, candidate
