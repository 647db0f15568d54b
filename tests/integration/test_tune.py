"""`sm12x tune` through sglang's real SPS profiler against the stand-in server.

The profiler is the pinned track's wheel's `sglang/benchmark/dspark_sps_profiler.py`,
run as tune runs it for a Python without sglang against the mock (`python -m
sm12x.mock.wheel_python VERSION -m ...`, its own flags): this test environment
has no sglang installed, as a CPU user's `[mock]` install has none. The mock server (sm12x.mock, its DSpark
scheduler sps.py) answers what the profiler asks (/server_info with per-rank records,
/generate, /flush_cache, /abort_request) by sglang's rules. Time bounds are
relative to the first tune's own wall time, measured in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sm12x import __version__
from sm12x.errors import UserError
from sm12x.launch import choice as launch_choice
from sm12x.launch import gpus
from sm12x.launch.configuration import resolve
from sm12x.mock.server import MockServer
from sm12x.mock.sps import SpsConfig
from sm12x.recipe import load_recipe
from sm12x.sps import tables as store
from sm12x.tune import main as tune_main
from sm12x.versions import default_track, load_versions, tracks
from tests.support import http_client
from tests.support import throughput as tp

SGLANG = load_versions(default_track())["SGLANG_VERSION"]
# What runs sglang's code from the wheel here, as tune runs it.
FROM_WHEEL = [sys.executable, "-m", "sm12x.mock.wheel_python", SGLANG]
DP = 4
# Quick rounds: the profiler's gates at their smallest sensible values, and two
# verify-budget fractions of the off-diagonal sweep (the default is eight): at
# 2, 4 and 8 per rank their pins call for different verify tiers.
FRACS = (0.125, 1.0)
QUICK = [
    "--min-steady-steps",
    "4",
    "--min-steady-seconds",
    "0",
    "--round-timeout",
    "300",
    "--fracs",
    *map(str, FRACS),
]
TIMES: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def no_sglang_here():
    """tune takes the wheel only for a Python without sglang: this one must be.
    The in-process mock servers register the served tree as a bare `sglang`
    package (no __spec__, which find_spec refuses) with its modules, and the
    wheel's planner module: this process gets its own modules back after."""
    with own_modules():
        assert importlib.util.find_spec("sglang") is None, "this test needs a Python without sglang"
        yield
    assert importlib.util.find_spec("sglang") is None


@contextlib.contextmanager
def own_modules():
    """sglang's modules (and the planner module) as they were before, after:
    a process serves one sglang tree at a time (sm12x.mock.serving.load)."""
    ours = ("sglang.", "sm12x_mock_dspark_planner_")
    before = {n: m for n, m in sys.modules.items() if n == "sglang" or n.startswith(ours)}
    for name in before:
        del sys.modules[name]
    try:
        yield
    finally:
        for name in [n for n in sys.modules if n == "sglang" or n.startswith(ours)]:
            del sys.modules[name]
        sys.modules.update(before)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """This process as the rig: 4 RTX PRO 6000 (nvidia-smi), a cache folder."""
    bin_dir = tp.fake_nvidia_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def config(table: str | None = None, **changes) -> SpsConfig:
    """The stand-in booted as `sm12x launch --sps-profile [--sps-table TABLE]`
    renders the fixture: its profiling variables read as sglang reads them
    (static verify for phase 1; compact with the table for phase 2)."""
    recipe = load_recipe(tp.FIXTURE)
    from sm12x.launch.plan import build_launch
    from sm12x.launch.render import LaunchContext

    plan = build_launch(recipe, LaunchContext(sps_profile=True, sps_table=table))
    argv = plan.argv()
    flag = "--speculative-dspark-sps-table-path"
    booted = SpsConfig.from_env(
        plan.env_dict(),
        gamma=recipe.dspark.block_size,
        tp=4,
        dp=DP,
        ep=4,
        cuda_graph_max_bs=16,
        sps_table_path=argv[argv.index(flag) + 1] if flag in argv else None,
    )
    return dataclasses.replace(booted, **changes)


def tune(cache: Path, url: str, *argv: str, recipe: str = str(tp.FIXTURE)) -> int:
    parser = argparse.ArgumentParser()
    tune_main.add_arguments(parser)
    args = parser.parse_args(
        ["--url", url, "--recipe", recipe, "--cache-dir", str(cache), *QUICK, *argv]
    )
    return tune_main.run(args)


def leftovers(cache: Path) -> list[Path]:
    """Temporary files the store would leave if a write were cut off."""
    return [p for p in cache.rglob("*") if p.name.endswith(".tmp")]


def sglang_loads(table: Path) -> dict:
    """The table as sglang's own loader reads it (dspark_sps.load_sps_table_from_path,
    the function the planner's build_sps_cost_table calls), and what it prices."""
    code = (
        "import json, sys; from sglang.srt.speculative.dspark_components.dspark_sps import "
        "load_sps_table_from_path as load; t = load(sys.argv[1]); "
        "print(json.dumps({'kind': type(t).__name__, "
        "'step_time': [t.step_time(num_reqs=b, budget=k) for b, k in ((1, 0), (8, 0), (8, 56))]}))"
    )
    done = subprocess.run(
        [*FROM_WHEEL, "-c", code, str(table)],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def the_key():
    return store.key_for(
        load_recipe(tp.FIXTURE),
        track=default_track(),
        sglang=SGLANG,
        sm12x=__version__,
        gpu=tp.gpu_name(),
    )


def diagonal(cache: Path) -> Path:
    return cache / "sps" / tp.THROUGHPUT / ".work" / the_key().slug / tune_main.DIAGONAL


def sglang_prices(
    table: Path, cells: list[tuple[int, int]], version: str = SGLANG
) -> dict[str, float]:
    """sglang's own step_time(num_reqs, budget) of the table at each cell."""
    code = (
        "import json, sys; from sglang.srt.speculative.dspark_components.dspark_sps import "
        "load_sps_table_from_path as load; t = load(sys.argv[1]); cells = json.loads(sys.argv[2]); "
        "print(json.dumps({f'{b},{k}': t.step_time(num_reqs=b, budget=k) for b, k in cells}))"
    )
    done = subprocess.run(
        [sys.executable, "-m", "sm12x.mock.wheel_python", version, "-c", code, str(table)]
        + [json.dumps(cells)],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_phase_one_then_the_one_line_refusal_on_a_table_less_compact_server(machine, capsys):
    """Phase 1: the static profiling server (`sm12x launch --sps-profile` without a
    table), the profiler's diagonal, sglang's 1-D table, and how to relaunch.
    Then the server tune's profiling mode was before (compact verify, no table,
    no second phase): sglang's planner verifies every row there, ignoring the
    pins (the mock decides so with the wheel's own planner code), and tune
    refuses with one line, measuring nothing."""
    cache = machine.parent / "phased-cache"  # the next test resumes it (phase 2)
    with MockServer(sps=config()) as server:
        scheduler = server.app.state.scheduler
        assert scheduler.config.mode == "static"
        assert tune(cache, server.base_url, "--max-batch-size", "8") == tune_main.PHASE_TWO
        # The diagonal: the warmup and one round per batch size, no pin.
        assert len(scheduler.batches) == 1 + 4 and scheduler.forced_frac is None
    table = diagonal(cache)
    assert store.kind_of(table.read_text()) == store.STATIC
    err = capsys.readouterr().err
    relaunch = f"sm12x mock-server --sps-profile {tp.THROUGHPUT} --sps-table {table}"
    assert "phase 1 of 2 done" in err and relaunch in err, err
    with MockServer(sps=config(mode="compact")) as server, processes() as started:
        assert server.app.state.scheduler.verifies_all
        with pytest.raises(UserError) as caught:
            tune(cache, server.base_url, "--max-batch-size", "8")
        assert server.app.state.scheduler.batches == []  # nothing was measured
    assert started == []  # phase 1's sweep up to 8 is kept: the profiler was not asked again
    message = caught.value.message
    assert "\n" not in message and "runs compact verify without an SPS table" in message
    assert relaunch in message
    kept = machine.parent / "diagonal-kept.json"
    kept.write_text(table.read_text())
    TIMES["diagonal"] = str(kept)  # type: ignore[assignment]
    TIMES["phase1-cache"] = str(cache)  # type: ignore[assignment]


@contextlib.contextmanager
def processes():
    """The commands tune runs to completion (sweep, fit: sm12x.proc.run), still run."""
    from sm12x.tune import profiler

    started: list[list[str]] = []
    real = profiler.bounded.run

    def spy(argv, *a, **k):
        started.append(list(argv))
        return real(argv, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profiler.bounded, "run", spy)
        yield started


def test_the_kept_sweep_is_the_profiler_s_for_the_same_top_and_wheel_only(machine):
    """Python.sweep reuses the sweep a work folder's session keeps only when it was
    asked of the same release's wheel up to the same top; another top asks the
    profiler again. A table-less compact server with no earlier work is refused
    before the profiler is asked anything."""
    from sm12x.tune import profiler

    wheel = profiler.Python(
        sys.executable, env=os.environ.copy(), prefix=("-m", "sm12x.mock.wheel_python", SGLANG)
    )
    folder = machine / "work"
    work = profiler.Work.open(folder, {"any": 1}, False, print)
    work.remember(wheel, 4, [1, 3])  # not the profiler's: shows where an answer came from
    with processes() as started:
        assert wheel.sweep(4, folder) == [1, 3] and started == []
        assert wheel.sweep(2, folder) == [1, 2] and len(started) == 1  # the profiler's own
    local = profiler.Python(sys.executable, env=os.environ.copy())  # sglang installed: never kept
    assert local.fixed_code() is None
    with processes() as started, pytest.raises(UserError, match="did not start"):
        local.sweep(4, folder)
    assert len(started) == 1
    with MockServer(sps=config(mode="compact")) as server, processes() as started:
        with pytest.raises(UserError, match="start it for phase 1"):
            tune(machine / "cache", server.base_url, "--max-batch-size", "8")
    assert started == []


def with_table() -> SpsConfig:
    if "diagonal" not in TIMES:
        pytest.skip("needs phase 1's table (run the module)")
    return config(str(TIMES["diagonal"]))


def test_tune_makes_a_table_that_the_launch_then_runs(machine, capsys):
    if "phase1-cache" not in TIMES:
        pytest.skip("resumes phase 1 (run the module)")
    cache = Path(TIMES["phase1-cache"])  # type: ignore[arg-type]
    sps = config(str(diagonal(cache)))
    with MockServer(sps=sps) as server:
        scheduler = server.app.state.scheduler
        assert not scheduler.verifies_all
        started = time.monotonic()
        with processes() as ran:
            assert tune(cache, server.base_url, "--max-batch-size", "8") == 0
        TIMES["full"] = time.monotonic() - started
        # Phase 1's sweep is kept (the same wheel, the same top): only the fit ran here.
        assert [a for a in ran if "fit" not in a] == [], ran
        batches = list(scheduler.batches)
        pinned = scheduler.forced_frac
        # What the wheel's planner lays out for each cell (a fresh planner of
        # the served tree, pinned as the profiler pinned the server).
        priced = {(bs, f): scheduler.priced(bs, f) for bs in (1, 2, 4, 8) for f in FRACS}
    # The profiler's own sweep up to 8 per rank, one segment per fraction (its
    # warmup round, then one /generate of bs x DP requests per batch size), each
    # cell's budget pinned on the server (the last one stays pinned).
    assert sorted(set(batches)) == [DP * b for b in (1, 2, 4, 8)]
    assert len(batches) == len(FRACS) * (1 + 4) and pinned == max(FRACS)
    # The pins call for different tiers (the mock's cost is priced from them).
    assert priced[(8, 0.125)] == 16 and priced[(8, 1.0)] == 64
    recipe = load_recipe(tp.FIXTURE)
    key = the_key()
    table = store.table_path(cache, key)
    meta = json.loads(store.meta_path(table).read_text())
    assert meta["key"] == key.__dict__ and key.kind == store.ADDITIVE
    assert meta["kind"] == store.ADDITIVE
    assert meta["profiler"]["measured"] == [1, 2, 4, 8]
    assert meta["profiler"]["fracs"] == list(FRACS) and meta["profiler"]["cells"] == 8
    # The sidecar names the table the profiling server ran with: phase 1's.
    ran_with = meta["profiled_with"]
    assert ran_with["kind"] == store.STATIC and ran_with["path"] == str(diagonal(cache))
    assert len(ran_with["sha256"]) == 64
    fitted = json.loads(table.read_text())
    assert fitted["bs_probes"] == [1, 2, 4, 8] and fitted["bias_seconds"] > 0
    # The table follows the mock's layout-priced cost: at every cell sglang's own
    # reading of it is within 10% of the step the mock timed for that cell's tier
    # (SpsConfig.step_ms; the fit is the profiler's least squares over 8 cells).
    read = sglang_prices(table, [(bs, int(f * bs * 7)) for bs, f in priced])
    for (bs, f), tokens in priced.items():
        want = SpsConfig().step_ms(tokens, bs) / 1000
        got = read[f"{bs},{int(f * bs * 7)}"]
        assert abs(got - want) <= 0.10 * want, ((bs, f), got, want)
    # sglang's loader reads it as the additive kind; its price grows with the
    # running requests and with the verify budget, as the stand-in's steps do.
    read = sglang_loads(table)
    assert read["kind"] == store.ADDITIVE
    one, eight, eight_full = read["step_time"]
    assert one < eight < eight_full
    assert not (cache / "sps" / tp.THROUGHPUT / ".work" / key.slug).exists()
    assert not leftovers(cache)
    err = capsys.readouterr().err
    assert f"wrote {table}" in err and f"sglang's {store.ADDITIVE}" in err
    # No sglang here and the server is the mock: the release's own profiler, from
    # its wheel, said once.
    assert err.count(f"the profiler: sglang {SGLANG}'s own, from its wheel") == 1, err
    # The launcher finds it: the same key, seen from the launch's side.
    found = store.lookup(cache, key)
    assert found.table == table
    picked = resolve(
        load_recipe(tp.RIG),
        "throughput",
        default_track(),
        lambda r: store.lookup(
            cache,
            store.key_for(
                r, track=default_track(), sglang=SGLANG, sm12x=__version__, gpu=tp.gpu_name()
            ),
        ),
        recipes=[load_recipe(tp.RIG), recipe],
    )
    assert picked.recipe.name == tp.THROUGHPUT


def test_a_cell_that_ran_another_tier_is_refused_by_name(machine):
    """A server that says it loaded a table yet verifies every row (here sglang's
    own one-sample placeholder, which its planner counts as uninitialized): the
    profiler's own check passes the full-width step, tune's per-step proof does
    not, and the refused cell is measured anew on the next run."""
    placeholder = machine / "placeholder.json"
    placeholder.write_text(
        json.dumps(
            {"sample_batch_tokens": [1], "sample_steps_per_sec": [1.0], "max_batch_tokens": 8}
        )
    )
    cache = machine / "cache"
    with MockServer(sps=config(str(placeholder))) as server:
        assert server.app.state.scheduler.verifies_all
        with pytest.raises(UserError) as caught:
            tune(cache, server.base_url, "--batch-size", "2")
    message = caught.value.message
    # 2 requests + int(0.125 x 2 x 7) = 3 tokens: the 8-token tier; it ran 2 x 8.
    assert "cell 2/rank at budget fraction 0.125 ran verify tier(s) 16 tokens, not 8" in message
    assert "compact verify without a usable SPS table" in message and "\n" not in message
    folder = next((cache / "sps" / tp.THROUGHPUT / ".work").iterdir())
    assert not list(folder.glob("seg-*/table.rounds.jsonl"))  # set aside, not finished
    assert not list((cache / "sps" / tp.THROUGHPUT).glob("*.json"))


def test_the_deadline_stops_it_keeps_what_was_measured_and_writes_nothing(machine):
    if "full" not in TIMES:
        pytest.skip("needs the full tune's wall time (run the module)")
    cache = machine.parent / "resumed-cache"
    # The last round wedges (a /generate of 16 per rank is never scheduled): the
    # rounds before it finish within the full tune's time, then the deadline.
    deadline = TIMES["full"] + 15
    with MockServer(sps=dataclasses.replace(with_table(), stall_batch=16 * DP)) as server:
        started = time.monotonic()
        with pytest.raises(UserError) as caught:
            tune(
                cache,
                server.base_url,
                "--batch-size",
                "1",
                "2",
                "4",
                "16",
                "--deadline",
                f"{deadline:.0f}",
            )
        took = time.monotonic() - started
        assert not server.app.state.scheduler.busy()  # the wedged load was aborted
    message = caught.value.message
    cells = 4 * len(FRACS)
    assert f"--deadline {deadline:.0f} s reached" in message and f"of {cells} round(s)" in message
    assert "no table was written" in message and "run `sm12x tune` again" in message
    assert took < deadline + 30
    folder = cache / "sps" / tp.THROUGHPUT
    assert not list(folder.glob("*.json"))  # no table, no sidecar
    assert not leftovers(cache)
    TIMES["deadline-cache"] = str(cache)  # type: ignore[assignment]


def test_a_resumed_tune_does_not_measure_finished_rounds_again(machine, capsys):
    if "deadline-cache" not in TIMES:
        pytest.skip("resumes the deadline test's work (run the module)")
    cache = Path(TIMES["deadline-cache"])  # type: ignore[arg-type]
    work = next((cache / "sps" / tp.THROUGHPUT / ".work").iterdir())
    rounds = [
        json.loads(line)
        for path in work.glob("seg-*/table.rounds.jsonl")
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    finished = {r["batch_size_per_rank"] for r in rounds}
    assert finished and 16 not in finished
    assert {r["frac"] for r in rounds} <= set(FRACS)
    with MockServer(sps=with_table()) as server:
        assert tune(cache, server.base_url, "--batch-size", "1", "2", "4", "16") == 0
        batches = server.app.state.scheduler.batches
    # One segment per fraction still missing a cell, each its warmup round and the
    # cells left: no finished cell is measured again.
    left = 4 * len(FRACS) - len(rounds)
    assert len(batches) == len(FRACS) + left and batches.count(DP * 16) == len(FRACS)
    assert "resuming: " in capsys.readouterr().err
    meta = json.loads(next((cache / "sps" / tp.THROUGHPUT).glob("*.meta.json")).read_text())
    assert meta["profiler"]["measured"] == [1, 2, 4, 16]


def test_tune_with_a_url_and_a_recipe_does_not_need_nvidia_smi(machine, monkeypatch, capsys):
    """Profiling a server at --url, tune need not run on its machine: without
    nvidia-smi it keys the table by the recipe's GPU model and count, says so
    once, and the launch on the rig (where nvidia-smi names the GPUs) takes it."""
    fake_smi = Path(os.environ["PATH"].split(os.pathsep)[0])
    assert (fake_smi / "nvidia-smi").exists()
    monkeypatch.setenv("PATH", os.pathsep.join(os.environ["PATH"].split(os.pathsep)[1:]))
    with pytest.raises(gpus.GpuQueryError):
        gpus.query_gpus()  # no nvidia-smi here
    cache = machine / "cache"
    with MockServer(sps=with_table()) as server:
        assert tune(cache, server.base_url, "--batch-size", "1", "2") == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "nvidia-smi" in line]
    assert len(said) == 1 and "keyed by the recipe's 4x rtx-pro-6000" in said[0], err
    recipe = load_recipe(tp.FIXTURE)
    made = store.key_for(recipe, track=default_track(), sglang=SGLANG, sm12x=__version__, gpu=None)
    table = store.table_path(cache, made)
    assert json.loads(store.meta_path(table).read_text())["key"]["gpu"] is None
    on_the_rig = store.key_for(
        recipe, track=default_track(), sglang=SGLANG, sm12x=__version__, gpu=tp.gpu_name()
    )
    assert store.lookup(cache, on_the_rig).table == table
    eight = dataclasses.replace(on_the_rig, gpu_count=8)
    assert store.lookup(cache, eight).stale_by == (
        f"GPU 4 GPUs of the recipe's model (nvidia-smi named none) (this launch: "
        f"8x {tp.gpu_name()})",
    )


def test_the_stand_in_pins_a_verify_budget_as_sglang_does(machine):
    """/set_internal_state's dspark_force_budget_frac (internal_state.py): in (0, 1]
    or null, one `updated` per DP rank, any other key refused; a compact step then
    replays the smallest token bucket holding bs + int(frac x bs x gamma) (with a
    table loaded: without one compact verify verifies every row)."""
    with MockServer(sps=with_table()) as server:
        url = f"{server.base_url}/set_internal_state"
        scheduler = server.app.state.scheduler

        def pin(args: dict) -> list:
            return http_client.post(url, json={"server_args": args}, timeout=30).json()

        assert pin({"dspark_force_budget_frac": 1.5}) == [False] * DP
        assert pin({"pp_max_micro_batch_size": 8}) == [False] * DP
        assert scheduler.forced_frac is None
        assert pin({"dspark_force_budget_frac": 0.25}) == [True] * DP
        # 4 requests + int(0.25 x 4 x 7) = 11 tokens: the 16-token bucket (2 x 8).
        assert scheduler.forced_frac == 0.25 and scheduler.priced(4, 0.25) == 16
        # Every rank's planner holds the pin, as sglang's internal_state sets it.
        assert [p.planner._budget_planner.forced_budget_frac for p in scheduler.planners] == [
            0.25
        ] * DP


def test_a_track_refusal_is_said_once_with_the_setting_that_fixes_it(machine):
    parser = argparse.ArgumentParser()
    tune_main.add_arguments(parser)
    args = parser.parse_args(
        [
            "--url",
            "http://127.0.0.1:9",
            "--recipe",
            "rtx-pro-6000-tp4-throughput",
            "--track",
            "pinned",
        ]
    )
    with pytest.raises(UserError) as caught:
        tune_main.run(args)
    message = caught.value.message
    assert "runs only on the current track" in message and "\n" not in message
    assert message.count("set SM12X_TRACK") == 1 and message.endswith("set SM12X_TRACK=current")


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"record": False}, "keeps no per-step DSPARK records"),
        ({"simulate_acc_len": None}, "needs exactly SGLANG_SIMULATE_ACC_LEN=1.0"),
    ],
    ids=["no-records", "no-simulated-acceptance"],
)
def test_a_server_not_in_profiling_mode_gets_one_clear_error(machine, changes, says):
    with MockServer(sps=config(**changes)) as server:
        with pytest.raises(UserError) as caught:
            tune(machine / "cache", server.base_url)
        assert server.app.state.scheduler.batches == []  # nothing was sent to it
    message = caught.value.message
    assert "is not in SPS profiling mode" in message and says in message
    assert "sm12x launch --sps-profile" in message and "\n" not in message


def test_the_real_profiler_refuses_the_stand_in_outside_profiling_mode(machine):
    """The stand-in's answer without records is what the real profiler rejects."""
    with MockServer(sps=config(record=False)) as server:
        done = subprocess.run(
            [
                *FROM_WHEEL,
                "-m",
                "sglang.benchmark.dspark_sps_profiler",
                "run",
                "--base-url",
                server.base_url,
                "--out",
                str(machine / "t.json"),
                "--batch-size",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            env=os.environ.copy(),
        )
    assert done.returncode != 0
    assert "reports no dspark_info_record" in done.stderr


def test_a_server_for_another_gamma_or_layout_is_refused(machine):
    with MockServer(sps=config(gamma=6)) as server:
        with pytest.raises(UserError, match="does not run .*gamma 6"):
            tune(machine / "cache", server.base_url)


def test_tune_without_a_cache_folder_says_where_tables_go(machine, monkeypatch):
    parser = argparse.ArgumentParser()
    tune_main.add_arguments(parser)
    monkeypatch.delenv("SM12X_CACHE_DIR", raising=False)
    args = parser.parse_args(["--url", "http://127.0.0.1:9", "--recipe", str(tp.FIXTURE)])
    with pytest.raises(UserError, match="SM12X_CACHE_DIR is not set"):
        tune_main.run(args)


def test_gpus_are_read_from_nvidia_smi(machine):
    assert gpus.query_gpus()[0].name == tp.gpu_name()
    assert launch_choice.gpu_name() == tp.gpu_name()


def test_boot_mode_refuses_when_a_server_already_answers(machine):
    parser = argparse.ArgumentParser()
    tune_main.add_arguments(parser)
    with MockServer() as server:
        args = parser.parse_args(
            [
                "--recipe",
                str(tp.FIXTURE),
                "--cache-dir",
                str(machine / "cache"),
                "--port",
                str(server.port),
                "--boot-command",
                "sleep 60",
            ]
        )
        with pytest.raises(UserError, match="a server already answers at .*stop that one"):
            tune_main.run(args)


def test_boot_mode_starts_a_one_off_container_of_the_rigs_service_in_profiling_mode():
    from sm12x.deploy import compose
    from sm12x.settings import load

    recipe = load_recipe(tp.FIXTURE)
    service = compose.profiling_service(recipe, load(environ={}))
    run = service.up[service.up.index("run") :]
    assert run == [
        "run",
        "-d",
        "--name",
        f"sm12x-tune-{tp.THROUGHPUT}",
        "--service-ports",
        tp.RIG,
        "--sps-profile",
        "--recipe",
        tp.THROUGHPUT,
    ]
    assert service.up[service.up.index("--profile") + 1] == tp.RIG
    assert service.down == ["docker", "rm", "--force", f"sm12x-tune-{tp.THROUGHPUT}"]


def test_a_server_that_is_not_the_mock_gets_no_wheel_for_a_python_without_sglang(
    machine, monkeypatch
):
    """The wheel stands in only against sm12x mock-server: profiling a real server
    from a Python without sglang asks for --python or the image, in one line."""
    from sm12x.tune import probe

    real = probe.facts
    monkeypatch.setattr(
        probe, "facts", lambda info, url: dataclasses.replace(real(info, url), mock=False)
    )
    with MockServer(sps=config()) as server:
        with pytest.raises(UserError) as caught:
            tune(machine / "cache", server.base_url, "--docker", str(machine / "no-docker"))
        assert server.app.state.scheduler.batches == []
    message = caught.value.message
    assert "\n" not in message and "pass --python with one that has sglang" in message, message
    assert "from its wheel" not in message


@pytest.mark.parametrize("track", [t for t in tracks() if t != default_track()])
def test_both_done_when_checks_on_the_other_track(track, machine):
    """The issue's two checks on the other track's sglang, with that wheel's
    planner laying out the mock's steps and that wheel's profiler (other_track),
    in a fresh process: one process serves one sglang tree (sm12x.mock.serving)."""
    root = Path(__file__).resolve().parents[2]
    code = f"from tests.integration.test_tune import other_track; other_track({str(machine)!r})"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env={**os.environ, "SM12X_TRACK": track},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    assert done.stdout.strip().splitlines()[-1] == f"both checks held on {track}"


def other_track(folder: str) -> None:
    """On SM12X_TRACK's sglang, its own throughput recipe booted as `sm12x
    mock-server --sps-profile RECIPE [--sps-table T]` boots it: against a
    compact server without a table (no second phase) tune refuses in one line;
    after phase 1 the additive table prices every cell within 10% of the step
    the mock timed for the tier the wheel's planner laid out."""
    from sm12x.mock import command

    track = os.environ["SM12X_TRACK"]
    version = load_versions(track)["SGLANG_VERSION"]
    # The release's own pins first on the path, as `sm12x mock-server` puts them.
    command._prepare(version, True, "auto")
    assert "transformers" not in sys.modules
    assert track in (load_recipe(tp.THROUGHPUT).tracks or [])
    cache = Path(folder) / "cache"

    def booted(*extra: str) -> SpsConfig:
        parser = argparse.ArgumentParser()
        command.add_arguments(parser)
        config, served, _ = command._profiled(
            parser.parse_args(["--sps-profile", tp.THROUGHPUT, *extra])
        )
        assert served == version
        return config

    def tuned(url: str) -> int:
        return tune(cache, url, "--max-batch-size", "4", recipe=tp.THROUGHPUT)

    compact = dataclasses.replace(booted(), mode="compact")
    with MockServer(sps=compact, sglang_version=version) as server:
        assert server.app.state.scheduler.verifies_all
        with pytest.raises(UserError) as caught:
            tuned(server.base_url)
        assert server.app.state.scheduler.batches == []
    message = caught.value.message
    assert "\n" not in message and "runs compact verify without an SPS table" in message
    with MockServer(sps=booted(), sglang_version=version) as server:
        assert tuned(server.base_url) == tune_main.PHASE_TWO
    diagonal_table = next((cache / "sps" / tp.THROUGHPUT / ".work").glob("*/diagonal.json"))
    with MockServer(sps=booted("--sps-table", str(diagonal_table)), sglang_version=version) as s:
        scheduler = s.app.state.scheduler
        assert not scheduler.verifies_all
        assert tuned(s.base_url) == 0
        priced = {(bs, f): scheduler.priced(bs, f) for bs in (1, 2, 4) for f in FRACS}
    # 4 + int(0.125 x 4 x 7) = 7 tokens: the 8-token tier; 4 + 28 = 32.
    assert priced[(4, 0.125)] == 8 and priced[(4, 1.0)] == 32
    table = next(p for p in (cache / "sps" / tp.THROUGHPUT).glob("*.json") if ".meta" not in p.name)
    meta = json.loads(store.meta_path(table).read_text())
    assert meta["kind"] == store.ADDITIVE and meta["key"]["sglang"] == version
    read = sglang_prices(table, [(bs, int(f * bs * 7)) for bs, f in priced], version)
    for (bs, f), tokens in priced.items():
        want = SpsConfig().step_ms(tokens, bs) / 1000
        got = read[f"{bs},{int(f * bs * 7)}"]
        assert abs(got - want) <= 0.10 * want, ((bs, f), got, want)
    print(f"both checks held on {track}")
