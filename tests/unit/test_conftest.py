"""tests/conftest.py's own rules for the session it sets up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A background job of a non-interactive shell: SIGINT ignored, then the suite
# (here: conftest's import) starts; what does a command it starts get?
CHILD_SEES = """
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
if sys.argv[1] == "conftest":
    import tests.conftest
probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
print(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                     timeout=60).stdout.strip())
"""


def _child_sees(first: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CHILD_SEES, first],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_session_started_with_sigint_ignored_gives_its_commands_ctrl_c_back():
    # Without the conftest the child inherits "ignored" (Python then installs no
    # KeyboardInterrupt handler): the premise, so the check below can fail.
    assert _child_sees("nothing") == "False"
    assert _child_sees("conftest") == "True"
