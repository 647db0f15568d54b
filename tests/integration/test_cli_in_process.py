"""The unit tests call `sm12x` in process (tests/support/cli.py); these hold
that call to the real process: the same status, stdout and stderr for commands
that print, refuse, read the environment and a .env, run a child program, and
hand the process over with an exec."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import cli
from tests.support.cli import run_sm12x


def both(*args: str, **kw):
    inside = run_sm12x(*args, process=False, **kw)
    outside = run_sm12x(*args, process=True, **kw)
    return inside, outside


def same(inside, outside) -> None:
    assert (inside.returncode, inside.stdout, inside.stderr) == (
        outside.returncode,
        outside.stdout,
        outside.stderr,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("render", "rtx-pro-6000-tp2"),
        ("render", "rtx-pro-6000-tp4", "--no-spec"),
        ("render", "no-such-recipe"),
        ("render",),
        ("render", "--no-such-flag"),
        ("verify", "--help"),
        ("bench", "--validate", "/nonexistent.json"),
    ],
    ids=lambda args: " ".join(args) or "none",
)
def test_in_process_is_the_process(args):
    inside, outside = both(*args)
    same(inside, outside)


def test_the_environment_and_dotenv_are_the_callers(tmp_path):
    dotenv = tmp_path / "site.env"
    dotenv.write_text("SM12X_RECIPE=rtx-pro-6000-tp4\n")
    inside, outside = both("render", env={"SM12X_ENV_FILE": str(dotenv)}, cwd=tmp_path)
    same(inside, outside)
    assert "--tp-size 4" in inside.stdout
    # and nothing of the call's environment is left behind in this process
    assert os.environ.get("SM12X_ENV_FILE") != str(dotenv)


def test_an_exec_hands_over_its_status_and_output():
    """launch and router exec their server: in process the program runs as a
    child, and its status and output are the call's, as after a real exec."""
    program = ["sh", "-c", "echo out; echo err >&2; exit 7"]
    real = subprocess.run(
        [sys.executable, "-c", f"import os; os.execvpe('sh', {program!r}, dict(os.environ))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    with cli._exec_as_child(), cli._captured() as streams:
        try:
            os.execvpe("sh", program, dict(os.environ))
        except SystemExit as exc:
            status = exc.code
    out, err = streams.read()
    assert (
        (status, out, err) == (real.returncode, real.stdout, real.stderr) == (7, "out\n", "err\n")
    )


def test_what_earlier_tests_imported_does_not_decide_what_the_cli_sees(tmp_path, monkeypatch):
    """A stub sglang in sys.modules and a tree on sys.path (what the wheel tests
    leave in a worker) are not there for the call, as in a fresh process; the
    CI-under-load run failed 30 unit tests so before the runner hid them."""
    import types

    tree = tmp_path / "tree"
    (tree / "sglang").mkdir(parents=True)
    (tree / "sglang" / "__init__.py").write_text(
        "raise ImportError('the tree, not a fresh path')\n"
    )
    monkeypatch.syspath_prepend(str(tree))
    stub = types.ModuleType("sglang")  # no __spec__: made by hand
    monkeypatch.setitem(sys.modules, "sglang", stub)
    monkeypatch.setitem(sys.modules, "sglang.srt", types.ModuleType("sglang.srt"))
    args = ("render", "rtx-pro-6000-tp4")
    inside, outside = both(*args)
    same(inside, outside)
    launch = ("launch", "--recipe", "rtx-pro-6000-tp4", "--dry-run")
    same(*both(*launch))
    # and both are back for the test that put them there
    assert sys.modules["sglang"] is stub and str(tree) in sys.path


def test_fresh_imports_hide_a_stub_sglang_from_code_called_directly(monkeypatch):
    """What tests/conftest.py wraps every fast-tier test in: sm12x's own probe
    for an installed sglang sees none inside, and the stub outside."""
    import types

    from sm12x.launch.choice import installed_sglang

    monkeypatch.setitem(sys.modules, "sglang", types.ModuleType("sglang"))
    with pytest.raises(ValueError, match="__spec__ is None"):
        installed_sglang()  # what 14 launch tests met in the CI-under-load run
    with cli.fresh_imports(cli.ROOT):
        assert installed_sglang() is None
        assert "sglang" not in sys.modules
    assert isinstance(sys.modules["sglang"], types.ModuleType)
