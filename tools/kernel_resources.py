"""Per-kernel resources of the prebuilt sglang-kernel library the sm_12x path loads.

    python -m tests.support.kernel_wheels --download   # once: wheels + cuobjdump
    python -m tools.kernel_resources                    # print the table
    python -m tools.kernel_resources --write            # into docs/benchmarks.md

For each track's sglang-kernel (0.4.5, 0.4.10) and arch (x86_64: sm_120a on
CC 12.0; aarch64: sm_121a on CC 12.1), the library sgl_kernel's loader picks
(sm12x.gpucode.check.loader_choice) is read with CUDA's cuobjdump from PyPI:
registers and static shared memory per function (`-res-usage`), threads per
block from the launch bounds in each cubin's .nv.info (EIATTR_MAX_THREADS or
REQNTID; absent: the launch code decides, not read here). Occupancy uses the
sm_120/sm_121 limits: 65,536 registers, 1,536 threads (48 warps), 32 blocks
and 100 KB shared memory per SM with 1 KB reserved per block, at most
101,376 B per block. Dynamic shared memory is set at launch and is not in the
binary: the table's shared figure is static. A row is flagged when a kernel
cannot launch there (registers x threads past 65,536, static shared past
48 KB, shared plus the reserve past the SM, threads past 1,024).
"""

from __future__ import annotations

import argparse
import re
import struct
import subprocess
import sys
import tempfile
from math import ceil
from pathlib import Path

from sm12x.gpucode import check
from tests.support import kernel_wheels

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- kernel-resources:begin -->", "<!-- kernel-resources:end -->"
CASES = (("pinned", "0.4.5"), ("current", "0.4.10"))
ARCHES = (("x86_64", "sm_120a", (12, 0)), ("aarch64", "sm_121a", (12, 1)))
SM_REGS, SM_WARPS, SM_BLOCKS, SM_SMEM, RESERVED, BLOCK_SMEM = 65536, 48, 32, 102400, 1024, 101376
RES = re.compile(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:\d+ SHARED:(\d+) LOCAL:(\d+)")


def occupancy(regs: int, smem: int, threads: int) -> float:
    warps = ceil(threads / 32)
    per_warp = ceil(max(regs, 1) * 32 / 256) * 256
    blocks = min(
        SM_BLOCKS, SM_WARPS // warps, (SM_REGS // per_warp) // warps, SM_SMEM // (smem + RESERVED)
    )
    return blocks * warps / SM_WARPS


def flags(regs: int, smem: int, threads: int | None) -> list[str]:
    found = []
    if smem > 48 * 1024:
        found.append("static shared > 48 KB")
    if smem + RESERVED > SM_SMEM or smem > BLOCK_SMEM:
        found.append("shared past the SM")
    if threads and threads > 1024:
        found.append("threads > 1024")
    if threads and regs * threads > SM_REGS:
        found.append("registers x threads > 65,536")
    return found


def launch_bounds(cubin: bytes) -> dict[str, int]:
    """{function: threads per block} from EIATTR_MAX_THREADS (0x05) / REQNTID (0x10)."""
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    size, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * size) for i in range(count)]
    strtab = headers[names][4]
    found = {}
    for name_at, _, _, _, offset, length in headers:
        name = cubin[strtab + name_at : cubin.index(b"\0", strtab + name_at)].decode()
        if not name.startswith(".nv.info."):
            continue
        at, end = offset, offset + length
        while at + 2 <= end:
            fmt, attr = cubin[at], cubin[at + 1]
            if fmt == 0x04:
                (n,) = struct.unpack_from("<H", cubin, at + 2)
                if attr in (0x05, 0x10) and n >= 12:
                    x, y, z = struct.unpack_from("<III", cubin, at + 4)
                    found[name[len(".nv.info.") :]] = x * y * z
                at += 4 + n
            else:
                at += 4
    return found


def read(version: str, machine: str, arch: str, target: tuple[int, int]) -> list[dict]:
    package = kernel_wheels.unpacked(version, machine) / "sgl_kernel"
    library = check.loader_choice(package, target)
    tools = kernel_wheels.tool_dir()
    usage = subprocess.run(
        [str(tools / "cuobjdump"), "-res-usage", "-arch", arch, str(library)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    threads: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [str(tools / "cuobjdump"), "-xelf", "all", "-arch", arch, str(library)],
            cwd=tmp,
            capture_output=True,
            timeout=600,
            check=True,
        )
        for cubin in Path(tmp).glob("*.cubin"):
            threads.update(launch_bounds(cubin.read_bytes()))
    rows = []
    for name, regs, smem, local in RES.findall(usage):
        rows.append(
            {
                "name": name,
                "regs": int(regs),
                "smem": int(smem),
                "local": int(local),
                "threads": threads.get(name),
            }
        )
    return rows


def table() -> list[str]:
    lines = [
        "| sglang-kernel | arch | kernels | max registers | max static shared (B) "
        "| launch bounds (threads) | lowest occupancy at its bounds | flagged |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for track, version in CASES:
        for machine, arch, target in ARCHES:
            rows = read(version, machine, arch, target)
            groups = [(f"all {len(rows)} functions", rows)]
            groups += [
                (op, [r for r in rows if re.search(pattern, r["name"])])
                for op, pattern, _ in check.CALLED
            ]
            for label, group in groups:
                bounded = [r for r in group if r["threads"]]
                low = min(
                    (occupancy(r["regs"], r["smem"], r["threads"]) for r in bounded), default=None
                )
                flagged = sorted(
                    {f for r in group for f in flags(r["regs"], r["smem"], r["threads"])}
                )
                spread = sorted({r["threads"] for r in bounded})
                lines.append(
                    f"| {version} ({track}) {label} | {arch} | {len(group)} "
                    f"| {max((r['regs'] for r in group), default=0)} "
                    f"| {max((r['smem'] for r in group), default=0):,} "
                    f"| {', '.join(map(str, spread[:4])) + (' ...' if len(spread) > 4 else '') or 'none'} "
                    f"| {'-' if low is None else f'{low:.0%}'} | {', '.join(flagged) or 'no'} |"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.kernel_resources")
    parser.add_argument("--write", action="store_true", help=f"write the table into {DOC.name}")
    args = parser.parse_args(argv)
    lines = table()
    if not args.write:
        print("\n".join(lines))
        return 0
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        print(f"kernel_resources: {DOC} has no {BEGIN} ... {END} block", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + rest.split(END, 1)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
