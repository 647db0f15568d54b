"""The DSPARK streaming census across sglang versions, as docs/streaming.md shows it.

For each configuration (default: sglang 0.5.16 and 0.5.17 unpatched, 0.5.17
patched by scripts/apply-patches, 0.5.18 unpatched) it unpacks the cached
wheel, patches it where asked, and runs tests/support/stream_census.py in a
process of its own: every corpus output streamed through sglang's real chat
streaming code in every DSPARK chunking mode. Prints a Markdown table of
divergent streams per mode and of failure types, and writes the raw report
with --json.

Needs the test environment (scripts/test builds it):
    .cache/venv/bin/python scripts/stream-census [--samples 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sm12x.mock import serving as sglang_serving
from sm12x.mock import wheels
from tests.support import stream_census

ROOT = Path(__file__).resolve().parents[1]

DEFAULT = ["0.5.16", "0.5.17", "0.5.17+patches", "0.5.18", "0.5.23", "0.5.23+patches"]


def run_one(config: str, samples: int, seed: int, modes: str, timeout: int) -> dict:
    version, _, rest = config.partition("+")
    patched = rest == "patches"
    if rest not in ("", "patches"):
        raise SystemExit(
            f"stream-census: bad configuration {config!r} (VERSION or VERSION+patches)"
        )
    try:
        site = sglang_serving.tree(version, patched)
    except (FileNotFoundError, RuntimeError) as err:
        raise SystemExit(f"stream-census: {config}: {err}") from None
    # The release's own pins of transformers, tokenizers, ... (sm12x/mock/wheels.py).
    overlay = wheels.pythonpath(version)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*overlay, *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tests.support.stream_census",
                    "--site",
                    str(site),
                    "--json",
                    str(out),
                    "--samples",
                    str(samples),
                    "--seed",
                    str(seed),
                    "--modes",
                    modes,
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
            )
        except subprocess.TimeoutExpired:
            raise SystemExit(f"stream-census: {config} took over {timeout} s") from None
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"stream-census: {config} failed:\n{done.stderr[-3000:]}")
        report = json.loads(out.read_text())
    report["config"] = config
    return report


def markdown(reports: list[dict]) -> str:
    modes = reports[0]["modes"]
    lines = [
        "Divergent streams / streams, per chunking mode:",
        "",
        "| chunking | " + " | ".join(r["config"] for r in reports) + " |",
        "|---|" + "---|" * len(reports),
    ]
    tables = [stream_census.table(r) for r in reports]
    for mode in modes:
        cells = [f"{t[mode]['divergent']} / {t[mode]['streams']}" for t in tables]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    totals = [
        (sum(t[m]["divergent"] for m in modes), sum(t[m]["streams"] for m in modes)) for t in tables
    ]
    lines.append("| **all** | " + " | ".join(f"**{d} / {s}**" for d, s in totals) + " |")
    lines += [
        "",
        "The same, for the outputs in DeepSeek-V4's own format only (the encoder's "
        "parameter form, nothing after the tool-call block), and the streams that differ "
        "from the non-streamed response to the same tokens (DSPARK's chunking at fault), "
        "all modes:",
        "",
        "| | " + " | ".join(r["config"] for r in reports) + " |",
        "|---|" + "---|" * len(reports),
    ]
    lines.append(
        "| divergent, own format | "
        + " | ".join(
            f"{sum(t[m]['divergent-in-format'] for m in modes)} / "
            f"{sum(t[m]['in-format'] for m in modes)}"
            for t in tables
        )
        + " |"
    )
    lines.append(
        "| differ from the non-streamed response | "
        + " | ".join(
            f"{sum(t[m]['stream-only'] for m in modes)} / {sum(t[m]['streams'] for m in modes)}"
            for t in tables
        )
        + " |"
    )
    lines += [
        "",
        "Streams per failure type (a stream can have several), all modes:",
        "",
        "| failure | " + " | ".join(r["config"] for r in reports) + " |",
        "|---|" + "---|" * len(reports),
    ]
    for failure, label in stream_census.FAILURES.items():
        counts = [sum(t[m][failure] for m in modes) for t in tables]
        lines.append(f"| {label} | " + " | ".join(str(c) for c in counts) + " |")
    lines += [
        "",
        "Non-streamed responses differing from the written output (one per corpus output):",
        "",
        "| | " + " | ".join(r["config"] for r in reports) + " |",
        "|---|" + "---|" * len(reports),
    ]
    lines.append(
        "| outputs | "
        + " | ".join(
            f"{sum(1 for o in r['oracle'] if o['failures'])} / {len(r['oracle'])}" for r in reports
        )
        + " |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument(
        "configs",
        nargs="*",
        default=DEFAULT,
        help="VERSION or VERSION+patches (default: %(default)s)",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=20,
        help="random chunkings per output for the gamma and burst modes",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default=",".join(stream_census.MODES))
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per configuration")
    parser.add_argument("--json", type=Path, help="write every report here")
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    reports = []
    for config in args.configs:
        print(f"stream-census: {config} ...", file=sys.stderr, flush=True)
        reports.append(run_one(config, args.samples, args.seed, args.modes, args.timeout))
        print(
            f"stream-census: {config}: {len(reports[-1]['streams'])} streams in "
            f"{reports[-1]['seconds']} s",
            file=sys.stderr,
            flush=True,
        )
    print(markdown(reports))
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
