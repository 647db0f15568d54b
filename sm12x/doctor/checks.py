"""The preflight checks, each with a verdict and a fix.

Verdicts: ok; warn (works, but something is off or unknown); fail; skip
(does not apply, or cannot be told here). A failed *required* check makes
`sm12x doctor` exit 1. The thresholds and why they are what they are:

- driver >= 580: the image is CUDA 13.0 (versions.env CUDA_VERSION), which
  needs an R580 or newer driver;
- GPU memory >= 85% of the recipe's figure: tools count memory differently
  (an RTX PRO 6000 shows 97,887 MiB = 95.6 GiB for its 96 GB) but a card well
  under the recipe's size will not hold its share of the weights;
- shared memory: compose runs with `ipc: host`, so sglang and NCCL use the
  host's /dev/shm; under 1 GiB is the 64 MB Docker default kind of setup
  that breaks NCCL, under 32 GiB is below what peers run (32-64 GB);
- free disk under Docker's data root (the image and the kernel-cache
  volume): fail under 10 GiB, warn under 50 GiB. Not measured: a margin for
  the image plus flashinfer/Triton/DeepGEMM caches; change with --min-free-gib.
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sm12x.doctor import model_dir as model_checks
from sm12x.doctor import packages, rdma
from sm12x.doctor.host import Host
from sm12x.errors import UserError
from sm12x.fields import HostName, parse
from sm12x.launch import gpus as gpu_query
from sm12x.recipe import Recipe, RecipeError, load_all, load_recipe
from sm12x.recipe.lines import DEFAULT_LINE, line_named
from sm12x.settings import Loaded, load
from sm12x.versions import load_versions

MIN_DRIVER_MAJOR = 580
MEMORY_ALLOWANCE = 0.85
SHM_FAIL_GIB = 1
SHM_WARN_GIB = 32
DISK_FAIL_GIB = 10
DISK_WARN_GIB = 50
GIB = 1024**3
SUPPORTED_CAPS = ("12.0", "12.1")
# .env variables whose value must not be committed.
SECRET_NAME = re.compile(r"(API_KEY|TOKEN|SECRET|PASSWORD)$")


@dataclass
class Check:
    id: str
    title: str
    verdict: str  # ok | warn | fail | skip
    required: bool
    detail: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.required and self.verdict == "fail"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Options:
    """What doctor is asked. recipe, model_dir, image and env_file are settings
    (sm12x.settings): given here they are flags; `loaded`, when the command has
    read them already, replaces all four."""

    recipe: str | None = None
    model_dir: str | None = None
    env_file: Path | str | None = None
    peer: str | None = None
    peer_report: Path | None = None
    image: str | None = None
    min_free_gib: float = DISK_FAIL_GIB
    verify_hashes: bool = False
    ssh: bool = True
    loaded: Loaded | None = None


class Doctor:
    def __init__(
        self, host: Host, options: Options, progress: Callable[[str], None] | None = None
    ) -> None:
        self.host = host
        self.options = options
        self.progress = progress or (lambda _message: None)
        # As compose sees them: the shell's environment wins over .env.
        self.loaded = options.loaded or load(
            {"recipe": options.recipe, "model_dir": options.model_dir, "image": options.image},
            options.env_file,
            environ=host.environ,
        )
        self.settings = self.loaded.settings
        self.checks: list[Check] = []
        self.gpus: list[gpu_query.Gpu] = []
        self.recipe: Recipe | None = None
        self.image_id: str | None = None
        self.docker_root = "/var/lib/docker"
        self.rdma_devices: list[rdma.Device] = []

    # --- plumbing ---------------------------------------------------------------

    def setting(self, name: str) -> str | None:
        """A variable that is not an sm12x setting (NCCL_IB_HCA, ...), as compose
        sees it: the shell's environment wins over .env."""
        return self.loaded.variable(name)[0]

    def add(
        self,
        id: str,
        title: str,
        verdict: str,
        detail: str,
        fix: str | None = None,
        /,
        required: bool = True,
        **data: Any,
    ) -> Check:
        check = Check(id, title, verdict, required, detail, fix if verdict != "ok" else None, data)
        self.checks.append(check)
        return check

    def run(self) -> list[Check]:
        steps = [
            ("GPUs", self.check_gpus),
            ("driver", self.check_driver),
            ("recipe", self.check_recipe),
            ("GPU memory", self.check_gpu_memory),
            ("Docker", self.check_docker),
            ("model", self.check_model),
            ("disk", self.check_disk),
            ("shared memory", self.check_shm),
            (".env", self.check_env_file),
        ]
        for label, step in steps:
            self.progress(label)
            step()
        if self.pair_applies():
            for label, step in (
                ("RDMA", self.check_rdma),
                ("RoCE interface", self.check_interfaces),
                ("peer", self.check_peer),
                ("same image", self.check_same_image),
                ("swap", self.check_swap),
            ):
                self.progress(label)
                step()
        return self.checks

    def pair_applies(self) -> bool:
        if self.options.peer or self.options.peer_report:
            return True
        if self.recipe is not None:
            return self.recipe.is_multinode
        return any(g.model == "gb10" for g in self.gpus)

    # --- GPUs -------------------------------------------------------------------

    def check_gpus(self) -> None:
        out = self.host.run(gpu_query.QUERY, timeout=60)
        fix_driver = (
            "install the NVIDIA driver (R580 or newer) so nvidia-smi works; reboot after installing"
        )
        if not out.ok:
            self.add("gpus", "GPUs", "fail", f"nvidia-smi: {out.why()}", fix_driver)
            return
        try:
            self.gpus = gpu_query.parse_nvidia_smi(out.stdout)
        except gpu_query.GpuQueryError as exc:
            self.add("gpus", "GPUs", "fail", str(exc), fix_driver)
            return
        if not self.gpus:
            self.add("gpus", "GPUs", "fail", "nvidia-smi lists no GPU", fix_driver)
            return
        found = gpu_query.describe_gpus(self.gpus)
        data: dict[str, Any] = {"gpus": [asdict(g) for g in self.gpus]}
        wrong = sorted({g.compute_capability for g in self.gpus} - set(SUPPORTED_CAPS))
        if wrong:
            self.add(
                "gpus",
                "GPUs",
                "fail",
                f"{found}: compute capability {', '.join(wrong)} is not sm_120/sm_121",
                "sm12x serves RTX PRO 6000 / RTX 5090 (sm_120) and DGX Spark (sm_121) "
                "only; on other GPUs use upstream sglang's own images",
                **data,
            )
            return
        unknown = sorted({g.name for g in self.gpus if g.model is None})
        if unknown:
            self.add(
                "gpus",
                "GPUs",
                "warn",
                f"{found}: no recipe is written for {', '.join(unknown)}",
                "pass --recipe NAME to check against a recipe of similar hardware, or "
                "write one (docs/recipes.md)",
                **data,
            )
            return
        self.add("gpus", "GPUs", "ok", found, **data)

    def check_driver(self) -> None:
        if not self.gpus:
            self.add("driver", "NVIDIA driver", "skip", "no GPU seen", required=False)
            return
        drivers = sorted({g.driver for g in self.gpus})
        majors = []
        for driver in drivers:
            match = re.match(r"(\d+)", driver)
            majors.append(int(match[1]) if match else 0)
        if min(majors) < MIN_DRIVER_MAJOR:
            cuda = load_versions(self.settings.track_name)["CUDA_VERSION"]
            self.add(
                "driver",
                "NVIDIA driver",
                "fail",
                f"driver {', '.join(drivers)}",
                f"the image is built on CUDA {cuda}, which needs driver "
                f"{MIN_DRIVER_MAJOR} or newer: upgrade the driver",
                drivers=drivers,
            )
            return
        self.add("driver", "NVIDIA driver", "ok", f"driver {', '.join(drivers)}", drivers=drivers)

    # --- recipe -------------------------------------------------------------------

    def check_recipe(self) -> None:
        title = "recipe"
        choice = self.settings.recipe
        if choice != "auto":
            try:
                self.recipe = load_recipe(choice)
            except RecipeError as exc:
                self.add("recipe", title, "fail", str(exc), "pass a name from recipes/")
                return
            hw = self.recipe.hardware
            if not self.gpus:
                self.add(
                    "recipe",
                    title,
                    "warn",
                    f"{self.recipe.name} (named; no GPU seen to check it against)",
                    "fix the GPU check first",
                    recipe=self.recipe.name,
                )
                return
            fits = len(self.gpus) >= hw.gpus_per_node and all(
                g.model == hw.gpu and g.compute_capability == hw.compute_capability
                for g in self.gpus
            )
            if not fits:
                self.add(
                    "recipe",
                    title,
                    "fail",
                    f"{self.recipe.name} needs {hw.gpus_per_node}x {hw.gpu} ({hw.sm}) per "
                    f"node; this machine has {gpu_query.describe_gpus(self.gpus)}",
                    "name the recipe for this machine, or --recipe auto",
                    recipe=self.recipe.name,
                )
                return
            self.add(
                "recipe",
                title,
                "ok",
                f"{self.recipe.name} (named): fits {gpu_query.describe_gpus(self.gpus)}",
                recipe=self.recipe.name,
            )
            return
        if not self.gpus:
            self.add(
                "recipe",
                title,
                "fail",
                "cannot pick one: no GPU seen",
                "fix the GPU check, or pass --recipe NAME",
            )
            return
        try:
            pick = gpu_query.pick_recipe(self.gpus, load_all())
        except gpu_query.NoRecipeMatch as exc:
            self.add(
                "recipe",
                title,
                "fail",
                str(exc).removeprefix("SM12X_RECIPE=auto "),
                "use a machine a recipe is written for (README support matrix), or write "
                "a recipe (docs/recipes.md)",
            )
            return
        self.recipe = pick.recipe
        self.add(
            "recipe",
            title,
            "ok",
            f"{pick.recipe.name}: {pick.reason}",
            recipe=pick.recipe.name,
            status=pick.recipe.status.state,
        )

    def check_gpu_memory(self) -> None:
        title = "GPU memory"
        if self.recipe is None or not self.gpus:
            self.add("gpu-memory", title, "skip", "no recipe to compare with", required=False)
            return
        hw = self.recipe.hardware
        need_gib = hw.memory_gib_per_gpu * MEMORY_ALLOWANCE
        if hw.unified_memory or all(g.memory_mib is None for g in self.gpus):
            total_kib = _meminfo(self.host).get("MemTotal")
            if total_kib is None:
                self.add(
                    "gpu-memory",
                    title,
                    "warn",
                    "unified memory: /proc/meminfo unreadable",
                    "check `free -g` by hand",
                    required=False,
                )
                return
            have = total_kib / 1024**2
            verdict = "ok" if have >= need_gib else "fail"
            self.add(
                "gpu-memory",
                title,
                verdict,
                f"unified memory {have:.1f} GiB (recipe {self.recipe.name}: "
                f"{hw.memory_gib_per_gpu} GB)",
                f"{self.recipe.name} needs about {hw.memory_gib_per_gpu} GB per node",
                memory_gib=round(have, 1),
            )
            return
        small = [
            g for g in self.gpus if g.memory_mib is not None and g.memory_mib / 1024 < need_gib
        ]
        sizes = sorted({f"{g.memory_mib / 1024:.1f} GiB" for g in self.gpus if g.memory_mib})
        if small:
            self.add(
                "gpu-memory",
                title,
                "fail",
                f"{len(small)} GPU(s) with {', '.join(sizes)}; {self.recipe.name} is "
                f"written for {hw.memory_gib_per_gpu} GB cards",
                "use the recipe for these cards, or cards of the recipe's size",
                sizes=sizes,
            )
            return
        self.add(
            "gpu-memory",
            title,
            "ok",
            f"{', '.join(sizes)} per GPU (recipe: {hw.memory_gib_per_gpu} GB)",
            sizes=sizes,
        )

    # --- Docker -----------------------------------------------------------------

    def image_ref(self) -> str:
        return self.settings.image_ref()

    def check_docker(self) -> None:
        version = self.host.run(["docker", "version", "--format", "{{.Server.Version}}"])
        missing = bool(version.error and "not installed" in version.error)
        if not version.ok:
            fix = (
                "install Docker Engine (https://docs.docker.com/engine/install/)"
                if missing
                else "start the daemon (sudo systemctl start docker) and make sure you may use it "
                "(sudo usermod -aG docker $USER, then log in again)"
            )
            self.add(
                "docker", "Docker", "fail", f"the daemon does not answer: {version.why()}", fix
            )
        elif not version.stdout.strip():
            self.add(
                "docker",
                "Docker",
                "fail",
                "the daemon answered without a version: "
                "DOCKER_HOST may point at something that is not Docker",
                "check DOCKER_HOST / the docker context (docker context ls)",
            )
        else:
            self.add("docker", "Docker", "ok", f"Docker Engine {version.stdout.strip()}")
        # The CLI plugin answers without a daemon: checked whenever the CLI is here.
        if missing:
            self.add("compose", "docker compose", "skip", "needs the docker CLI", required=False)
            self.add(
                "buildx",
                "docker buildx (image build)",
                "skip",
                "needs the docker CLI",
                required=False,
            )
        else:
            self.check_compose()
            self.check_buildx()
        if not (version.ok and version.stdout.strip()):
            for id, title in (("nvidia-runtime", "NVIDIA container runtime"), ("image", "image")):
                self.add(id, title, "skip", "needs the Docker daemon", required=False)
            return

        info = self.host.run(["docker", "info", "--format", "{{json .}}"])
        runtimes: list[str] = []
        if info.ok:
            try:
                data = json.loads(info.stdout)
                runtimes = sorted((data.get("Runtimes") or {}).keys())
                self.docker_root = data.get("DockerRootDir") or self.docker_root
            except (ValueError, AttributeError):
                pass
        hooks = [
            name
            for name in ("nvidia-container-runtime-hook", "nvidia-container-cli", "nvidia-ctk")
            if self.host.which(name)
        ]
        if "nvidia" in runtimes or hooks:
            how = (
                "runtime `nvidia` registered"
                if "nvidia" in runtimes
                else "toolkit installed: " + ", ".join(hooks)
            )
            self.add(
                "nvidia-runtime",
                "NVIDIA container runtime",
                "ok",
                how,
                runtimes=runtimes,
                tools=hooks,
            )
        else:
            self.add(
                "nvidia-runtime",
                "NVIDIA container runtime",
                "fail",
                f"no NVIDIA Container Toolkit (runtimes: {', '.join(runtimes) or 'none'})",
                "install nvidia-container-toolkit, run `sudo nvidia-ctk runtime configure "
                "--runtime=docker` and restart Docker: compose's GPU reservations need it",
                runtimes=runtimes,
            )

        ref = self.image_ref()
        image = self.host.run(
            ["docker", "image", "inspect", "--format", "{{.Id}} {{json .RepoDigests}}", ref]
        )
        if image.ok:
            image_id, _, digests = image.stdout.strip().partition(" ")
            self.image_id = image_id
            try:
                digest_list = json.loads(digests) if digests else []
            except ValueError:
                digest_list = []
            self.add(
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
        else:
            self.add(
                "image",
                "image",
                "warn",
                f"{ref} is not on this machine",
                f"until the image is published, build it in the sm12x checkout: "
                f'{self.build_command()} (README.md, "Build or pull the image"); once it '
                "is, docker compose pull (docs/image.md)",
                required=False,
                ref=ref,
            )

    def build_command(self) -> str:
        """The README's build command for this machine's architecture: the recipe's
        when one is known, else this host's."""
        arch = self.recipe.hardware.cpu_arch if self.recipe is not None else platform.machine()
        target = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(arch)
        if target is None:
            return "docker buildx bake image-amd64 --load (image-arm64 on arm64)"
        return f"docker buildx bake image-{target} --load"

    def check_compose(self) -> None:
        # Plain `version`: without the plugin, `--short` would only earn
        # "unknown flag: --short" where this says "unknown command: docker compose".
        compose = self.host.run(["docker", "compose", "version"])
        found = re.search(r"v?(\d+\.\d+\.\d+\S*)", compose.stdout) if compose.ok else None
        if found:
            self.add("compose", "docker compose", "ok", f"Compose {found[1]}")
            return
        legacy = (
            " (the docker-compose here is a separate program: compose.yaml's commands "
            "are `docker compose`, the v2 plugin)"
            if self.host.which("docker-compose")
            else ""
        )
        advice = packages.advice(self.host, packages.COMPOSE)
        self.add(
            "compose",
            "docker compose",
            "fail",
            f"no Compose v2 plugin: {compose.why()}{legacy}; without it `docker compose "
            "up -d` says \"unknown shorthand flag: 'd'\"",
            f"install it: {advice.fix}",
            **advice.data,
        )

    def check_buildx(self) -> None:
        """The plugin the image build runs (until the image is published, the
        first thing a user does); not required: a copied or pulled image needs none."""
        title = "docker buildx (image build)"
        build = self.build_command()
        version = self.host.run(["docker", "buildx", "version"])
        found = re.search(r"\bv?(\d+\.\d+\.\d+\S*)", version.stdout) if version.ok else None
        if found is None:
            advice = packages.advice(self.host, packages.BUILDX)
            self.add(
                "buildx",
                title,
                "warn",
                f"no buildx plugin: {version.why()}; without it `{build}` says "
                '"unknown flag: --load"',
                f"install it to build the image: {advice.fix}",
                required=False,
                **advice.data,
            )
            return
        # Without the plugin `docker buildx bake --help` prints docker's own
        # help and exits 0: bake is there only if its own usage line is.
        bake = self.host.run(["docker", "buildx", "bake", "--help"])
        if not (bake.ok and "docker buildx bake" in bake.stdout and "--load" in bake.stdout):
            advice = packages.advice(self.host, packages.BUILDX)
            self.add(
                "buildx",
                title,
                "warn",
                f"buildx {found[1]} has no `bake --load`: {bake.why()}",
                f"install a current buildx: {advice.fix}",
                required=False,
                version=found[1],
                **advice.data,
            )
            return
        self.add(
            "buildx",
            title,
            "ok",
            f"buildx {found[1]}, bake available",
            required=False,
            version=found[1],
        )

    # --- model ------------------------------------------------------------------

    def _model_line(self):
        """The line and vision the model folder must serve: the recipe's, else the
        default line (auto, or no recipe: auto picks only default-line recipes)."""
        if self.recipe is None:
            return line_named(DEFAULT_LINE), False
        return self.recipe.model.model_line, self.recipe.model.vision

    def check_model(self) -> None:
        where = self.settings.model_dir
        if not where:
            self.add(
                "model-dir",
                "model folder",
                "fail",
                "SM12X_MODEL_DIR is not set",
                "cp .env.example .env and set SM12X_MODEL_DIR (or pass --model-dir)",
            )
            return
        model = Path(where)
        if not model.is_dir():
            self.add(
                "model-dir",
                "model folder",
                "fail",
                f"{model} is not a folder",
                "download the checkpoint there (see .env.example) or fix SM12X_MODEL_DIR",
                path=str(model),
            )
            return
        self.add("model-dir", "model folder", "ok", str(model), path=str(model))
        for id, title, finding in (
            ("model-config", "model config", model_checks.check_config(model, *self._model_line())),
            (
                "model-shards",
                "model shards",
                model_checks.check_shards(
                    model, verify_hashes=self.options.verify_hashes, progress=self.progress
                ),
            ),
        ):
            self.add(id, title, finding.verdict, finding.detail, finding.fix, **finding.data)
        expected = (
            self.recipe.model.revision
            if self.recipe
            else next(r.model.revision for r in load_all() if r.model.line == DEFAULT_LINE)
        )
        finding = model_checks.check_revision(model, expected)
        self.add(
            "model-revision",
            "model revision",
            finding.verdict,
            finding.detail,
            finding.fix,
            required=False,
            **finding.data,
        )
        finding = model_checks.check_tokenizer(model)
        self.add(
            "tokenizer", "tokenizer", finding.verdict, finding.detail, finding.fix, required=False
        )

    # --- disk and shared memory ---------------------------------------------------------

    def check_disk(self) -> None:
        root = self.docker_root
        where = root if self.host.path(root).exists() else "/"
        usage = self.host.disk(where)
        if usage is None:
            self.add(
                "disk",
                "free disk (Docker)",
                "warn",
                f"cannot read free space of {where}",
                "check `df -h` by hand",
                required=False,
            )
            return
        free_gib = usage[1] / GIB
        detail = f"{free_gib:.0f} GiB free under {where}"
        if free_gib < self.options.min_free_gib:
            self.add(
                "disk",
                "free disk (Docker)",
                "fail",
                detail,
                "free space there: the image and the kernel-cache volume live under "
                "Docker's data root",
                free_gib=round(free_gib, 1),
                path=where,
            )
        elif free_gib < DISK_WARN_GIB:
            self.add(
                "disk",
                "free disk (Docker)",
                "warn",
                detail,
                f"under {DISK_WARN_GIB} GiB: kernel caches and image updates may fill it",
                required=False,
                free_gib=round(free_gib, 1),
                path=where,
            )
        else:
            self.add(
                "disk", "free disk (Docker)", "ok", detail, free_gib=round(free_gib, 1), path=where
            )

    def check_shm(self) -> None:
        usage = self.host.disk("/dev/shm")
        if usage is None:
            self.add(
                "shm",
                "shared memory",
                "fail",
                "/dev/shm is missing",
                "mount a tmpfs at /dev/shm (it is the host's, shared through ipc: host)",
            )
            return
        total_gib = usage[0] / GIB
        detail = f"/dev/shm {total_gib:.1f} GiB ({usage[1] / GIB:.1f} GiB free)"
        fix = (
            "grow it: `sudo mount -o remount,size=64G /dev/shm` (and in /etc/fstab to keep "
            "it); compose shares the host's /dev/shm with sglang (ipc: host)"
        )
        if total_gib < SHM_FAIL_GIB:
            self.add("shm", "shared memory", "fail", detail, fix, total_gib=round(total_gib, 2))
        elif total_gib < SHM_WARN_GIB:
            self.add(
                "shm",
                "shared memory",
                "warn",
                detail + f"; peers run {SHM_WARN_GIB}-64 GB",
                fix,
                required=False,
                total_gib=round(total_gib, 2),
            )
        else:
            self.add("shm", "shared memory", "ok", detail, total_gib=round(total_gib, 2))

    def check_env_file(self) -> None:
        """A .env holding a key must not go into git: tracked, it is committed
        with the next commit of that file; neither tracked nor ignored, with
        the next `git add -A`."""
        path = self.loaded.env_file.path
        title = ".env not in git"
        if path is None or str(path) == os.devnull:
            self.add("env-git", title, "skip", "no .env read", required=False)
            return
        secrets = sorted(k for k, v in self.loaded.dotenv.items() if v and SECRET_NAME.search(k))
        if not secrets:
            self.add("env-git", title, "ok", f"{path} holds no key", required=False)
            return
        where = ["git", "-C", str(path.parent)]
        tracked = self.host.run([*where, "ls-files", "--error-unmatch", "--", path.name])
        if tracked.error or (tracked.returncode != 0 and "not a git repository" in tracked.stderr):
            self.add("env-git", title, "ok", f"{path} is not in a git work tree", required=False)
            return
        names = ", ".join(secrets)
        if tracked.ok:
            self.add(
                "env-git",
                title,
                "warn",
                f"{path} holds {names} and git tracks it",
                f"stop tracking it (git rm --cached {path.name}), keep it ignored "
                "(.gitignore has .env) and change the key: it is in git's history",
                required=False,
                path=str(path),
                keys=secrets,
            )
            return
        ignored = self.host.run([*where, "check-ignore", "-q", "--", path.name])
        if ignored.returncode == 1:
            self.add(
                "env-git",
                title,
                "warn",
                f"{path} holds {names} and git does not ignore it: `git add -A` would commit it",
                f"add {path.name} to .gitignore",
                required=False,
                path=str(path),
                keys=secrets,
            )
            return
        self.add(
            "env-git",
            title,
            "ok",
            f"{path} holds {names}; git ignores it",
            required=False,
            path=str(path),
        )

    # --- the DGX Spark pair --------------------------------------------------------------

    def check_rdma(self) -> None:
        out = self.host.run(["ibv_devinfo"])
        if not out.ok:
            self.add(
                "rdma",
                "RDMA devices",
                "fail",
                f"ibv_devinfo: {out.why()}",
                "install rdma-core / ibverbs-utils (DGX OS ships them) and check the "
                "ConnectX driver (mlx5_core) is loaded",
            )
            return
        self.rdma_devices = rdma.parse_ibv_devinfo(out.stdout)
        active = [d.name for d in self.rdma_devices if d.active]
        listing = ", ".join(f"{d.name} ({_device_state(d)})" for d in self.rdma_devices)
        if not active:
            self.add(
                "rdma",
                "RDMA devices",
                "fail",
                f"no active port: {listing or 'no device'}",
                "connect the QSFP cable between the two Sparks and bring the link up "
                "(ip link set <if> up); ibv_devinfo must show PORT_ACTIVE",
                devices=listing,
            )
            return
        wanted = rdma.split_hca_list(self.setting("NCCL_IB_HCA") or "")
        if not wanted:
            self.add(
                "rdma",
                "RDMA devices",
                "fail",
                f"NCCL_IB_HCA is not set; active: {', '.join(active)}",
                f"set NCCL_IB_HCA={','.join(active)} in .env",
                active=active,
            )
            return
        names = {d.name: d for d in self.rdma_devices}
        bad = [w for w in wanted if w not in names or not names[w].active]
        if bad:
            self.add(
                "rdma",
                "RDMA devices",
                "fail",
                f"NCCL_IB_HCA names {', '.join(bad)}, which "
                f"{'is' if len(bad) == 1 else 'are'} not active here ({listing})",
                f"set NCCL_IB_HCA={','.join(active)} in .env",
                active=active,
            )
            return
        self.add(
            "rdma",
            "RDMA devices",
            "ok",
            f"NCCL_IB_HCA {','.join(wanted)} active ({listing})",
            active=active,
        )
        self._check_gid(wanted)

    def _check_gid(self, hcas: list[str]) -> None:
        index = int(self.setting("NCCL_IB_GID_INDEX") or 3)
        types = {h: rdma.gid_type(self.host, h, 1, index) for h in hcas}
        wrong = {h: t for h, t in types.items() if t is not None and t.lower() != "roce v2"}
        unknown = [h for h, t in types.items() if t is None]
        if wrong:
            self.add(
                "roce-gid",
                "RoCE GID index",
                "fail",
                f"GID index {index} is {', '.join(f'{h}: {t}' for h, t in wrong.items())}, "
                "not RoCE v2",
                "set NCCL_IB_GID_INDEX in .env to the index `show_gids` "
                "lists as v2 with an IPv4 address",
                index=index,
            )
        elif unknown:
            self.add(
                "roce-gid",
                "RoCE GID index",
                "warn",
                f"cannot read GID {index} of {', '.join(unknown)}",
                "check with `show_gids` that it is RoCE v2",
                required=False,
                index=index,
            )
        else:
            value = rdma.gid_value(self.host, hcas[0], 1, index) or "?"
            self.add(
                "roce-gid",
                "RoCE GID index",
                "ok",
                f"index {index} is RoCE v2 ({value})",
                index=index,
            )

    def check_interfaces(self) -> None:
        devices = self.rdma_devices
        suggested = sorted(
            {n for d in devices if d.active for n in rdma.netdevs_of(self.host, d.name)}
        )
        hint = f" (on the active RDMA devices: {', '.join(suggested)})" if suggested else ""
        for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            value = self.setting(name)
            id = name.lower().replace("_", "-")
            if not value:
                self.add(
                    id,
                    name,
                    "fail",
                    "not set",
                    f"set {name} in .env to the RoCE link's interface{hint}",
                )
                continue
            first = value.lstrip("^=").split(",")[0]
            state = rdma.interface_state(self.host, first)
            if state is None:
                self.add(
                    id,
                    name,
                    "fail",
                    f"{first} does not exist here",
                    f"set {name} to an existing interface{hint}",
                )
            elif state != "up":
                self.add(
                    id,
                    name,
                    "fail",
                    f"{first} is {state}",
                    f"bring it up (sudo ip link set {first} up) and check the cable",
                )
            else:
                self.add(id, name, "ok", f"{first} is up")

    def peer_address(self) -> tuple[str | None, str]:
        """The other node, validated as a host name or address: it goes to ssh
        and ping as an argument, where '-oProxyCommand=...' would be an option."""
        if self.options.peer:
            return parse(HostName, self.options.peer, "--peer"), "--peer"
        head = self.settings.head_addr
        if head:
            # SM12X_HEAD_ADDR may carry the dist-init port: the peer is the host.
            head = re.sub(r"^\[(.*)\](:\d+)?$|^([^:]+):\d+$", lambda m: m[1] or m[3], head)
        if head and head not in self.local_addresses():
            return head, "SM12X_HEAD_ADDR (this is the second node)"
        return None, (
            "this is the head node (SM12X_HEAD_ADDR is one of its addresses)"
            if head
            else "SM12X_HEAD_ADDR is not set"
        )

    def local_addresses(self) -> set[str]:
        out = self.host.run(["ip", "-o", "addr", "show"])
        return set(re.findall(r"\binet6? ([0-9a-fA-F.:]+)/", out.stdout)) if out.ok else set()

    def check_peer(self) -> None:
        try:
            peer, how = self.peer_address()
        except UserError as exc:
            self.add(
                "peer",
                "peer reachable",
                "fail",
                exc.message,
                "set a host name or IP address (the other node on the RoCE link)",
            )
            return
        if peer is None:
            self.add(
                "peer",
                "peer reachable",
                "skip",
                how,
                "pass --peer ADDR (the other Spark's address on the RoCE link)",
                required=False,
            )
            return
        # `--`: whatever peer is, ping reads it as the host, never as an option.
        ping = self.host.run(["ping", "-c", "2", "-W", "2", "--", peer], timeout=15)
        if ping.error and "not installed" in ping.error:
            reachable, detail = _tcp_reachable(peer, 22, 3.0)
        else:
            reachable, detail = ping.ok, ("answers ping" if ping.ok else ping.why())
        if not reachable:
            self.add(
                "peer",
                "peer reachable",
                "fail",
                f"{peer} ({how}): {detail}",
                "check the cable, both interfaces' addresses (same subnet) and firewalls",
                peer=peer,
            )
            return
        route = self.host.run(["ip", "route", "get", peer])
        dev = re.search(r"\bdev (\S+)", route.stdout) if route.ok else None
        wanted = (self.setting("NCCL_SOCKET_IFNAME") or "").lstrip("^=").split(",")[0]
        if dev and wanted and dev[1] != wanted:
            self.add(
                "peer",
                "peer reachable",
                "warn",
                f"{peer} ({how}) {detail}, but through {dev[1]}, not {wanted}",
                "give the RoCE interfaces addresses in their own subnet so the peer is "
                "routed over the RoCE link",
                required=False,
                peer=peer,
                route=dev[1],
            )
            return
        self.add(
            "peer",
            "peer reachable",
            "ok",
            f"{peer} ({how}) {detail}" + (f" via {dev[1]}" if dev else ""),
            peer=peer,
        )

    def check_same_image(self) -> None:
        title = "same image on both nodes"
        if not self.image_id:
            self.add(
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
        other, source = self._peer_image()
        if other is None:
            self.add(
                "same-image",
                title,
                "warn",
                f"cannot see the peer's image ({source})",
                "run `sm12x doctor --json > peer.json` on the other node and pass "
                "--peer-report peer.json",
                required=False,
                local=self.image_id,
            )
        elif other != self.image_id:
            self.add(
                "same-image",
                title,
                "fail",
                f"this node {self.image_id[:19]}, the peer {other[:19]} ({source})",
                "run one image on both: copy this node's to the other (docker save "
                "IMAGE | ssh PEER docker load; two builds differ), or pull one digest on "
                "both once it is published (pin it, docs/image.md)",
                local=self.image_id,
                peer=other,
            )
        else:
            self.add(
                "same-image",
                title,
                "ok",
                f"{self.image_id[:19]} on both ({source})",
                local=self.image_id,
                peer=other,
            )

    def _peer_image(self) -> tuple[str | None, str]:
        if self.options.peer_report:
            try:
                report = json.loads(self.options.peer_report.read_text(encoding="utf-8"))
                for check in report.get("checks", []):
                    if check.get("id") == "image" and check.get("data", {}).get("id"):
                        return check["data"]["id"], f"--peer-report {self.options.peer_report}"
                return None, f"{self.options.peer_report} has no image id"
            except (OSError, ValueError, AttributeError) as exc:
                return None, f"{self.options.peer_report}: {exc}"
        try:
            peer, _ = self.peer_address()
        except UserError as exc:
            return None, exc.message
        if peer is None or not self.options.ssh:
            return None, "no peer address" if peer is None else "--no-ssh"
        # `--` ends ssh's options: the peer is the destination whatever it says.
        out = self.host.run(
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
                self.image_ref(),
            ],
            timeout=20,
        )
        if out.ok and out.stdout.strip().startswith("sha256:"):
            return out.stdout.strip(), f"ssh {peer}"
        return None, f"ssh {peer}: {out.why()}"

    def check_swap(self) -> None:
        if self.recipe is not None and not self.recipe.hardware.unified_memory:
            return
        swap_kib = _meminfo(self.host).get("SwapTotal")
        if swap_kib is None:
            return
        if swap_kib == 0:
            self.add(
                "swap",
                "swap (unified memory)",
                "warn",
                "no swap",
                "peers add swap against OOM kills while loading on unified memory "
                "(e.g. a 32 GB swap file); the recipe also drops the page cache after load",
                required=False,
            )
        else:
            self.add(
                "swap",
                "swap (unified memory)",
                "ok",
                f"{swap_kib / 1024**2:.0f} GiB",
                required=False,
            )


def _device_state(device: rdma.Device) -> str:
    if device.active:
        return "active"
    return device.ports[0].state if device.ports else "no port"


def _meminfo(host: Host) -> dict[str, int]:
    values = {}
    for line in (host.read("/proc/meminfo") or "").splitlines():
        match = re.match(r"(\w+):\s+(\d+)", line)
        if match:
            values[match[1]] = int(match[2])
    return values


def _tcp_reachable(host: str, port: int, timeout: float) -> tuple[bool, str]:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, f"accepts TCP on port {port}"
    except ConnectionRefusedError:
        return True, f"answers (port {port} refused)"
    except OSError as exc:
        return False, f"no answer on TCP port {port} ({exc.strerror or exc})"
