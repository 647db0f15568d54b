"""`sm12x qualify` end to end against the mock sglang server (sm12x.mock), and
`qualify --check` against the bundles it writes.

One mock serves every case: its faults are switched between runs (the
server's fault set is read per request), so the chain costs one boot. The
runs are small (one request per anchor concurrency, a short full-load hold,
a short long-context point, a one-round soak), the steps and the checks real.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sm12x import cli
from sm12x.mock.fullrank import Layout
from sm12x.mock.server import MockServer
from sm12x.qualify import check
from sm12x.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
RECIPE = "rtx-pro-6000-tp2"  # 48 requests on one DP rank; anchors at 1, 8, 32
KEY = "qk-7f3a9c1e5b2d4f60"
HOSTNAME = "rig-seven.lab.example"
IP = "198.51.100.23"
UUID = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
HOME = "/Users/alice-rigowner/models/DeepSeek-V4-Flash-0731"
PLANTED = (HOSTNAME, IP, KEY, UUID, "/Users/alice-rigowner")
SMALL = [
    # Full load: every request lives its 400 tokens (ignore_eos, as sglang), longer
    # than most of the 2 s hold, so the 60 streams keep all 48 slots busy.
    "--hold", "2", "--full-load-output", "400", "--prompts-per-concurrency", "1",
    "--long-context-len", "3000", "--long-context-output", "16",
    "--soak-concurrency", "8", "--soak-rounds", "1", "--deadline", "600",
    # Two of the anchors' three concurrencies, and a wide tolerance: the mock's
    # speed is this machine's CPU, so the verdict's logic is what is tested.
    "--concurrency", "1", "8", "--tolerance", "0.5",
]  # fmt: skip


class Planted:
    """ASGI wrapper: the mock's /server_info also names its machine (a host, an
    IP, a GPU UUID, a home path), as a careless server might."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("path") != "/server_info":
            return await self.app(scope, receive, send)
        parts: list = []

        async def keep(message):
            parts.append(message)

        await self.app(scope, receive, keep)
        start = next(m for m in parts if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in parts if m["type"] == "http.response.body")
        if start["status"] == 200:
            data = json.loads(body)
            data.update(host=HOSTNAME, dist_init_addr=f"{IP}:5000", gpu_uuid=UUID, model_path=HOME)
            body = json.dumps(data).encode()
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def mock():
    server = MockServer(api_key=KEY, layout=Layout(dp=1, max_running_requests=48))
    server._server.config.app = Planted(server.app)
    server._server.config.loaded = False
    with server:
        yield server


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("SM12X_API_KEY", KEY)
    monkeypatch.setenv("HOSTNAME", HOSTNAME)
    monkeypatch.setenv("SM12X_MODEL_DIR", HOME)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def qualify(mock, out: Path, *extra: str, faults=(), token_delay=None) -> tuple[int, str, str]:
    mock.state.faults.active.clear()
    mock.state.faults.active.update(faults)
    # loop/salad corrupt every 8th request while 4 are in flight: how many overlap
    # depends on the machine's load (a loaded CI run once saw none). Every request
    # here, so the verdict is the check's, not the scheduler's.
    every, least = mock.state.faults.every, mock.state.faults.min_concurrency
    mock.state.faults.every, mock.state.faults.min_concurrency = 1, 1
    before = mock.state.token_delay
    if token_delay is not None:
        mock.state.token_delay = token_delay
    try:
        argv = ["qualify", RECIPE, "--url", mock.base_url, "--out", str(out), *SMALL, *extra]
        import contextlib
        import io

        o, e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            code = cli.main(argv)
        return code, o.getvalue(), e.getvalue()
    finally:
        mock.state.token_delay = before
        mock.state.faults.active.clear()
        mock.state.faults.every, mock.state.faults.min_concurrency = every, least


@pytest.fixture(scope="module")
def healthy(mock, tmp_path_factory):
    out = tmp_path_factory.mktemp("q") / "bundle"
    mp = pytest.MonkeyPatch()
    mp.setenv("SM12X_API_KEY", KEY)
    mp.setenv("HOSTNAME", HOSTNAME)
    mp.setenv("SM12X_MODEL_DIR", HOME)
    try:
        code, stdout, stderr = qualify(mock, out)
    finally:
        mp.undo()
    return code, stdout, stderr, out


def test_the_healthy_mock_qualifies(healthy):
    code, stdout, stderr, out = healthy
    assert code == 0, stdout + stderr[-3000:]
    assert stdout.startswith(f"qualified: {RECIPE}"), stdout
    data = json.loads((out / "result.json").read_text())
    assert data["provenance"]["mock"] is True
    steps = {s["name"]: s for s in data["steps"]}
    assert (
        steps["baseline/verify"]["verdict"] == "pass"
        and "<testsuite" in steps["baseline/verify"]["junit"]
    )
    fl = steps["baseline/full-load"]["full_load"]
    assert fl["per_rank_limit"] == 48 and fl["hold_s"] == 2.0 and fl["held_s"] >= 2.0
    assert [r["concurrency"] for r in steps["baseline/bench"]["runs"]] == [1, 8]
    assert steps["baseline/bench"]["bench"]["schema"] == "sm12x-bench/1"
    # --url cannot relaunch: the throughput phase says so, and the bundle cannot back verified.
    assert steps["throughput/tune"]["verdict"] == "skipped"
    assert sorted(p.name for p in out.iterdir()) == sorted(["result.json", *data["charts"]])
    assert check.main(out) == 0
    assert check.main(out, for_verified=True) == 1


def test_nothing_planted_reaches_the_bundle(healthy):
    code, stdout, stderr, out = healthy
    assert (out / "result.json").exists(), stdout + stderr[-3000:]
    for path in out.rglob("*"):
        blob = path.read_bytes()
        for secret in PLANTED:
            assert secret.encode() not in blob, (path.name, secret)
    text = (out / "result.json").read_text()
    assert "127.0.0.1" not in text and str(Path.home()) + "/" not in text


def _tamper(src: Path, dst: Path, edit) -> list[str]:
    shutil.copytree(src, dst)
    data = json.loads((dst / "result.json").read_text())
    edit(data)
    (dst / "result.json").write_text(json.dumps(data))
    return check.problems(dst)


def test_a_tampered_bundle_fails_check(healthy, tmp_path):
    code, stdout, stderr, out = healthy
    assert code == 0, stdout + stderr[-3000:]

    def figure(data):
        run = next(s for s in data["steps"] if s["name"] == "baseline/bench")["runs"][1]
        run["figures"]["output_tokens_per_s"] *= 1.5

    found = _tamper(out, tmp_path / "a", figure)
    assert any("baseline/bench c8: output_tokens_per_s" in p for p in found), found

    def removed(data):
        data["steps"] = [s for s in data["steps"] if s["name"] != "baseline/full-load"]

    found = _tamper(out, tmp_path / "b", removed)
    assert "step baseline/full-load: in the plan, found 0 time(s)" in found, found

    from sm12x.qualify.render_hash import recipe_hash

    other = recipe_hash(load_recipe("rtx-pro-6000-tp4"))

    def rehashed(data):
        data["recipe"]["hash"] = other

    found = _tamper(out, tmp_path / "c", rehashed)
    assert any("it is rtx-pro-6000-tp4's" in p for p in found), found
    done = subprocess.run(
        [sys.executable, "-m", "sm12x.cli", "qualify", "--check", str(tmp_path / "a")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "output_tokens_per_s" in done.stderr and len(done.stderr.splitlines()) >= 1


@pytest.mark.parametrize(
    ("faults", "delay", "summary", "step"),
    [
        (("loop",), None, "not qualified", "baseline/verify failed"),
        (("bad-tool-json",), None, "not qualified", "baseline/verify failed"),
        (("low-accept",), None, "not qualified", "baseline/verify failed"),
        ((), 0.03, "qualified, slow", "baseline/bench at concurrency 1"),
    ],
    ids=["loop", "bad-tool-json", "low-accept", "slow"],
)
def test_a_faulty_mock_does_not_pass(mock, env, faults, delay, summary, step):
    code, stdout, stderr = qualify(mock, env / "bundle", faults=faults, token_delay=delay)
    assert stdout.startswith(f"{summary}: {RECIPE}"), stdout + stderr[-2000:]
    assert step in stdout, stdout
    assert code == (2 if summary == "qualified, slow" else 1)
    assert check.main(env / "bundle") == 0  # a failing run's bundle is still consistent


def test_a_run_killed_mid_bench_resumes(mock, env):
    """SIGKILL once the bench's first concurrency is kept: the same command resumes
    at the next concurrency, and the bundle holds each step once."""
    out = env / "bundle"
    argv = [
        sys.executable, "-m", "sm12x.cli", "qualify", RECIPE, "--url", mock.base_url,
        "--out", str(out), *SMALL,
    ]  # fmt: skip
    # This checkout's sm12x, whichever folder the command runs in.
    child_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        env=child_env,
    )  # fmt: skip
    kept = out / ".work" / "parts" / "baseline--bench--c1-i1024.json"
    try:
        deadline = time.monotonic() + 300
        while not kept.exists():
            if first.poll() is not None:
                said = first.stdout.read().decode()
                raise AssertionError(said[:2000] + said[-2000:])
            assert time.monotonic() < deadline, "the bench never started"
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.wait(timeout=30)
    assert not (out / "result.json").exists()
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=child_env)
    said = again.stdout + again.stderr
    assert again.returncode == 0, said[-3000:]
    assert "baseline/verify: pass (kept from the run before)" in said
    assert "baseline/bench: concurrency 1 kept from the run before" in said
    assert "baseline/bench: concurrency 1, 1 requests" not in said
    data = json.loads((out / "result.json").read_text())
    names = [s["name"] for s in data["steps"]]
    assert len(names) == len(set(names)) == len(data["plan"])
    assert not (out / ".work").exists()
    assert check.main(out) == 0


def test_a_deadline_ends_the_run_resumably(mock, env):
    """--deadline reached after the first step: one error line saying how to resume,
    the finished step kept; the same command (a longer deadline) finishes the run."""
    out = env / "bundle"
    code, stdout, stderr = qualify(mock, out, "--deadline", "0")
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert code == 1 and len(errors) == 1, stderr[-3000:]
    assert "--deadline 0 s reached at baseline/verify" in errors[0], errors
    assert "run the same command again to resume" in errors[0], errors
    assert not (out / "result.json").exists()
    assert (out / ".work" / "steps" / "baseline--doctor.json").is_file()
    code, stdout, stderr = qualify(mock, out)
    assert code == 0, stdout + stderr[-3000:]
    assert "baseline/doctor: skipped (kept from the run before)" in stderr, stderr[-3000:]
    data = json.loads((out / "result.json").read_text())
    assert [s["name"] for s in data["steps"]] == data["plan"]
    assert check.main(out) == 0


def _mock_command(port: int, *extra: str) -> str:
    """`sm12x mock-server` as a boot command, this checkout's."""
    import shlex

    return shlex.join(
        [sys.executable, "-m", "sm12x.cli", "mock-server", "--port", str(port), *extra]
    )  # fmt: skip


# The recipe's layout, decode steps of 10 ms.
SERVING = ("--tp-size", "2", "--max-running-requests", "48", "--token-delay", "0.01")
# Full load on the booted mock (48 slots, 10 ms per decode step): each request lives
# its 1500 tokens (ignore_eos, as sglang), at least 0.9 s of paced steps and about
# 2 s on an idle machine, so the 48 slots stay full for the 2 s hold while finished
# requests' streams send their next.
BOOTED = ("--full-load-output", "1500", "--hold", "2")


@pytest.mark.slow
def test_the_throughput_phase_tunes_relaunches_and_measures_again(env, monkeypatch):
    """No --url: qualify boots each configuration itself, here with commands (as tune
    boots, through verify's boot): the baseline mock; then, that one taken down,
    `sm12x tune` (its two phases on a profiling mock, the second relaunched with
    phase 1's table); the throughput configuration relaunched, and verify, full load
    and bench again on it; at the end nothing is left serving."""
    from tests.support import throughput as tp
    from tests.support.mock_starts import free_port

    monkeypatch.setenv("PATH", f"{tp.fake_nvidia_smi(env / 'bin', 'rtx-pro-6000-maxq-x2')}"
                               f"{os.pathsep}{os.environ['PATH']}")  # fmt: skip
    port, out, cache = free_port(), env / "bundle", env / "cache"
    thr = "rtx-pro-6000-tp2-throughput"
    # sglang's SPS profiler sends no key: the profiling server is started without one.
    profiling = f"env -u SM12X_API_KEY {_mock_command(port, '--sps-profile', thr)}"
    argv = [
        "qualify", RECIPE, "--port", str(port), "--no-doctor", "--boot-timeout", "300",
        "--boot-command", _mock_command(port, *SERVING), "--tune-boot-command", profiling,
        "--throughput-boot-command", _mock_command(port, *SERVING), "--cache-dir", str(cache),
        "--tune-args", "--batch-size 1 2 --fracs 0.125 1.0 --min-steady-steps 4 "
        "--min-steady-seconds 0 --round-timeout 300",
        "--out", str(out), *SMALL, *BOOTED, "--deadline", "1500",
    ]  # fmt: skip
    import contextlib
    import io

    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        code = cli.main(argv)
    stdout, stderr = o.getvalue(), e.getvalue()
    assert code in (0, 2), stdout + stderr[-4000:]
    assert "tune: phase 2, the profiling server relaunched with " in stderr, stderr[-4000:]
    assert f"booting {thr} (throughput): `" in stderr, stderr[-4000:]
    data = json.loads((out / "result.json").read_text())
    steps = {s["name"]: s for s in data["steps"]}
    assert steps.pop("baseline/doctor")["verdict"] == "skipped"  # --no-doctor
    assert all(s["verdict"] == "pass" for s in steps.values()), {
        n: (s["verdict"], s["problems"]) for n, s in steps.items()
    }
    said = stderr.splitlines()
    booted = [n for n, line in enumerate(said) if "sm12x qualify: booting " in line]
    stopped = [n for n, line in enumerate(said) if "the server qualify booted is stopped" in line]
    # The baseline is down before tune boots; the throughput server is down at the end.
    assert len(booted) == 2 and len(stopped) == 2, stderr[-4000:]
    assert booted[0] < stopped[0] < booted[1] < stopped[1], stderr[-4000:]
    assert f"booting {RECIPE} (baseline): `" in said[booted[0]]
    from sm12x.tune.main import answers

    assert not answers(f"http://127.0.0.1:{port}")
    for name in ("baseline/full-load", "throughput/full-load"):
        assert steps[name]["full_load"]["held_s"] >= 2.0, steps[name]["full_load"]["held_s"]
    assert data["settings"]["mode"] == "boot-command" and data["provenance"]["mock"] is True
    assert steps["throughput/bench"]["bench"]["recipe"]["name"] == thr
    assert list(cache.glob(f"sps/{thr}/**/*.json"))  # the table tune wrote
    assert check.main(out) == 0


def test_a_mock_bundle_never_backs_verified(healthy, tmp_path):
    from sm12x.qualify import status
    from tests.unit.test_qualify_status import verified

    *_, out = healthy
    shutil.copytree(out, tmp_path / RECIPE / "mock-run")
    (found,) = status.problems([verified(RECIPE)], tmp_path)
    assert "sm12x mock-server: a mock's bundle never backs verified" in found, found


def test_the_support_matrix_follows_the_bundles(healthy, tmp_path):
    """The generated table shows a bundle's measured figure beside the anchors', and
    a recipe that says verified without a bundle for its current render reads untested."""
    from sm12x.qualify import status
    from sm12x.recipe import matrix
    from tests.unit.test_qualify_status import verified

    *_, out = healthy
    shutil.copytree(out, tmp_path / RECIPE / "2026-12-06-mock")

    def evidence(recipe):
        return status.evidence(recipe, tmp_path)

    cell = matrix.figures_cell(load_recipe(RECIPE), evidence)
    assert cell.startswith("measured (mock): C1 ") and "C8 " in cell, cell
    assert "C32 2,089" in cell  # the anchors stay beside it
    assert matrix.status_cell(verified(RECIPE), evidence).startswith("untested (its render")
    assert matrix.figures_cell(
        load_recipe(RECIPE), lambda r: status.evidence(r, tmp_path / "none")
    ) == matrix._published(load_recipe(RECIPE))
    # docs/recipes.md's table (links from docs/ up to results/) shows it beside the anchors'.
    (row,) = [
        line
        for line in matrix.status_table([load_recipe(RECIPE)], evidence, "../").splitlines()
        if line.startswith(f"| `{RECIPE}`")
    ]
    assert "measured (mock): C1 " in row and "(../results/" in row and "C32 2,089" in row, row
    # A render change (one flag's value): the bundle no longer vouches for the recipe,
    # its figure leaves both tables and a `verified` status reads untested.
    recipe = verified(RECIPE)
    flag = recipe.flags["--max-running-requests"]
    changed = recipe.model_copy(
        update={"flags": {**recipe.flags, "--max-running-requests": flag.model_copy(update={"value": 40})}}
    )  # fmt: skip
    assert status.evidence(changed, tmp_path) == (False, None)
    assert matrix.figures_cell(changed, evidence) == matrix._published(changed)
    assert "no bundle yet" in matrix.status_table([changed], evidence)
    assert matrix.status_cell(changed, evidence).startswith("untested (its render")


def _as_a_rig_wrote_it(data: dict) -> None:
    """The healthy mock's bundle edited into what a rig's full run writes: not the
    mock, doctor passed, the throughput phase run (the baseline's records again),
    the rig's provenance complete. Consistent, so --check passes it: it catches
    incomplete and inconsistent bundles, not forgeries (docs/qualify.md)."""
    prov = data["provenance"]
    prov.update(
        mock=False, model_revision="9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
        weights_index_sha256="0" * 64, driver="580.95.05", cuda="13.0", gpu_count=2,
        pcie=[{"generation": "5", "width": "16"}] * 2, power_limits_w=[300.0, 300.0],
    )  # fmt: skip
    env = prov["environment"]
    env["gpus"] = ["NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"] * 2
    env.update({k: env.get(k) or "1.0" for k in ("flashinfer_version", "torch_version")})
    env["sglang_version"] = env.get("sglang_version") or "0.5.17"
    env["image"]["digest"] = "ghcr.io/sm12x/sm12x@sha256:" + "1" * 64
    by_name = {s["name"]: s for s in data["steps"]}
    by_name["baseline/doctor"].update(verdict="pass", problems=[])
    for name, step in by_name.items():
        if name.startswith("throughput/"):
            kind = name.split("/")[1]
            source = by_name.get(f"baseline/{kind}")
            step.update(json.loads(json.dumps(source)) if source else {}, verdict="pass")
            step.update(name=name, phase="throughput", problems=[])
    data["steps"] = [by_name[n] for n in data["plan"]]


def test_a_passing_bundle_is_what_lets_a_recipe_say_verified(healthy, tmp_path):
    """The status rule's other half (tests/unit/test_qualify_status.py refuses the
    rest): a bundle under results/RECIPE/ that passes --check --for-verified lets
    RECIPE say verified, and backs it in the tables; none for another recipe."""
    from sm12x.qualify import status
    from tests.unit.test_qualify_status import verified

    *_, out = healthy
    bundle = tmp_path / RECIPE / "2026-12-06-rig"
    shutil.copytree(out, bundle)
    data = json.loads((bundle / "result.json").read_text())
    _as_a_rig_wrote_it(data)
    (bundle / "result.json").write_text(json.dumps(data))
    assert check.problems(bundle, for_verified=True) == []
    assert status.problems([verified(RECIPE)], tmp_path) == []
    assert status.evidence(load_recipe(RECIPE), tmp_path)[0] is True
    (found,) = status.problems([verified("rtx-pro-6000-tp4")], tmp_path)
    assert "rtx-pro-6000-tp4: status verified, but no bundle" in found, found
    # One step short of passing, and it no longer backs verified.
    data["steps"][0].update(verdict="skipped", problems=["--no-doctor"])
    (bundle / "result.json").write_text(json.dumps(data))
    (found,) = status.problems([verified(RECIPE)], tmp_path)
    assert "step baseline/doctor: skipped, not pass" in found, found
