"""python -m sm12x.selftest: the dispatch self-test (image build, CI, anyone).

Exit 0 only if, with the patch active, every census shape lands on a kernel
that accepts it with the right arguments, none aborts, and none falls back to
Triton (the pinned flashinfer has a CUTLASS kernel for every DeepSeek-V4-Flash
+ DSpark shape once padded). Also prints where the same shapes land without
the patch and with the Triton workaround.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sm12x.selftest", description=__doc__)
    parser.add_argument("--json", type=Path, help="write every call's outcome here")
    parser.add_argument("--quick", action="store_true",
                        help="batches 1-8, 16, 32, 64 only (the full census has 1-64)")
    args = parser.parse_args(argv)

    from sm12x.selftest.env import flashinfer_package, installed_versions, stub_torchvision

    stub_torchvision()
    started = time.monotonic()
    from sm12x.selftest import census
    from sm12x.selftest.kernels import Emulator, Rules

    versions = installed_versions()
    rules = Rules.from_flashinfer(flashinfer_package())
    batches = (*range(1, 9), 16, 32, 64) if args.quick else census.DEFAULT_BATCHES
    found = census.shapes(batches=batches)
    with Emulator(rules) as emulator:
        results = census.run(emulator, found)
    table = census.summary(results)

    print(f"sm12x dispatch self-test: sglang {versions['sglang']}, "
          f"flashinfer {versions['flashinfer-python']}, {len(found)} distinct call shapes "
          f"({time.monotonic() - started:.0f} s)")
    routes = ("cutlass", "cutlass-padded", "triton", "abort", "error")
    print(f"  {'scenario':<10}" + "".join(f"{r:>16}" for r in routes))
    for scenario, counts in table.items():
        print(f"  {scenario:<10}" + "".join(f"{counts.get(r, 0):>16}" for r in routes))

    failures = [(s, o) for s, o in results if o.scenario == "patched"
                and (o.route in ("abort", "error", "triton") or o.detail)]
    for shape, outcome in failures[:20]:
        print(f"  FAIL {shape}: {outcome.route} {outcome.detail}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"versions": versions,
                                         "summary": {k: dict(v) for k, v in table.items()},
                                         "calls": census.as_records(results)}, indent=1))
    if failures:
        print(f"sm12x dispatch self-test FAILED: {len(failures)} patched calls abort, fall "
              "back to Triton or get wrong arguments", file=sys.stderr)
        return 1
    print("sm12x dispatch self-test passed: every patched call lands on a CUTLASS kernel "
          "that accepts it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
