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
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.fake_sglang", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        help="comma-separated, repeatable: " + ", ".join(FAULTS),
    )
    parser.add_argument("--accept-length", type=float, default=3.4)
    parser.add_argument(
        "--token-delay", type=float, default=0.001, help="seconds between streamed steps"
    )
    parser.add_argument("--api-key")
    parser.add_argument("--corrupt-every", type=int, default=8)
    parser.add_argument("--corrupt-min-concurrency", type=int, default=4)
    parser.add_argument("--stall-seconds", type=float, default=3600.0)
    parser.add_argument(
        "--die-after",
        type=int,
        default=0,
        help="exit after this many chat requests (the server dying mid-run)",
    )
    parser.add_argument("--boot-log", type=Path, help="print this recorded log first")
    parser.add_argument("--boot-line-delay", type=float, default=0.01)
    parser.add_argument("--crash", action="store_true", help="exit 1 after the boot log")
    parser.add_argument(
        "--sglang-version",
        help="the sglang release whose serving code answers (default: the "
        "image's pin, versions.env SGLANG_VERSION)",
    )
    parser.add_argument(
        "--line",
        default="v4-flash-0731",
        choices=["v4-flash-0731", "v4.1-flash"],
        help="the model line served (V4.1-Flash needs --sglang-version 0.5.23)",
    )
    parser.add_argument(
        "--sglang-patches",
        choices=["all", "none"],
        default="all",
        help="serve through sglang patched by scripts/apply-patches (all, the "
        "image's state) or unpatched (none)",
    )
    sps = parser.add_argument_group(
        "DSpark scheduler (sps.py)",
        "with --dspark-scheduler: the layout as sglang's flags give "
        "it, and the SGLANG_* variables of the environment read as sglang reads them",
    )
    sps.add_argument("--dspark-scheduler", action="store_true")
    sps.add_argument("--tp-size", type=int, default=4)
    sps.add_argument("--dp-size", type=int, default=1)
    sps.add_argument("--ep-size", type=int, default=1)
    sps.add_argument("--speculative-dspark-block-size", type=int, default=7)
    sps.add_argument("--cuda-graph-max-bs", type=int, default=64)
    sps.add_argument(
        "--max-running-requests",
        type=int,
        help="in all; per DP rank it is this / --dp-size (sglang's rule)",
    )
    sps.add_argument("--stall-batch", type=int, help="a /generate of this many requests wedges")
    args = parser.parse_args(argv)
    try:
        faults = Faults.parse(
            args.fault,
            every=args.corrupt_every,
            min_concurrency=args.corrupt_min_concurrency,
            stall_seconds=args.stall_seconds,
            die_after=args.die_after,
        )
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
    from tests.support.fake_sglang.sps import SpsConfig

    try:
        config = None
        if args.dspark_scheduler:
            total = args.max_running_requests or 64 * args.dp_size
            config = SpsConfig.from_env(
                gamma=args.speculative_dspark_block_size,
                tp=args.tp_size,
                dp=args.dp_size,
                ep=args.ep_size,
                cuda_graph_max_bs=args.cuda_graph_max_bs,
                max_running_per_dp=max(1, total // args.dp_size),
                stall_batch=args.stall_batch,
            )
        app = create_app(
            faults,
            accept_length=args.accept_length,
            token_delay=args.token_delay,
            api_key=args.api_key,
            sglang_version=args.sglang_version,
            patched=args.sglang_patches == "all",
            sps=config,
            line=args.line,
        )
    except ValueError as exc:  # what sglang refuses to start with
        print(f"fake sglang: ValueError: {exc}", file=sys.stderr)
        return 1
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"fake sglang: cannot load sglang's serving code: {exc}", file=sys.stderr)
        return 2
    print(
        f"fake sglang on http://{args.host}:{args.port} faults={sorted(faults.active) or ['healthy']}"
        f" sglang={args.sglang_version or 'pinned'} patches={args.sglang_patches} line={args.line}",
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", lifespan="off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
