"""What every check shares: the Check it adds, the Options doctor is asked,
and the Context of one run.

Verdicts: ok; warn (works, but something is off or unknown); fail; skip
(does not apply, or cannot be told here). A failed *required* check makes
`sm12x doctor` exit 1; warnings never do. A check that is not ok carries its
fix; an ok one carries none.

The checks themselves are in the modules named for what they look at
(gpu, container, storage, pair); sm12x.doctor.checks runs them in order.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sm12x.doctor import rdma
from sm12x.doctor.host import Host
from sm12x.launch import gpus as gpu_query
from sm12x.recipe import Recipe
from sm12x.settings import Loaded, load

# --min-free-gib's default: the free disk under Docker's data root below which
# the disk check fails (sm12x.doctor.storage says why 10 GiB).
DISK_FAIL_GIB = 10
GIB = 1024**3


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


class Context:
    """One doctor run: the host, the settings as compose sees them, what the
    checks so far found that later ones build on (the GPUs, the recipe, the
    image id, Docker's data root, the RDMA devices) and every check added."""

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

    def setting(self, name: str) -> str | None:
        """A variable that is not an sm12x setting (NCCL_IB_HCA, ...), as compose
        sees it: the shell's environment wins over .env."""
        return self.loaded.variable(name)[0]

    def image_ref(self) -> str:
        return self.settings.image_ref()

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
        """Record a check; an ok one drops its fix."""
        check = Check(id, title, verdict, required, detail, fix if verdict != "ok" else None, data)
        self.checks.append(check)
        return check


def meminfo(host: Host) -> dict[str, int]:
    """/proc/meminfo's fields in KiB (MemTotal, SwapTotal, ...); empty when unreadable."""
    values = {}
    for line in (host.read("/proc/meminfo") or "").splitlines():
        match = re.match(r"(\w+):\s+(\d+)", line)
        if match:
            values[match[1]] = int(match[2])
    return values
