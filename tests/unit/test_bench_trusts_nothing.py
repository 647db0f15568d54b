"""bench checks what a server says with the one function tune uses, quotes every
command it logs, and keeps the key out of messages that quote the server."""

from __future__ import annotations

import shlex

import pytest

from sm12x.bench import main as bench_main
from sm12x.bench import provenance, runner
from sm12x.errors import UserError
from sm12x.mock.app import served_recipe as mock_recipe
from sm12x.recipe.lines import LINES
from sm12x.tune import main as tune_main
from sm12x.versions import load_versions

PINNED = load_versions("pinned")["SGLANG_VERSION"]
CURRENT = load_versions("current")["SGLANG_VERSION"]
KEY = "sk-echoed-0123456789"


@pytest.mark.parametrize("version", [PINNED, CURRENT])
def test_a_pinned_release_is_taken(version):
    info = {"sm12x_mock": True, "version": version}
    assert provenance.served_release(info) == version


@pytest.mark.parametrize(
    "version",
    [
        f"../../{PINNED}",
        "/etc",
        f"{PINNED} ",
        f"{PINNED}; touch /tmp/pwned",
        0.517,
        None,
        ["0.5.17"],
        "x" * 10_000,
        KEY,
    ],
)
def test_anything_else_is_refused_in_one_line_without_the_key(version):
    with pytest.raises(UserError) as caught:
        provenance.served_release({"sm12x_mock": True, "version": version}, KEY)
    message = caught.value.message
    assert "not a release sm12x pins" in message and "\n" not in message
    assert KEY not in message and len(message) < 400


def test_bench_and_tune_use_the_same_function():
    assert bench_main.provenance.served_release is tune_main.provenance.served_release


@pytest.mark.parametrize(
    "name", ["../recipes/rtx-pro-6000-tp4", "/etc/passwd", "nope", 4, "rtx-pro-6000-tp4.yaml"]
)
def test_a_recipe_the_server_names_must_be_a_shipped_one(name):
    with pytest.raises(UserError, match="which sm12x does not ship"):
        bench_main.choose_recipe("auto", [], {"sm12x_mock": True, "sm12x_recipe": name})


@pytest.mark.parametrize("line", sorted(LINES))
def test_bench_auto_takes_the_recipe_from_the_mock_s_server_info(line):
    """Issue 43: `sm12x bench --url <mock>` with --recipe auto fails no more."""
    version = PINNED if line == "v4-flash-0731" else CURRENT
    name = mock_recipe(line, version, 4, 1)
    assert name is not None
    info = {"sm12x_mock": True, "sm12x_recipe": name, "version": version}
    recipe, how = bench_main.choose_recipe("auto", [], info)
    assert recipe.name == name and "mock-server" in how
    # A server that does not say it is the mock is not believed: the GPUs decide.
    with pytest.raises(UserError, match="needs the server's GPUs"):
        bench_main.choose_recipe("auto", [], {"sm12x_recipe": name})


def test_the_logged_command_is_shell_quoted(tmp_path):
    spec = runner.Spec(base_url="http://127.0.0.1:1", concurrency=1, num_prompts=1)
    hostile = "0.5.17; touch /tmp/pwned"
    runner.run_one(spec, "/bin/false", tmp_path, timeout_s=30, env={}, prefix=("-m", "x", hostile))
    line = (tmp_path / "logs" / "c1.log").read_text().splitlines()[0]
    assert line.startswith("$ ")
    assert shlex.split(line[2:])[:4] == ["/bin/false", "-m", "x", hostile]
