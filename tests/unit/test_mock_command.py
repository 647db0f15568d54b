"""`sm12x mock-server`'s bad input, each refused with one line before anything loads,
and the switches that keep it (and the test tiers) off the network and off sglang's
code: SM12X_OFFLINE and SM12X_FORBID_WHEELS. No wheel and no sglang code here: the
fast tier (the server itself runs in tests/integration/test_mock_server.py): the
module holds the package `sm12x`, not the helper modules tests/conftest.py marks
`wheels` when a test module holds them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import sm12x.mock.command
import sm12x.mock.serving
import sm12x.mock.wheels
from sm12x.mock.faults import FAULTS
from tests.support import tiers
from tests.support.cli import ROOT, run_sm12x


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "flags",
    [
        ["--fault", "bogus"],
        ["--fault", "loop,bogus"],
        ["--fault", "loop", "--fault", "bogus"],
    ],
)
def test_an_unknown_fault_is_one_error_naming_the_valid_ones(flags):
    result = run_sm12x("mock-server", *flags)
    assert result.returncode == 1
    line = error_line(result)
    assert line.startswith("sm12x mock-server: error: --fault: unknown fault 'bogus'"), line
    assert all(name in line for name in FAULTS), line
    assert result.stdout == ""  # nothing started, nothing loaded


def test_list_faults_says_what_each_does():
    result = run_sm12x("mock-server", "--list-faults")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(FAULTS)
    assert all(len(line.split()) > 2 for line in lines)


def test_help_lists_every_fault_and_the_settings():
    result = run_sm12x("mock-server", "--help")
    assert result.returncode == 0
    text = re.sub(r"-\s+", "-", " ".join(result.stdout.split()))  # argparse wraps at hyphens
    for name in FAULTS:
        assert name in text
    for flag in ("--port", "--host", "--bind", "--explain", "--api-key-file", "--fetch"):
        assert flag in text
    # The key is a setting, never a flag: `ps` would show it to every user.
    assert "--api-key " not in text.replace("--api-key-file", "")


def test_a_line_the_release_cannot_serve_is_refused():
    result = run_sm12x("mock-server", "--line", "v4.1-flash", "--sglang-version", "0.5.17")
    assert result.returncode == 1
    line = error_line(result)
    assert "sglang 0.5.17 cannot serve" in line and "--sglang-version" in line


def test_beyond_loopback_it_needs_a_key():
    result = run_sm12x("mock-server", "--host", "0.0.0.0")
    assert result.returncode == 1
    line = error_line(result)
    assert "0.0.0.0" in line and "SM12X_API_KEY" in line


def test_explain_reads_the_key_from_the_environment_and_never_prints_it():
    result = run_sm12x(
        "mock-server", "--port", "30001", "--explain", env={"SM12X_API_KEY": "sk-mock-secret"}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# sm12x mock-server settings")
    assert "# SM12X_API_KEY=(set)" in result.stdout
    assert "# SM12X_PORT=30001" in result.stdout
    assert "sk-mock-secret" not in result.stdout + result.stderr


def test_a_bad_boot_log_is_refused():
    result = run_sm12x("mock-server", "--boot-log", "/nonexistent/boot.log")
    assert result.returncode == 1
    assert "--boot-log=/nonexistent/boot.log: no such file" in error_line(result)


def test_without_the_extra_it_says_which_to_install(monkeypatch, capsys):
    from sm12x import cli

    monkeypatch.setattr(
        sm12x.mock.command, "missing_dependencies", lambda: ["starlette", "uvicorn"]
    )
    assert cli.main(["mock-server"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (
        "sm12x mock-server: error: sm12x mock-server needs starlette, uvicorn: "
        "pip install 'sm12x[mock]'"
    )


def test_python_m_sm12x_mock_is_the_same_command():
    done = subprocess.run(
        [sys.executable, "-m", "sm12x.mock", "--fault", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert error_line(done).startswith("sm12x mock-server: error: --fault: unknown fault 'nope'")


# --- SM12X_OFFLINE and SM12X_FORBID_WHEELS ------------------------------------------


def test_offline_a_missing_wheel_is_one_error_naming_the_fetch(monkeypatch, tmp_path):
    monkeypatch.delenv(sm12x.mock.wheels.FORBID_ENV, raising=False)
    monkeypatch.setenv(sm12x.mock.wheels.OFFLINE_ENV, "1")
    monkeypatch.setenv("SM12X_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError) as caught:
        sm12x.mock.wheels.wheel("sglang", "0.0.1")
    text = str(caught.value)
    assert "sglang==0.0.1 is not in" in text and str(tmp_path / "wheels") in text
    assert "SM12X_OFFLINE=1 forbids downloading it" in text
    assert f"-d {tmp_path / 'wheels'} sglang==0.0.1" in text  # the command that fetches it
    assert not (tmp_path / "wheels").exists()  # and nothing was fetched


def test_online_a_missing_wheel_is_fetched(monkeypatch, tmp_path):
    """Without SM12X_OFFLINE the wheel is downloaded (pip stands in here)."""
    monkeypatch.delenv(sm12x.mock.wheels.FORBID_ENV, raising=False)
    monkeypatch.delenv(sm12x.mock.wheels.OFFLINE_ENV, raising=False)
    monkeypatch.setenv("SM12X_CACHE", str(tmp_path))
    asked = []

    def pip(*args: str) -> None:
        asked.append(args)
        (Path(args[args.index("-d") + 1]) / "sglang-0.0.1-py3-none-any.whl").write_bytes(b"")

    monkeypatch.setattr(sm12x.mock.wheels, "_pip", pip)
    assert (
        sm12x.mock.wheels.wheel("sglang", "0.0.1")
        == tmp_path / "wheels" / "sglang-0.0.1-py3-none-any.whl"
    )
    assert asked == [("download", "-d", str(tmp_path / "wheels"), "sglang==0.0.1")]


def test_forbidden_every_wheel_and_sglang_code_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setenv(sm12x.mock.wheels.FORBID_ENV, "the reason given")
    for attempt in (
        lambda: sm12x.mock.wheels.wheel("sglang", "0.5.17"),
        lambda: sm12x.mock.wheels.pythonpath("0.5.23"),
        lambda: sm12x.mock.serving.tree("0.5.17", patched=True),
        lambda: sm12x.mock.serving.locate("0.5.17", patched=True),
    ):
        with pytest.raises(sm12x.mock.wheels.Forbidden, match="the reason given"):
            attempt()


def test_the_fast_tier_forbids_the_wheels_in_its_servers_too():
    """What tests/conftest.py runs at the start of a session: under SM12X_TIER=fast
    a process it starts (the variables are inherited) refuses sglang's code,
    saying the test is in the wrong tier."""
    code = (
        "from tests.support import tiers; tiers.apply()\n"
        "from sm12x.mock import serving\n"
        "serving.locate('0.5.17', patched=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "SM12X_TIER": "fast"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "Forbidden: refused to run sglang 0.5.17's serving code" in done.stderr
    assert tiers.REASON in done.stderr


def test_every_tier_is_offline():
    # tests/conftest.py: no test downloads (scripts/test fetched every wheel).
    assert sm12x.mock.wheels.offline()


# --- where sglang's code comes from ------------------------------------------------


def fake_site(root: Path, version: str, record: bool) -> Path:
    (root / "sglang").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    if record:
        (root / "sglang" / sm12x.mock.serving.RECORD).write_text("{}")
    info = root / f"sglang-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return root


def test_the_installed_sglang_serves_when_it_is_the_release_patched_as_asked(monkeypatch, tmp_path):
    site = fake_site(tmp_path / "site", "0.5.17", record=True)
    monkeypatch.setenv("SM12X_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(site))
    assert sm12x.mock.serving.installed("0.5.17", patched=True) == site
    assert sm12x.mock.serving.installed("0.5.17", patched=False) is None  # it is patched
    assert sm12x.mock.serving.installed("0.5.23", patched=True) is None  # another release
    monkeypatch.delenv(sm12x.mock.wheels.FORBID_ENV, raising=False)
    assert sm12x.mock.serving.locate("0.5.17", patched=True, source="installed") == site
    with pytest.raises(RuntimeError, match="no installed sglang 0.5.23"):
        sm12x.mock.serving.locate("0.5.23", patched=True, source="installed")


def test_an_unpatched_install_does_not_stand_for_the_patched_tree(monkeypatch, tmp_path):
    site = fake_site(tmp_path / "site", "0.5.17", record=False)
    monkeypatch.setenv("SM12X_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(site))
    assert sm12x.mock.serving.installed("0.5.17", patched=True) is None
    assert sm12x.mock.serving.installed("0.5.17", patched=False) == site


def test_a_tree_of_the_cache_on_the_path_is_not_an_install(monkeypatch, tmp_path):
    monkeypatch.setenv("SM12X_CACHE", str(tmp_path))
    site = fake_site(sm12x.mock.serving.cache_root() / "0.5.17-pristine", "0.5.17", record=False)
    monkeypatch.syspath_prepend(str(site))
    assert sm12x.mock.serving.installed("0.5.17", patched=False) is None


def test_a_signal_stop_is_a_signal_status_even_where_sigint_was_ignored():
    """uvicorn returns from run() after a signal when the re-raised SIGINT is
    ignored (a background job inherits that): the status still says a signal
    stopped it, as the CI run's Ctrl-C checks expect (130), SIGTERM 143."""
    import signal
    from types import SimpleNamespace

    from sm12x.mock.command import _stopped_status

    assert _stopped_status(SimpleNamespace(should_exit=False)) == 0
    assert _stopped_status(SimpleNamespace(should_exit=True, _captured_signals=[])) == 130
    stopped = SimpleNamespace(should_exit=True, _captured_signals=[signal.SIGINT])
    assert _stopped_status(stopped) == 130
    stopped = SimpleNamespace(should_exit=True, _captured_signals=[signal.SIGTERM])
    assert _stopped_status(stopped) == 143


@pytest.mark.parametrize(
    "flags, says",
    [
        (
            ["--sps-profile", "rtx-pro-6000-tp4"],
            "--sps-profile rtx-pro-6000-tp4: it reads no tuned SPS table",
        ),
        (["--sps-profile", "no-such-recipe"], "--sps-profile no-such-recipe: "),
        (
            ["--sps-profile", "rtx-pro-6000-tp4-throughput", "--dp-size", "2"],
            "--sps-profile takes the layout from the recipe: drop --dp-size",
        ),
        (
            ["--sps-profile", "rtx-pro-6000-tp4-throughput", "--dspark-scheduler"],
            "drop --dspark-scheduler",
        ),
        (
            ["--sps-profile", "rtx-pro-6000-tp4-throughput", "--sglang-version", "0.5.17"],
            "runs on the current track's sglang 0.5.23, not --sglang-version 0.5.17",
        ),
        (
            ["--sps-profile", "rtx-pro-6000-tp4-throughput", "--line", "v4.1-flash"],
            "serves v4-flash-0731, not --line v4.1-flash",
        ),
    ],
    ids=["baseline", "unknown", "layout-flag", "scheduler-flag", "other-sglang", "other-line"],
)
def test_sps_profile_takes_a_throughput_recipe_and_nothing_it_would_override(flags, says):
    result = run_sm12x("mock-server", *flags)
    assert result.returncode == 1, result.stderr
    line = error_line(result)
    assert line.startswith("sm12x mock-server: error: ") and says in line, line
    assert result.stdout == ""  # refused before anything loads


@pytest.mark.parametrize(
    "name",
    ["rtx-pro-6000-tp4-throughput", "rtx-pro-6000-tp2-throughput", "rtx-5090-tp8-throughput"],
)
def test_sps_profile_boots_the_stand_in_as_the_launch_renders_the_recipe(name):
    """The scheduler's layout and limits are the recipe's as sglang resolves them,
    and its profiling variables are the ones `sm12x launch --sps-profile` writes,
    read as sglang reads them: what tune then checks the server against."""
    import argparse

    from sm12x.launch.plan import build_launch
    from sm12x.launch.render import LaunchContext
    from sm12x.recipe import load_recipe
    from sm12x.recipe.derived import largest_decode_graph, per_rank_requests
    from sm12x.sps.tables import layout

    parser = argparse.ArgumentParser()
    sm12x.mock.command.add_arguments(parser)
    config, version, line = sm12x.mock.command._profiled(parser.parse_args(["--sps-profile", name]))
    recipe = load_recipe(name)
    env = build_launch(recipe, LaunchContext(sps_profile=True)).env_dict()
    assert env["SGLANG_DSPARK_ENABLE_SPS_RECORD"] == "1"
    assert (config.record, config.simulate_acc_len) == (True, 1.0)
    assert config.mode == env["SGLANG_RAGGED_VERIFY_MODE"] == "static"  # tune's phase 1
    assert config.sps_table_path is None
    # Phase 2: compact verify, loading the table as the launch renders it.
    phased = sm12x.mock.command._profiled(
        parser.parse_args(["--sps-profile", name, "--sps-table", "/cache/d.json"])
    )[0]
    assert (phased.mode, phased.sps_table_path) == ("compact", "/cache/d.json")
    parallel = layout(recipe)
    assert (config.tp, config.dp, config.ep) == (parallel.tp, parallel.dp, parallel.ep)
    assert config.gamma == recipe.dspark.block_size
    assert config.cuda_graph_max_bs == largest_decode_graph(recipe)
    assert config.max_running_per_dp == per_rank_requests(recipe)
    assert (version, line) == ("0.5.23", recipe.model.line)
