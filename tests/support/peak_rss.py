"""Run a Python module as `python -m MODULE ARGS` would, then record the
process's own peak resident memory (VmHWM, the kernel's high-water mark
for its memory) and exit status:

    python -m tests.support.peak_rss OUT.json MODULE [ARGS...]

Measured in the process itself, so commands it starts (docker, the benchmark
process) and the test runner around it do not count; the largest of those it
waited for is recorded beside it (RUSAGE_CHILDREN).
"""

from __future__ import annotations

import json
import resource
import runpy
import sys


def _vm_hwm_kib() -> int:
    """This process's own high-water mark. Not getrusage(RUSAGE_SELF): Linux
    carries ru_maxrss across fork and exec, so a command started by a big
    test runner would report the runner's size."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> None:
    out, module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    code: int | str | None = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    finally:
        peak_kib = _vm_hwm_kib()
        children_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        with open(out, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "peak_rss_mib": peak_kib / 1024,
                    "children_peak_rss_mib": children_kib / 1024,
                    "exit": code,
                    "python": sys.version.split()[0],
                },
                f,
            )
    sys.exit(code)


if __name__ == "__main__":
    main()
