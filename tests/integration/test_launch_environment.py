"""The environment sglang starts with is built by sm12x launch, not inherited.

Real launches (`python -m sm12x.cli launch`) exec a stand-in
`sglang.launch_server` that records its argv and its whole environment; the
stand-in finds where to write beside its own package (standin.json), since no
variable of the test's reaches it unless the launcher passes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sm12x import launch_env as environment
from sm12x.recipe import load_recipe
from sm12x.versions import load_versions

ROOT = Path(__file__).resolve().parents[2]

STANDIN = """
import json, os, sys
here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
report = json.load(open(os.path.join(here, "standin.json")))["report"]
json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, open(report, "w"))
"""


def standin(tmp_path: Path, track: str = "pinned") -> Path:
    root = tmp_path / "standin"
    (root / "sglang").mkdir(parents=True, exist_ok=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "launch_server.py").write_text(STANDIN)
    version = load_versions(track)["SGLANG_VERSION"]
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    (root / "standin.json").write_text(json.dumps({"report": str(tmp_path / "report.json")}))
    return root


def launch(tmp_path: Path, extra_env: dict[str, str], *argv: str, track: str = "pinned"):
    root = standin(tmp_path, track)
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    recipe = "rtx-pro-6000-tp4" if track == "pinned" else "rtx-pro-6000-tp4-v41"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": f"{root}:{ROOT}",
        "LANG": "C.UTF-8",
        "SM12X_ENV_FILE": os.devnull,
        "SM12X_RECIPE": recipe,
        "SM12X_TRACK": track,
        "SM12X_MODEL_DIR": str(model),
        **extra_env,
    }
    done = subprocess.run(
        [sys.executable, "-m", "sm12x.cli", "launch", *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = tmp_path / "report.json"
    return done, (json.loads(report.read_text()) if report.exists() else None)


def one_line_refusal(done, name: str) -> str:
    assert done.returncode != 0, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, done.stderr
    # the allowlist's line, or the dumper's own (it names the debug server)
    assert name in errors[0] and ("recipe's env:" in errors[0] or "is refused" in errors[0]), (
        errors[0]
    )
    assert "Traceback" not in done.stderr
    return errors[0]


TRACKS = ["pinned", "current"]


@pytest.mark.parametrize("track", TRACKS)
def test_sglang_gets_only_what_the_recipe_settings_and_allowlist_give(tmp_path, track):
    extra = {
        "NCCL_DEBUG": "WARN",  # allowlisted by prefix
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "MY_SHELL_THING": "x",  # neither sglang nor the allowlist: not passed
        "CI": "true",  # sglang's own CI switch: left out
        "SM12X_API_KEY": "k-123456789",
        "SM12X_HOST": "127.0.0.1",
    }
    done, got = launch(tmp_path, extra, track=track)
    assert done.returncode == 0, done.stderr
    env = got["env"]
    assert env["NCCL_DEBUG"] == "WARN" and env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert "MY_SHELL_THING" not in env and "CI" not in env
    assert env["SM12X_API_KEY"] == "k-123456789"  # the settings' key, for sm12x.keyed
    assert "SM12X_RECIPE" not in env and "SM12X_MODEL_DIR" not in env
    # Every name in it is allowlisted or given by the recipe and the settings.
    recipe = "rtx-pro-6000-tp4" if track == "pinned" else "rtx-pro-6000-tp4-v41"
    given = {"SM12X_API_KEY", "SGLANG_RAGGED_VERIFY_MODE", *load_recipe(recipe).env}
    assert [n for n in env if not (environment.allowed(n) or n in given)] == []
    assert "--model-path" in got["argv"]


@pytest.mark.parametrize("track", TRACKS)
@pytest.mark.parametrize(
    "name,value",
    [
        ("DUMPER_SERVER_PORT", "40000"),  # the debug server on 0.0.0.0, no key
        ("SGLANG_GRPC_PORT", "31000"),
        ("SGL_ANYTHING", "1"),  # sglang's namespace, even a name it does not read yet
        ("MASTER_PORT", "29500"),
        ("OPENAI_API_KEY", "sk-x"),
    ],
)
def test_a_variable_sglang_reads_is_refused_from_the_caller(tmp_path, track, name, value):
    done, got = launch(tmp_path, {name: value}, track=track)
    one_line_refusal(done, name)
    assert got is None  # nothing started


@pytest.mark.parametrize("track", TRACKS)
@pytest.mark.parametrize(
    "name,value",
    [
        ("SGLANG_OLLAMA_CHAT_ROUTE", "/health/chat"),
        ("SGLANG_OLLAMA_GENERATE_ROUTE", "/metrics"),
        ("AIP_PREDICT_ROUTE", "/ready/predict"),
        ("SGLANG_OLLAMA_ROOT_ROUTE", "/health_generate"),
    ],
)
def test_a_route_moved_under_a_keyless_prefix_never_starts(tmp_path, track, name, value):
    """A variable that moves a generate or chat route under a path sglang's key
    middleware lets through (/health, /metrics, /ready) is refused by its own rule,
    in one line, before anything starts."""
    done, got = launch(tmp_path, {name: value}, track=track)
    assert done.returncode != 0 and got is None, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert name in errors[0] and "without the key" in errors[0], errors[0]


@pytest.mark.parametrize("track", TRACKS)
@pytest.mark.parametrize("dry", ["--dry-run", "--explain"])
@pytest.mark.parametrize("name", ["DUMPER_SERVER_PORT", "SGLANG_ENABLE_SPEC_V2"])
def test_the_dry_run_refuses_it_too(tmp_path, track, dry, name):
    done, got = launch(tmp_path, {name: "1"}, dry, track=track)
    one_line_refusal(done, name)


@pytest.mark.parametrize("track", TRACKS)
@pytest.mark.parametrize("mode", ["compact", "cap-accept", "COMPACT"])
def test_the_recipe_s_verify_mode_beats_the_shell_s(tmp_path, track, mode):
    """A static recipe renders static: a compact mode from the shell (the corruption
    issue 31 closed) never reaches sglang, and the launcher says it replaced it."""
    done, got = launch(tmp_path, {"SGLANG_RAGGED_VERIFY_MODE": mode}, track=track)
    assert done.returncode == 0, done.stderr
    assert got["env"]["SGLANG_RAGGED_VERIFY_MODE"] == "static"
    assert f"replacing '{mode}'" in done.stderr


@pytest.mark.parametrize("track", TRACKS)
def test_a_static_recipe_renders_its_verify_mode(tmp_path, track):
    done, got = launch(tmp_path, {}, track=track)
    assert done.returncode == 0, done.stderr
    assert got["env"]["SGLANG_RAGGED_VERIFY_MODE"] == "static"
    done, _ = launch(tmp_path, {}, "--dry-run", track=track)
    assert "SGLANG_RAGGED_VERIFY_MODE=static" in done.stdout


def test_the_refusal_names_where_sglang_reads_it():
    line = environment.refusal(["DUMPER_SERVER_PORT"])
    assert "DUMPER_SERVER_PORT" in line and ".py:" in line  # where sglang reads it
    assert environment.refused({"HF_HOME": "/x", "PATH": "/b", "LC_ALL": "C"}, ()) == []
