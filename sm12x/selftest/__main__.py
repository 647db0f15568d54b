"""python -m sm12x.selftest: the dispatch self-test (image build, CI, anyone).

Exit 0 only if, in the installed sglang's own configuration (the dispatch
patch active where it is applied, sglang's stock dispatch where patches.toml's
rule retired the patch), every census shape lands on a kernel that accepts it
with the right arguments, none aborts, and none falls back to Triton. Also
prints where the same shapes land in the other configurations (without the
patch, and with the Triton workaround). flashinfer 0.6's kernels are emulated
from its instantiation tables (kernels.py), 0.7's compiled module from its
resolver's rules (envelope.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def check_mirror(rules) -> str:
    """The patch's prefill mirror against the installed wheel's C++ table; '' if equal."""
    from sglang.kernels.ops.attention import flash_mla_sm120 as module

    tables = module._sm12x_flashinfer()
    if tables is None:
        return "the patch found no usable flashinfer tables (see the warning above)"
    mirror = {name: tuple(sorted(values)) for name, values in tables[1].items()}
    parsed = rules.prefill.as_mirror()
    if mirror != parsed:
        return f"patch mirror {mirror} != csrc/sparse_mla_sm120_prefill.cu {parsed}"
    print(f"  prefill mirror matches csrc/sparse_mla_sm120_prefill.cu: {parsed}")
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sm12x.selftest", description=__doc__, allow_abbrev=False
    )
    parser.add_argument("--json", type=Path, help="write every call's outcome here")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="batches 1-8, 16, 32, 64 only (the full census has 1-64)",
    )
    parser.add_argument(
        "--scenarios",
        help="comma-separated subset of patched,unpatched,triton (default: "
        "all three on a patched sglang, unpatched,triton on a stock one); the "
        "verdict is on the installed configuration (patched, or unpatched on "
        "a stock sglang) and skipped when it is left out",
    )
    args = parser.parse_args(argv)
    from sm12x.selftest.census import SCENARIOS
    from sm12x.selftest.env import flashinfer_package, installed_versions, stub_torchvision

    stub_torchvision()
    patched = dispatch_patched()
    default = SCENARIOS if patched else tuple(s for s in SCENARIOS if s != "patched")
    scenarios = [s for s in (args.scenarios or ",".join(default)).split(",") if s]
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown or not scenarios:
        parser.error(f"--scenarios takes {','.join(SCENARIOS)}; got {args.scenarios!r}")
    if "patched" in scenarios and not patched:
        parser.error(
            "--scenarios patched: this sglang has no dispatch patch (run "
            "scripts/apply-patches where its series has one)"
        )
    verdict = "patched" if patched else "unpatched"

    import torch

    # Every tensor here is small: one thread is fastest, and on a busy machine
    # OpenMP's spinning worker threads made each small copy up to 50x slower.
    torch.set_num_threads(1)
    started = time.monotonic()
    from sm12x.selftest import census, envelope
    from sm12x.selftest.kernels import Emulator, Rules

    versions = installed_versions()
    package = flashinfer_package()
    try:
        if envelope.is_envelope(package):
            rules = None
            emulator: Emulator = envelope.EnvelopeEmulator(
                None,  # type: ignore[arg-type]  # its rules are `envelope`, not pre-0.7 Rules
                envelope=envelope.EnvelopeRules.from_flashinfer(
                    package, versions["flashinfer-python"]
                ),
            )
        else:
            rules = Rules.from_flashinfer(package)
            emulator = Emulator(rules)
    except (OSError, ValueError) as err:
        # A flashinfer whose sm_120 sparse-MLA C++ is not where (or what) the
        # emulator reads: say so in one line (the image build prints it).
        print(
            f"sm12x dispatch self-test FAILED: cannot read the sm_120 sparse-MLA dispatch "
            f"rules of flashinfer {versions['flashinfer-python']} ({err}); this self-test "
            f"knows 0.6's C++ tables up to 0.6.18 and 0.7's resolver as of "
            f"{envelope.PINNED_VERSION}",
            file=sys.stderr,
        )
        return 1
    batches = (*range(1, 9), 16, 32, 64) if args.quick else census.DEFAULT_BATCHES
    found = census.shapes(batches=batches)
    with emulator:
        results = census.run(emulator, found, scenarios)
    table = census.summary(results)

    print(
        f"sm12x dispatch self-test: sglang {versions['sglang']}, "
        f"flashinfer {versions['flashinfer-python']}, {len(found)} distinct call shapes "
        f"({time.monotonic() - started:.0f} s)"
    )
    routes = ("cutlass", "cutlass-padded", "triton", "abort", "error")
    print(f"  {'scenario':<10}" + "".join(f"{r:>16}" for r in routes))
    for scenario, counts in table.items():
        print(f"  {scenario:<10}" + "".join(f"{counts.get(r, 0):>16}" for r in routes))

    failures = [
        (s, o)
        for s, o in results
        if o.scenario == verdict and (o.route in ("abort", "error", "triton") or o.detail)
    ]
    mirror_error = check_mirror(rules) if "patched" in scenarios else ""
    if mirror_error:
        print(f"  FAIL prefill mirror: {mirror_error}", file=sys.stderr)
    for shape, outcome in failures[:20]:
        print(f"  FAIL {shape}: {outcome.route} {outcome.detail}", file=sys.stderr)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "versions": versions,
                    "summary": {k: dict(v) for k, v in table.items()},
                    "calls": census.as_records(results),
                },
                indent=1,
            )
        )
    if failures or mirror_error:
        reasons = (
            [f"{len(failures)} {verdict} calls abort, fall back to Triton or get wrong arguments"]
            if failures
            else []
        )
        reasons += [f"the dispatch patch's prefill mirror: {mirror_error}"] if mirror_error else []
        print("sm12x dispatch self-test FAILED: " + "; ".join(reasons), file=sys.stderr)
        return 1
    if verdict not in scenarios:
        return 0
    print(
        f"sm12x dispatch self-test passed: every {verdict} call lands on a CUTLASS kernel "
        "that accepts it"
        + (
            ""
            if patched
            else " (no dispatch patch: sglang's own dispatch "
            f"and flashinfer {versions['flashinfer-python']}'s)"
        )
    )
    return 0


def dispatch_patched() -> bool:
    """Whether the installed sglang carries the dispatch patch (read from its source,
    so nothing is imported before the torchvision stub is in place)."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.origin:
        return False
    from pathlib import Path as _Path

    target = _Path(spec.origin).parent / "kernels" / "ops" / "attention" / "flash_mla_sm120.py"
    return target.is_file() and "_SM12X_TOPK_PAD" in target.read_text(encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
