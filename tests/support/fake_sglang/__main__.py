"""`python -m tests.support.fake_sglang --port 30000 --fault healthy`

Starts the fake sglang server (see app.py) on 127.0.0.1 in the foreground, for
tests that need it as a separate process (behind sglang-router, boot mode).
`--boot-log FILE` first prints FILE line by line (a recorded sglang boot log)
before serving; with `--crash` it exits 1 after printing instead of serving.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.fake_sglang.app import FAULTS, Faults  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fake_sglang",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--fault", action="append", default=[],
                        help="comma-separated, repeatable: " + ", ".join(FAULTS))
    parser.add_argument("--accept-length", type=float, default=3.4)
    parser.add_argument("--token-delay", type=float, default=0.001,
                        help="seconds between streamed steps")
    parser.add_argument("--api-key")
    parser.add_argument("--corrupt-every", type=int, default=8)
    parser.add_argument("--corrupt-min-concurrency", type=int, default=4)
    parser.add_argument("--stall-seconds", type=float, default=3600.0)
    parser.add_argument("--die-after", type=int, default=0,
                        help="exit after this many chat requests (the server dying mid-run)")
    parser.add_argument("--boot-log", type=Path, help="print this recorded log first")
    parser.add_argument("--boot-line-delay", type=float, default=0.01)
    parser.add_argument("--crash", action="store_true", help="exit 1 after the boot log")
    parser.add_argument("--sglang-version",
                        help="the sglang release whose serving code answers (default: the "
                             "image's pin, versions.env SGLANG_VERSION)")
    parser.add_argument("--line", default="v4-flash-0731", choices=["v4-flash-0731", "v4.1-flash"],
                        help="the model line served (V4.1-Flash needs --sglang-version 0.5.23)")
    parser.add_argument("--sglang-patches", choices=["all", "none"], default="all",
                        help="serve through sglang patched by scripts/apply-patches (all, the "
                             "image's state) or unpatched (none)")
    args = parser.parse_args(argv)
    try:
        faults = Faults.parse(args.fault, every=args.corrupt_every,
                              min_concurrency=args.corrupt_min_concurrency,
                              stall_seconds=args.stall_seconds, die_after=args.die_after)
    except ValueError as exc:
        parser.error(str(exc))
    if args.boot_log:
        for line in args.boot_log.read_text().splitlines():
            print(line, flush=True)
            time.sleep(args.boot_line_delay)
        if args.crash:
            return 1
    import uvicorn

    from tests.support.fake_sglang.app import create_app

    try:
        app = create_app(faults, accept_length=args.accept_length, token_delay=args.token_delay,
                         api_key=args.api_key, sglang_version=args.sglang_version,
                         patched=args.sglang_patches == "all", line=args.line)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"fake sglang: cannot load sglang's serving code: {exc}", file=sys.stderr)
        return 2
    print(f"fake sglang on http://{args.host}:{args.port} faults={sorted(faults.active) or ['healthy']}"
          f" sglang={args.sglang_version or 'pinned'} patches={args.sglang_patches} line={args.line}",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", lifespan="off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
