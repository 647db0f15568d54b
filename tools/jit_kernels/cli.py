"""Compile every unit of every module for the asked arches, in parallel, and keep
what finished; render the table and the first-boot times from kept runs."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from sm12x.gpucode import firstboot
from tests.support import kernel_wheels
from tools import kernel_resources as kr
from tools.jit_kernels import build
from tools.jit_kernels.spec import ARCHES, TRACKS, Module, modules

BEGIN, END = "<!-- jit-resources:begin -->", "<!-- jit-resources:end -->"
HEADER = [
    "| package | JIT module | arch | units | kernels | max registers | max static shared (B) "
    "| dynamic room (B) | launch bounds (threads) | lowest occupancy at its bounds "
    "| flagged | compile (s, units summed) | measured on |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
]


def track_modules(track: str) -> list[Module]:
    return modules(track, build.fused_moe_py(track))


def machine(jobs: int) -> str:
    """Where the times were taken: name it, since they compare only on one machine."""
    label = os.environ.get("SM12X_JIT_MACHINE") or platform.node()
    return f"{label}, {os.cpu_count()} cores, {jobs} jobs"


def row(track: str, module: Module, label: tuple, arch: str, done: dict, missed: int) -> str:
    sglang, flashinfer = TRACKS[track]
    version = f"flashinfer {flashinfer}" if module.owner == "flashinfer" else f"sglang {sglang}"
    group = [r for r in done["rows"] if re.search(label[1], r["name"])]
    bounded = [r for r in group if r["threads"]]
    low = min((kr.occupancy(r["regs"], r["smem"], r["threads"]) for r in bounded), default=None)
    flagged = sorted({f for r in group for f in kr.flags(r["regs"], r["smem"], r["threads"])})
    spread = sorted({r["threads"] for r in bounded})
    room = kr.BLOCK_SMEM - max((r["smem"] for r in group), default=0)
    name = module.name + ("" if label[0] == "all" else f" ({label[0]})")
    of = f" of {done['units'] + missed}" if missed else ""
    shown = ", ".join(map(str, spread[:4])) + (" ..." if len(spread) > 4 else "")
    return (
        f"| {version} ({track}) | {name} | {arch} "
        f"| {done['units']}{of} | {len(group)} "
        f"| {max((r['regs'] for r in group), default=0)} "
        f"| {max((r['smem'] for r in group), default=0):,} | {room:,} | {shown or 'none'} "
        f"| {'-' if low is None else f'{low:.0%}'} | {', '.join(flagged) or 'no'} "
        f"| {done['seconds']:.0f} | {done['machine']} |"
    )


def run(
    tracks: list[str], arches: list[str], jobs: int, budget: float, keep: Path | None, done: dict
) -> dict:
    """{track/module/arch: {units, seconds, rows, machine} or {error}}; units start
    longest module first (the MoE last) until `budget` seconds have passed."""
    start, where = time.monotonic(), machine(jobs)
    tasks = []
    with tempfile.TemporaryDirectory() as tmp:
        for track in tracks:
            for module in track_modules(track):
                for arch in arches:
                    work = Path(tmp) / track / module.name / arch
                    skip = done.get(f"{track}/{module.name}/{arch}", {}).get("compiled", [])
                    for unit in build.units(track, module, work):
                        if Path(unit).name not in skip:
                            tasks.append((track, module, unit, arch, work))
        # The MoE's ~100 units last, one arch after another (the rig's CC 12.0
        # arch first): a run that is cut short has every other module whole.
        moe = ("sm_120f", "sm_121a", "sm_120a")
        tasks.sort(
            key=lambda t: (
                t[1].name == "fused_moe_120",
                moe.index(t[3]) if t[1].name == "fused_moe_120" else t[1].owner == "sglang",
            )
        )

        def one(task):
            track, module, unit, arch, work = task
            left = budget - (time.monotonic() - start)
            if left < 30:
                return task, None, "not started within the time budget"
            try:
                return task, build.compile_unit(track, module, unit, arch, work, left), None
            except subprocess.TimeoutExpired:
                return task, None, "stopped at the end of the time budget"
            except Exception as error:  # the compiler's own words: its first error line
                said = str(error).strip().splitlines()
                return task, None, next((w for w in said if "error" in w), said[-1])[:300]

        results: dict[str, dict] = {}
        with ThreadPoolExecutor(jobs) as pool:
            for future in as_completed([pool.submit(one, t) for t in tasks]):
                (track, module, unit, arch, _), got, error = future.result()
                key = f"{track}/{module.name}/{arch}"
                entry = results.setdefault(key, {"units": 0, "seconds": 0.0, "rows": [],
                                                 "machine": where, "errors": [], "compiled": []})  # fmt: skip
                if error:
                    entry["errors"].append(f"{Path(unit).name}: {error}")
                    print(f"{key} {Path(unit).name}: {error}", file=sys.stderr, flush=True)
                    continue
                entry["units"] += 1
                entry["compiled"].append(Path(unit).name)
                entry["seconds"] += got[0]
                entry["rows"] += got[1]
                print(f"{key} {Path(unit).name}: {got[0]:.0f} s", file=sys.stderr, flush=True)
                if keep:  # after each unit: a run cut short keeps what it measured
                    keep.write_text(json.dumps(results))
    return results


def render(results: dict) -> tuple[list[str], dict]:
    lines, times = list(HEADER), dict[str, dict]()
    for track in TRACKS:
        for module in track_modules(track):
            for arch in ARCHES:
                done = results.get(f"{track}/{module.name}/{arch}")
                if done is None:
                    continue
                missed = len(done["errors"])
                device = [e for e in done["errors"] if not e.split(":")[0].endswith(".cpp")]
                if device:  # a kernel unit missing: no resource figures for a part
                    lines.append(
                        f"| {track} | {module.name} | {arch} | {done['units']} of "
                        f"{done['units'] + missed} | not compiled: {device[0][:150]} "
                        f"||||||||| {done['machine']} |"
                    )
                    continue
                for label in module.groups:
                    lines.append(row(track, module, label, arch, done, missed))
                if missed:  # host-only units that did not compile, in the compiler's words
                    lines.append(
                        f"| {track} | {module.name} | {arch} | {missed} not compiled | "
                        f"{'; '.join(sorted(done['errors']))[:300]} ||||||||| {done['machine']} |"
                    )
                # Host-only units (.cpp) that failed leave every kernel measured;
                # their seconds (~1 s each here) are missing from the figure.
                if module.boot:
                    times.setdefault(TRACKS[track][0], {}).setdefault(arch, {})[module.name] = {
                        "owner": module.owner, "seconds": round(done["seconds"]),
                        "machine": done["machine"],
                    }  # fmt: skip
    return lines, times


def merge(runs: list[dict]) -> dict:
    """Runs of the same module and arch add up, unit by unit (each unit compiled once:
    a later run skips what an earlier one compiled); an error stays only while no run
    compiled that unit."""
    out: dict[str, dict] = {}
    for results in runs:
        for key, entry in results.items():
            into = out.setdefault(key, {"units": 0, "seconds": 0.0, "rows": [], "errors": [],
                                        "compiled": [], "machine": entry["machine"]})  # fmt: skip
            for name in ("units", "seconds", "rows", "errors", "compiled"):
                into[name] += entry.get(name, [])
    for entry in out.values():  # a unit's last word wins; none once it compiled
        last = {e.split(":")[0]: e for e in entry["errors"]}
        entry["errors"] = [e for u, e in last.items() if u not in entry["compiled"]]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.jit_kernels")
    parser.add_argument("--track", action="append", choices=list(TRACKS), help="only this track")
    parser.add_argument("--arch", action="append", choices=ARCHES, help="only this arch")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="units at once")
    parser.add_argument("--budget", type=float, default=36000, help="seconds to start units in")
    parser.add_argument("--keep", type=Path, help="write the run's results to this JSON file")
    parser.add_argument("--reuse", type=Path, action="append", help="kept results (merged)")
    parser.add_argument(
        "--compile", action="store_true", help="with --reuse: compile what those runs lack"
    )
    parser.add_argument("--write", action="store_true", help="write the table and the times")
    args = parser.parse_args(argv)
    for path in args.reuse or []:
        if not path.is_file():
            print(f"jit_kernels: no kept results at {path}: run with --keep", file=sys.stderr)
            return 1
    results = merge([json.loads(path.read_text()) for path in args.reuse or []])
    if args.compile or not args.reuse:
        if not (kernel_wheels.tool_dir() / "nvcc").is_file():
            print(f"jit_kernels: no nvcc in {kernel_wheels.tool_dir()}: run "
                  f"`{kernel_wheels.DOWNLOAD}`", file=sys.stderr)  # fmt: skip
            return 1
        fresh = run(
            args.track or list(TRACKS), args.arch or list(ARCHES), args.jobs, args.budget,
            args.keep, results,
        )  # fmt: skip
        if args.keep:
            args.keep.write_text(json.dumps(fresh))
        results = merge([results, fresh])
    lines, times = render(results)
    if not args.write:
        print("\n".join(lines))
        return 0
    text = kr.DOC.read_text()
    if BEGIN not in text or END not in text:
        print(f"jit_kernels: {kr.DOC} has no {BEGIN} ... {END} block", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    kr.DOC.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + rest.split(END, 1)[1])
    firstboot.TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    return 0
