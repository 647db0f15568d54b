"""Stand-in for sglang.benchmark.serving (see ../../README.md)."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request


def _scenario() -> dict:
    path = os.environ.get("SM12X_FAKE_BENCH_SCENARIO")
    if not path:
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main(argv: list[str]) -> int:
    from sm12x.versions import load_versions
    from tests.support import bench_cli

    version = os.environ.get("SM12X_FAKE_BENCH_SGLANG") or load_versions()["SGLANG_VERSION"]
    args = bench_cli.real_parser(version).parse_args(argv)  # exits 2 on a bad flag, as sglang does
    record = os.environ.get("SM12X_FAKE_BENCH_RECORD")
    if record:
        with open(record, "a", encoding="utf-8") as f:
            f.write(json.dumps({"argv": argv, "pid": os.getpid()}) + "\n")
    print(f"benchmark_args={args}")
    base = (args.base_url or f"http://{args.host}:{args.port or 30000}").rstrip("/")
    headers = {}
    if os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
    try:
        request = urllib.request.Request(base + "/v1/models", headers=headers)
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            response.read()
    except Exception as exc:  # noqa: BLE001 - the real one also just gives up
        print(f"Server at {base}/v1/models is not ready. Exiting. ({exc})")
        return 1
    scenario = _scenario()
    # One scenario per server, when the scenario names servers by --base-url.
    scenario = scenario.get("servers", {}).get(base, scenario)
    run = scenario.get("runs", {}).get(str(args.max_concurrency), scenario.get("default", {}))
    total = args.num_prompts
    print(f"Starting warmup with {args.warmup_requests} sequences...")
    print(f"Warmup completed with {args.warmup_requests} sequences. Starting main benchmark run...")
    if not args.disable_tqdm:
        steps = sorted({0, total // 2, total})
        for done in steps:
            pct = int(100 * done / total) if total else 100
            sys.stderr.write(f"\r{pct:3d}%|          | {done}/{total} [00:00<00:00, 99.00it/s]")
            sys.stderr.flush()
            time.sleep(0.01)
        sys.stderr.write("\n")
    if run.get("sleep"):
        time.sleep(float(run["sleep"]))
    line = run.get("line")
    if line is not None or run.get("raw_line") is not None:
        with open(args.output_file, "a", encoding="utf-8") as f:
            if line is not None:
                line = dict(line)
                for key in (
                    "backend",
                    "dataset_name",
                    "max_concurrency",
                    "random_input_len",
                    "random_output_len",
                    "random_range_ratio",
                    "tag",
                ):
                    line[key] = getattr(args, key)
                f.write(json.dumps(line) + "\n")
            else:
                f.write(run["raw_line"] + "\n")
    if run.get("output"):
        print(run["output"])
    return int(run.get("exit", 0))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
