"""Behaviour does not change (issue 42): a golden taken at the launch plan's base.

Every recipe, on every track it runs on, at every node rank: the argv and the
environment the renderer builds (compose's context, a bare one, `--no-spec`,
tune's two profiling phases), what `sm12x render` and `sm12x launch --dry-run`
print, and what `sm12x launch` execs (program, argv and the whole environment
sglang starts with); and every Kubernetes manifest, per track. The data is
tests/golden/launch-plan.json, written once at the base by running this module
(`python -m tests.unit.test_launch_plan_golden`); the refactor must leave it
byte-identical. It is deleted once the work is merged, so that it freezes no
later issue.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pytest

from sm12x.deploy import k8s
from sm12x.errors import UserError
from sm12x.launch import choice as launch_choice
from sm12x.launch import main as launch_main
from sm12x.launch.plan import build_launch
from sm12x.launch.render import LaunchContext
from sm12x.recipe import load_all
from sm12x.recipe.tracks import recipe_tracks
from sm12x.versions import load_versions, tracks
from tests.support.cli import run_sm12x
from tools.golden import context as compose_context

DATA = Path(__file__).resolve().parents[1] / "golden" / "launch-plan.json"
MODEL = "/tmp/sm12x-golden-model"
TABLE = "/cache/phase1.json"
# Flags after `--` the judge accepts or refuses, one of each kind.
EXTRAS = (
    ("--log-level", "debug"),
    ("--tp", "2"),
    ("--api-key=x",),
    ("--grpc-port", "5000"),
    ("--context-length", "nan"),
    ("--config", "f.yaml"),
    ("--kv-events-config", '{"publisher": "zmq"}'),
    ("--cuda-graph-max-bs", "512"),
)


def _plan(plan) -> dict:
    return {"command": plan.command("python3"), "env": plan.env_dict()}


def _ranks(recipe) -> list[int | None]:
    return list(range(recipe.hardware.nodes)) if recipe.is_multinode else [None]


def _site(recipe, rank) -> dict[str, str]:
    env = {n: v.example for n, v in recipe.env.items() if v.from_host and v.example}
    if rank is not None:
        env |= {"SM12X_NODE_RANK": str(rank), "SM12X_HEAD_ADDR": "192.168.100.1"}
    return env


def _cli(*args: str, env: dict[str, str]) -> dict:
    done = run_sm12x(*args, env=env)
    clean = lambda text: text.replace(sys.executable, "<python>")  # noqa: E731
    return {"rc": done.returncode, "stdout": clean(done.stdout), "stderr": clean(done.stderr)}


def _exec(monkeypatch, environ: dict[str, str], *argv: str) -> list:
    calls: list = []
    monkeypatch.setattr(os, "execvpe", lambda f, a, e: calls.append([f, list(a), dict(e)]))
    monkeypatch.setattr(launch_choice.gpus, "query_gpus", _no_gpus)
    track = environ["SM12X_TRACK"]
    monkeypatch.setattr(
        launch_choice, "installed_sglang", lambda: load_versions(track)["SGLANG_VERSION"]
    )
    parser = argparse.ArgumentParser()
    launch_main.add_arguments(parser)
    try:
        assert launch_main.run(parser.parse_args(list(argv)), environ) == 0
    except UserError as exc:
        return [f"refused: {exc.message}"]
    return [
        [
            f.replace(sys.executable, "<python>"),
            [a.replace(sys.executable, "<python>") for a in args],
            env,
        ]
        for f, args, env in calls
    ]


def _no_gpus(*_):
    raise launch_choice.gpus.GpuQueryError("no nvidia-smi in the golden")


def capture(monkeypatch) -> dict:
    Path(MODEL).mkdir(exist_ok=True)
    (Path(MODEL) / "config.json").write_text("{}")
    out: dict = {"recipes": {}, "k8s": {}}
    for recipe in load_all():
        for track in recipe_tracks(recipe):
            for rank in _ranks(recipe):
                key = f"{recipe.name}|{track}|{rank}"
                ctx = compose_context(recipe, rank or 0)
                ctx = LaunchContext(**{**ctx.__dict__, "track": track})
                entry = {
                    "compose": _plan(build_launch(recipe, ctx)),
                    "bare": _plan(build_launch(recipe, LaunchContext(track=track, node_rank=rank))),
                    "no_spec": _plan(
                        build_launch(
                            recipe, LaunchContext(**{**ctx.__dict__, "speculative": False})
                        )
                    ),
                    "tune1": _plan(
                        build_launch(recipe, LaunchContext(**{**ctx.__dict__, "sps_profile": True}))
                    ),
                    "tune2": _plan(
                        build_launch(
                            recipe,
                            LaunchContext(
                                **{**ctx.__dict__, "sps_profile": True, "sps_table": TABLE}
                            ),
                        )
                    ),
                }
                env = {"SM12X_RECIPE": recipe.name, "SM12X_TRACK": track, **_site(recipe, rank)}
                entry["render"] = _cli("render", recipe.name, env=env)
                entry["dry_run"] = _cli("launch", "--dry-run", env=env)
                entry["dry_run_profile"] = _cli(
                    "launch",
                    "--dry-run",
                    "--sps-profile",
                    "--sps-table",
                    TABLE,
                    env={**env, "SM12X_CACHE_DIR": "/cache"},
                )
                environ = {
                    **env,
                    "PATH": "/usr/bin:/bin",
                    "HOME": "/root",
                    "SM12X_ENV_FILE": os.devnull,
                    "SM12X_MODEL_DIR": MODEL,
                    "SM12X_API_KEY": "golden-key",
                    "SM12X_CACHE_DIR": "/cache",
                }
                entry["exec"] = _exec(monkeypatch, environ)
                entry["exec_no_spec"] = _exec(monkeypatch, environ, "--no-spec")
                out["recipes"][key] = entry
                if rank:
                    continue
                for extra in EXTRAS:
                    entry[f"dry_run -- {' '.join(extra)}"] = _cli(
                        "launch", "--dry-run", "--", *extra, env=env
                    )
    out["k8s"]["tree"] = k8s.tree(k8s.K8sOptions())
    for track in tracks():
        for host_network in (False, True):
            opts = k8s.K8sOptions(track=track, host_network=host_network)
            for name in (k8s.ROUTER, *(r.name for r in load_all())):
                try:
                    text = k8s.render(name, opts)
                except UserError as exc:
                    text = f"refused: {exc.message}"
                out["k8s"][f"{name}|{track}|{host_network}"] = text
    return out


def _text(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def test_the_launch_plan_renders_what_its_base_rendered(monkeypatch):
    want = DATA.read_text(encoding="utf-8")
    got = _text(capture(monkeypatch))
    if got != want:
        a, b = json.loads(want), json.loads(got)
        diff = [k for k in a["recipes"] if a["recipes"][k] != b["recipes"].get(k)]
        diff += [f"k8s {k}" for k in a["k8s"] if a["k8s"][k] != b["k8s"].get(k)]
        pytest.fail(f"behaviour changed for {diff}")


if __name__ == "__main__":
    mp = pytest.MonkeyPatch()
    try:
        DATA.write_text(_text(capture(mp)), encoding="utf-8")
    finally:
        mp.undo()
