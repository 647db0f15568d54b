"""How much disk a full run takes at its peak, and what holds it then.

    python3 -m tools.suite_disk watch SAMPLES.jsonl --folders DIR... [--path /]
        [--interval 5] [--every 48]
    python3 -m tools.suite_disk report SAMPLES.jsonl [--top 15]

scripts/test refuses to start a fresh clone on a disk with less free space than
a cold run needs, so that figure must be measured, not guessed: a CI machine with
24 GB free was refused by a guessed 30. `watch` records the used space of the
filesystem holding --path (statvfs, every --interval seconds) and, every --every
samples, the size of each entry of the given folders (`du -sk`, at the lowest CPU
and I/O priority: a du of the virtualenvs costs seconds on this 2-core kind).
`report` prints the peak over the first sample, when it came, the breakdown
sampled nearest before it, and the used space through the run.

Run it beside `.ci/run` in a fresh clone, with the clone's `.cache`, `/tmp` and
`~/.cache` as --folders; stop it (SIGTERM or SIGINT) when the run has ended.
Standard library only: the system Python runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from tools.suite_cpu import stop_flag

GB = 1 << 30


def used_bytes(path: Path) -> int:
    """The filesystem's used space as df shows it (blocks less free blocks)."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def sizes(folders: Iterable[Path]) -> dict[str, int]:
    """Each entry of each folder and its size in bytes (du -sk, one filesystem)."""
    entries = [str(p) for folder in folders if folder.is_dir() for p in sorted(folder.iterdir())]
    if not entries:
        return {}
    proc = subprocess.run(
        ["nice", "-n", "19", "ionice", "-c", "3", "du", "-skx", "--", *entries],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    found = {}
    for line in proc.stdout.splitlines():
        kib, _, name = line.partition("\t")
        if kib.isdigit():
            found[name] = int(kib) * 1024
    return found


def watch(out: Path, path: Path, folders: list[Path], interval: float, every: int) -> int:
    stopped = stop_flag()
    count = 0
    with open(out, "a", buffering=1) as handle:
        while not stopped():
            sample: dict[str, object] = {"t": time.time(), "used": used_bytes(path)}
            if count % every == 0:
                sample["sizes"] = sizes(folders)
            handle.write(json.dumps(sample) + "\n")
            count += 1
            deadline = time.monotonic() + interval
            while not stopped() and time.monotonic() < deadline:
                time.sleep(min(0.5, interval))
    return 0


def load(lines: Iterable[str]) -> list[dict]:
    samples = [json.loads(line) for line in lines if line.strip()]
    if not samples:
        raise SystemExit("suite_disk: no samples (was `watch` running during the run?)")
    return samples


def report(samples: list[dict], top: int, steps: int = 12) -> str:
    start, first = samples[0]["used"], samples[0]["t"]
    peak = max(samples, key=lambda s: s["used"])
    lines = [
        f"{len(samples)} samples over {(samples[-1]['t'] - first) / 60:.1f} min; "
        f"used at the start {start / GB:.1f} GB",
        f"peak: {(peak['used'] - start) / GB:.1f} GB over the start, "
        f"{(peak['t'] - first) / 60:.1f} min in; at the end "
        f"{(samples[-1]['used'] - start) / GB:.1f} GB over it",
    ]
    before = [s for s in samples if "sizes" in s and s["t"] <= peak["t"]]
    if before:
        nearest = before[-1]
        lines.append(
            f"the breakdown sampled {(peak['t'] - nearest['t']) / 60:.1f} min before the peak "
            f"(the {top} largest entries):"
        )
        ranked = sorted(nearest["sizes"].items(), key=lambda item: -item[1])
        lines += [f"  {size / GB:6.2f} GB  {name}" for name, size in ranked[:top]]
    lines.append("used over the start through the run:")
    stride = max(1, len(samples) // steps)
    for s in samples[::stride]:
        lines.append(f"  {(s['t'] - first) / 60:5.1f} min  {(s['used'] - start) / GB:5.1f} GB")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.suite_disk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("watch", help="sample the used space and the folders' sizes")
    w.add_argument("samples", type=Path)
    w.add_argument("--path", type=Path, default=Path("/"))
    w.add_argument("--folders", type=Path, nargs="*", default=[])
    w.add_argument("--interval", type=float, default=5.0)
    w.add_argument("--every", type=int, default=48, help="a breakdown every N samples")
    r = sub.add_parser("report", help="the peak and what held it")
    r.add_argument("samples", type=Path)
    r.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    if args.command == "watch":
        if args.interval <= 0 or args.every < 1:
            parser.error("--interval must be above 0 and --every at least 1")
        return watch(args.samples, args.path, args.folders, args.interval, args.every)
    if not args.samples.is_file():
        parser.error(f"{args.samples} does not exist: give the file `watch` wrote")
    print(report(load(args.samples.read_text().splitlines()), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
