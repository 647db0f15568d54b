"""A small program run through sm12x.mock.forkserver, for tests/unit/test_forkserver.py.

`python -m tests.support.forkserver_demo [--sleep S] [--exit N]` reads stdin,
prints what a run is (its argv, its working folder, two variables, what stdin
said) and exits with N. Its zygote's import reads DEMO_READ (by name, and so an
input of the import) and never DEMO_FREE (a run may set it as it likes); with
DEMO_BROKEN=1 a zygote's import fails.
"""

from __future__ import annotations

import json
import os
import sys
import time

SPEC = {
    "setup": "tests.support.forkserver_demo:setup",
    "run": "tests.support.forkserver_demo:run",
    "args": {"kind": "demo"},
}
IMPORTED: dict[str, str | None] = {}


def setup(kind: str) -> None:
    del kind
    IMPORTED["DEMO_READ"] = os.environ.get("DEMO_READ")
    # DEMO_BROKEN=1: the zygote's import fails (its process is forkserver.py), a
    # run's own does not.
    if os.environ.get("DEMO_BROKEN") == "1" and sys.argv[0].endswith("forkserver.py"):
        raise RuntimeError("this zygote cannot import")
    print("the import says this", file=sys.stderr)


def run(kind: str, argv: list[str]) -> None:
    del kind
    sleep = float(argv[argv.index("--sleep") + 1]) if "--sleep" in argv else 0.0
    code = int(argv[argv.index("--exit") + 1]) if "--exit" in argv else 0
    print(json.dumps({
        "argv": argv,
        "cwd": os.getcwd(),
        "read": os.environ.get("DEMO_READ"),
        "free": os.environ.get("DEMO_FREE"),
        "stdin": sys.stdin.read(),
        "pid": os.getpid(),
    }), flush=True)  # fmt: skip
    time.sleep(sleep)
    raise SystemExit(code)


def main(argv: list[str]) -> int:
    from sm12x.mock import forkserver

    served = forkserver.run(SPEC, argv)
    if served is not None:
        return served
    setup("demo")
    try:
        run("demo", argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
