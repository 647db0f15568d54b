"""Which package gives this machine a Docker CLI plugin (Compose v2, buildx),
read from its own package tools rather than guessed from its name.

- The distribution and release: /etc/os-release (DGX OS is Ubuntu's, with
  /etc/dgx-release beside it).
- What is installed: dpkg's status, read exactly. `dpkg-query -W
  -f='${Status}' NAME` prints three words, want / flag / state ("install ok
  installed", "unknown ok not-installed", "deinstall ok config-files"), and
  exits 0 for every package dpkg has a record of; only the state `installed`
  means the files are on disk. A package dpkg never heard of exits 1.
- What the configured archives offer: `apt-cache policy NAME` prints a block
  with `Candidate: VERSION` (`(none)` when nothing offers it) and prints
  nothing at all, still exiting 0, for a name no source knows. Given several
  names it prints their blocks in that order, as its runs one name at a time
  would, and reads the package lists once (half a CPU second here, as for one
  name): doctor asks for every name it may need at its first question.

The archive facts per release (tests/fixtures/packages/README.md says where
each was read): Debian 12's archive has Compose v1 only (docker-compose 1.29)
and no buildx; Debian 13 has docker-compose 2.26 (which installs the CLI
plugin) and docker-buildx 0.13; Ubuntu 22.04 and 24.04 have docker-compose-v2
and docker-buildx in universe, built for their docker.io. Docker's own
repository calls them docker-compose-plugin and docker-buildx-plugin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sm12x.doctor.host import Host, Output


@dataclass(frozen=True)
class Plugin:
    what: str  # how a reader calls it
    docker_repo: str  # the package in Docker's own repository
    debian: str  # the package in Debian's archive from DEBIAN_SINCE on
    debian_since: int
    ubuntu: str  # the package in Ubuntu's universe from UBUNTU_SINCE on
    ubuntu_since: float
    min_major: int = 0  # a candidate older than this is not the plugin (Compose v1)


COMPOSE = Plugin(
    "Compose v2",
    "docker-compose-plugin",
    "docker-compose",
    13,
    "docker-compose-v2",
    22.04,
    min_major=2,
)
BUILDX = Plugin("buildx", "docker-buildx-plugin", "docker-buildx", 13, "docker-buildx", 22.04)
# Every package `advice` may ask apt-cache about.
APT_NAMES = tuple(
    dict.fromkeys(n for p in (COMPOSE, BUILDX) for n in (p.docker_repo, p.debian, p.ubuntu))
)

DEBIAN_DOCKER_REPO = "https://docs.docker.com/engine/install/debian/#install-using-the-repository"
UBUNTU_DOCKER_REPO = "https://docs.docker.com/engine/install/ubuntu/#install-using-the-repository"


@dataclass(frozen=True)
class Distro:
    id: str
    like: frozenset[str]
    version: str
    name: str
    dgx: str | None = None  # DGX OS's own name for itself, from /etc/dgx-release

    @property
    def family(self) -> set[str]:
        return {self.id, *self.like}

    @property
    def debian_like(self) -> bool:
        return bool(self.family & {"debian", "ubuntu"})

    @property
    def rpm_like(self) -> bool:
        return bool(self.family & {"fedora", "rhel", "centos"})

    @property
    def label(self) -> str:
        return f"{self.dgx} ({self.name})" if self.dgx else self.name

    def release(self) -> float | None:
        match = re.match(r"\d+(\.\d+)?", self.version)
        return float(match[0]) if match else None


def key_values(text: str) -> dict[str, str]:
    """KEY=value lines (os-release, dgx-release), quotes stripped."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            values[key] = value.strip().strip("'\"")
    return values


def distro(host: Host) -> Distro:
    release = key_values(host.read("/etc/os-release") or "")
    dgx = key_values(host.read("/etc/dgx-release") or "")
    return Distro(
        id=release.get("ID", ""),
        like=frozenset(release.get("ID_LIKE", "").split()),
        version=release.get("VERSION_ID", ""),
        name=release.get("PRETTY_NAME") or release.get("ID") or "this system",
        dgx=(
            f"DGX OS {dgx['DGX_SWBUILD_VERSION']}"
            if dgx.get("DGX_SWBUILD_VERSION")
            else "DGX OS"
            if dgx
            else None
        ),
    )


def dpkg_state(host: Host, package: str) -> str | None:
    """dpkg's state word for package ("installed", "not-installed",
    "config-files", ...); "not-installed" when dpkg has no record of it;
    None when dpkg-query cannot be asked."""
    out = host.run(["dpkg-query", "-W", "-f=${Status}", package])
    if out.error:
        return None
    if out.returncode == 1 and "no packages found" in out.stderr:
        return "not-installed"
    words = out.stdout.split()
    if out.returncode != 0 or len(words) != 3:
        return None
    return words[2]


def installed(host: Host, package: str) -> bool:
    """The package's files are on disk: dpkg's state is `installed` (want
    `install` or `hold`; `not-installed` and `config-files` are not)."""
    return dpkg_state(host, package) == "installed"


def apt_candidate(host: Host, package: str) -> str | None:
    """The version `apt-get install package` would install, or None (no source
    offers it, or apt-cache cannot be asked). The first question asks apt-cache
    about every package `advice` may need too (APT_NAMES), once per host."""
    known = host.asked.setdefault("apt-cache policy", {})
    if package not in known:
        names = [package, *(n for n in APT_NAMES if n != package and n not in known)]
        out = host.run(["apt-cache", "policy", *names])
        for name in names:
            known[name] = candidate_in(out, name)
    found = known[package]
    return found if isinstance(found, str) else None


def candidate_in(out: Output, package: str) -> str | None:
    """The candidate version in the package's block of `apt-cache policy`'s output."""
    if not out.ok:
        return None
    block = re.search(rf"^{re.escape(package)}:\n((?:[ \t].*\n?)*)", out.stdout, re.MULTILINE)
    if block is None:
        return None
    candidate = re.search(r"^\s*Candidate:\s*(\S+)", block[1], re.MULTILINE)
    if candidate is None or candidate[1] == "(none)":
        return None
    return candidate[1]


def major(version: str) -> int | None:
    """The upstream major version of a Debian version ("5:28.0.1-1~debian.12",
    "1.29.2-3", "2.24.6+ds1-0ubuntu2")."""
    match = re.match(r"(?:\d+:)?(\d+)", version)
    return int(match[1]) if match else None


def archive_package(found: Distro, plugin: Plugin) -> str | None:
    """The distribution's own package for the plugin in this release, if it has one."""
    release = found.release()
    if release is None:
        return None
    if "ubuntu" in found.family:
        return plugin.ubuntu if release >= plugin.ubuntu_since else None
    if found.id == "debian":
        return plugin.debian if release >= plugin.debian_since else None
    return None


@dataclass(frozen=True)
class Advice:
    fix: str
    data: dict


def advice(host: Host, plugin: Plugin) -> Advice:
    """What to install for the plugin on this machine, and the facts it rests on."""
    found = distro(host)
    data: dict = {"distro": found.id, "release": found.version, "dgx": found.dgx}
    if found.rpm_like:
        out = host.run(["rpm", "-q", "docker-ce-cli"])
        ours = " like this machine's docker-ce-cli" if out.ok else ""
        return Advice(
            f"{plugin.docker_repo} from Docker's repository{ours}: sudo dnf install "
            f"{plugin.docker_repo}",
            data,
        )
    if not found.debian_like:
        return Advice(
            f"the {plugin.what} CLI plugin: {plugin.docker_repo} from Docker's "
            f"repository (https://docs.docker.com/engine/install/), or "
            f"{plugin.debian} / {plugin.ubuntu} on Debian 13 / Ubuntu",
            data,
        )

    docker_ce = dpkg_state(host, "docker-ce-cli")
    data["docker-ce-cli"] = docker_ce
    repo_version = apt_candidate(host, plugin.docker_repo)
    data[plugin.docker_repo] = repo_version
    if docker_ce == "installed":
        offered = f" ({repo_version} offered)" if repo_version else ""
        return Advice(
            f"{plugin.docker_repo}, from Docker's repository like this machine's "
            f"docker-ce-cli{offered}: sudo apt-get install {plugin.docker_repo}",
            data,
        )

    own = archive_package(found, plugin)
    if own is not None:
        version = apt_candidate(host, own)
        data[own] = version
        if version is not None and plugin.min_major and (major(version) or 0) < plugin.min_major:
            own = None  # an archive newer than the table knows, but still v1
        elif version is not None:
            return Advice(
                f"{own}, {found.label}'s {plugin.what} for its docker.io ({version} "
                f"offered): sudo apt-get install {own}",
                data,
            )
        else:
            where = (
                " in universe (sudo add-apt-repository universe)"
                if ("ubuntu" in found.family)
                else ""
            )
            return Advice(
                f"{own}, from {found.label}'s archive{where}; apt-cache offers no "
                f"candidate yet: sudo apt-get update && sudo apt-get install {own}",
                data,
            )
    if repo_version is not None:
        return Advice(
            f"{plugin.docker_repo}, from Docker's repository (configured here, "
            f"{repo_version} offered): sudo apt-get install {plugin.docker_repo}",
            data,
        )
    instead = ""
    if plugin.min_major:
        v1 = apt_candidate(host, plugin.debian)
        data[plugin.debian] = v1
        if v1 is not None and (major(v1) or 0) < plugin.min_major:
            instead = (
                f" (its {plugin.debian} {v1} is Compose v1, which `docker compose` does not run)"
            )
    guide = UBUNTU_DOCKER_REPO if "ubuntu" in found.family else DEBIAN_DOCKER_REPO
    keep = (
        # The plugin is only a CLI plugin: the docker.io CLI finds it in
        # /usr/libexec/docker/cli-plugins, so nothing is removed for it.
        "; keep docker.io, nothing is removed first: the plugin needs no docker-ce, "
        "only Docker's Engine would replace docker.io"
        if dpkg_state(host, "docker.io") == "installed"
        else ""
    )
    return Advice(
        f"{found.label}'s archive has no {plugin.what} package{instead}: add Docker's "
        f"apt repository ({guide}{keep}) and sudo apt-get install {plugin.docker_repo}",
        data,
    )
