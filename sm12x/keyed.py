"""`python -m sm12x.keyed MODULE [ARG ...]`: run MODULE with the API key, off the command line.

sglang (0.5.16-0.5.18) and sglang-router (0.3.2) take their key only as
`--api-key KEY`: neither reads it from the environment or a file. A key in
argv is world-readable in /proc/<pid>/cmdline (`ps -ef` on the host shows
it). So the launcher execs this module instead, with the key in the
environment (SM12X_API_KEY) or a file (SM12X_API_KEY_FILE), and this module
runs MODULE as `__main__` in the same process with `--api-key=KEY` added to
sys.argv only: /proc/<pid>/cmdline keeps the argv the process was started
with, which has no key. Both modules parse sys.argv[1:] in their
`if __name__ == "__main__"` block, which is what `python -m MODULE` runs too.
sglang's worker processes are multiprocessing children started with their
own fixed command line and get the key through the pickled ServerArgs.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Mapping, Sequence

from sm12x.apikey import ENV, FILE_ENV, read_api_key
from sm12x.errors import UserError

# What may be run this way: the two servers that take --api-key.
MODULES = ("sglang.launch_server", "sglang_router.launch_router")


def with_key(args: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """args plus the key as one `--api-key=KEY` token (a key starting with '-'
    would otherwise be read as an option)."""
    key = read_api_key(environ)
    if key is None:
        raise UserError(f"sm12x.keyed: no key in {ENV} or {FILE_ENV}")
    return [*args, f"--api-key={key}"]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in MODULES:
        print(f"usage: python -m sm12x.keyed {{{','.join(MODULES)}}} [ARG ...]", file=sys.stderr)
        return 2
    module, args = argv[0], argv[1:]
    try:
        sys.argv = [module, *with_key(args, os.environ)]
    except UserError as exc:
        print(f"sm12x: error: {exc.message}", file=sys.stderr)
        return 1
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
