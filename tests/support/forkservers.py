"""The test session's folder for sm12x.mock.forkserver's zygotes.

The controlling process makes one folder per session before xdist starts its
workers (they inherit the variable, so all four share one zygote per kind of
run), writes its own pid as the zygotes' owner, and removes the folder at the
end: each zygote sees its owner gone within POLL_S and exits. A run whose
environment is built from nothing (tests/support/cli.py's clean one) gets the
variable from `passed()`.
"""

from __future__ import annotations

import os
import shutil
import tempfile

# sm12x.mock.ENV; not imported from there: tests/support/cli.py imports
# this before any of sm12x (test_forkserver holds the two equal)
ENV = "SM12X_MOCK_FORKSERVER"
_MADE: list[str] = []


def start() -> None:
    """In the controlling process only: a worker inherits the folder. Set already
    (empty: none, each run imports for itself as everywhere else), it is kept."""
    if ENV in os.environ:
        return
    folder = tempfile.mkdtemp(prefix="sm12x-forkserver-")
    with open(os.path.join(folder, "owner"), "w") as owner:
        owner.write(str(os.getpid()))
    os.environ[ENV] = folder
    _MADE.append(folder)


def stop() -> None:
    """Remove the folder (its zygotes end), saying how many runs were forked."""
    for folder in _MADE:
        print(summary(folder))
        shutil.rmtree(folder, ignore_errors=True)
    _MADE.clear()


def summary(folder: str) -> str:
    try:
        with open(os.path.join(folder, "forkserver.log")) as log:
            lines = log.read().splitlines()
    except OSError:
        lines = []
    started = sum(" started a zygote " in line for line in lines)
    served = sum(" served by " in line for line in lines)
    refused = sum(" not served: " in line for line in lines)
    return (
        f"forked runs ({ENV}): {served} served by {started} zygotes, "
        f"{refused} refused by one (their environment differed)"
    )


def passed() -> dict[str, str]:
    """The variable, for an environment a test builds from nothing."""
    folder = os.environ.get(ENV)
    return {ENV: folder} if folder else {}
