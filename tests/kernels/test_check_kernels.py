"""scripts/image-build check-kernels on the real sglang-kernel wheels of both
tracks and both arches (sha256-pinned, from PyPI: tests/support/kernel_wheels.py),
read with CUDA's own cuobjdump and nvdisasm from PyPI.

The loader decision is the wheel's own (a copy whose loader is edited moves
the check), a loaded library without code for the GPU fails, one the path
never loads warns, and a trap stub among the called kernels fails; a stub is
known by its SASS body, proven on a real stub and a real non-stub of one
CUTLASS template. Reading a library's SASS takes minutes here, so the answers
are kept under $SM12X_CACHE/kernels/scans, keyed by the library's and the
check's hash (sm12x/gpucode/check.py, `kernels`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sm12x.gpucode import check
from tests.support import kernel_wheels

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "image-build"
TRACKS = {"pinned": ("0.5.17", "0.4.5"), "current": ("0.5.23", "0.4.10")}
ARCHES = {"amd64": ("x86_64", (12, 0), "sm_120a"), "arm64": ("aarch64", (12, 1), "sm_121a")}
CASES = [(t, a) for t in TRACKS for a in ARCHES]
# One CUTLASS template, GemmUniversal, compiled into common_ops' sm_120a cubins
# with an sm_90 mainloop (its GMMA compiled to the disabled-arch trap) and with
# the sm_120 mainloop (real MMA).
TEMPLATE = "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalI"


def scan_cache() -> Path:
    return kernel_wheels.cache() / "scans"


def tool(name: str) -> str:
    path = kernel_wheels.tool_dir() / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `{kernel_wheels.DOWNLOAD}`")
    return str(path)


def run_check(site: Path, targetarch: str, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "PATH": f"{kernel_wheels.tool_dir()}:{os.environ['PATH']}",
        "SM12X_KERNEL_SCAN_CACHE": str(scan_cache()),
    }
    return subprocess.run(
        [
            sys.executable,
            "-S",
            str(script),
            "check-kernels",
            "--targetarch",
            targetarch,
            "--required",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )


def found(version: str, arch: str) -> dict[str, bool]:
    machine, _, sass = ARCHES[arch]
    library = (
        kernel_wheels.unpacked(version, machine) / "sgl_kernel" / "sm100" / "common_ops.abi3.so"
    )
    return check.kernels(tool("cuobjdump"), tool("nvdisasm"), library, sass, scan_cache())


def test_each_track_pins_the_wheel_tested_here():
    from sm12x.mock import wheels

    for sglang, kernel in TRACKS.values():
        with zipfile.ZipFile(wheels.wheel("sglang", sglang)) as archive:
            meta = archive.read(f"sglang-{sglang}.dist-info/METADATA").decode()
        requires = [
            line.split(":", 1)[1].strip()
            for line in meta.splitlines()
            if line.startswith("Requires-Dist:")
        ]
        assert check.kernel_requirement(requires, ("sglang-kernel",)) == kernel
        assert {v for v, _ in kernel_wheels.WHEELS} >= {kernel}


@pytest.mark.parametrize("track, arch", CASES)
def test_the_loader_picks_sm100_common_ops_on_sm_12x(track, arch):
    machine, capability, _ = ARCHES[arch]
    package = kernel_wheels.unpacked(TRACKS[track][1], machine) / "sgl_kernel"
    assert check.loader_choice(package, capability) == package / "sm100" / "common_ops.abi3.so"
    # Hopper is the loader's other branch: the probe follows it.
    assert check.loader_choice(package, (9, 0)) == package / "sm90" / "common_ops.abi3.so"


@pytest.mark.parametrize("track, arch", CASES)
def test_check_kernels_passes_the_real_wheel(track, arch):
    machine, _, sass = ARCHES[arch]
    proc = run_check(kernel_wheels.unpacked(TRACKS[track][1], machine), arch)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = proc.stdout
    assert "sgl_kernel's loader picks sm100/common_ops.abi3.so on CC" in out
    assert f"sm100/common_ops.abi3.so: {sass} runs on" in out
    assert f"common_ops.abi3.so {sass}: the called ops run" in out
    for op, _, _ in check.CALLED:
        assert re.search(rf"\b{op}: \d+ kernels", out), op
    # FlashMLA (and FA3 on x86_64) carry nothing for 12.x: warned, never loaded here.
    for library in ("flashmla_ops",) + (("flash_ops",) if arch == "amd64" else ()):
        assert re.search(rf"warning: sglang-kernel: {library}\S*\.so has .*never loads it", out)
    assert re.search(
        r"warning: common_ops.abi3.so sm_12\da: \d+ of \d+ functions are trap stubs", out
    )


def test_an_edited_loader_moves_the_check_and_a_loaded_library_without_code_fails(tmp_path):
    """A copy of the arm64 wheel whose loader loads flashmla_ops on CC 12.x: a
    library with no sm_121 code, a warning while the path never loads it, an
    error once it does."""
    source = kernel_wheels.unpacked("0.4.5", "aarch64")
    site = tmp_path / "site"
    shutil.copytree(
        source, site, copy_function=os.symlink, ignore=shutil.ignore_patterns(".complete")
    )
    loader = site / "sgl_kernel" / "load_utils.py"
    text = loader.read_text()
    os.unlink(loader)
    edited = text.replace(
        'ops_pattern = str(sgl_kernel_dir / ops_subdir / "common_ops.*")',
        'ops_pattern = str(sgl_kernel_dir / "flashmla_ops.*")',
    )
    assert edited != text
    loader.write_text(edited)
    proc = run_check(site, "arm64")
    assert proc.returncode == 1, proc.stdout
    assert "sgl_kernel's loader picks sgl_kernel/flashmla_ops.abi3.so on CC 12.1" in proc.stdout
    listed = re.search(
        r"flashmla_ops\.abi3\.so has ([^;]*), nothing that runs on sm_121", proc.stderr
    )
    assert listed, proc.stderr
    assert "sm_90a" in listed.group(1) and "sm_12" not in listed.group(1)
    assert proc.stderr.startswith("image-build: error: kernel libraries without sm_121 code")
    # common_ops, loaded before, is now the one the path never loads: not read for stubs.
    assert "the called ops run" not in proc.stdout


@pytest.mark.parametrize("track", TRACKS)
def test_a_trap_stub_on_the_called_list_fails(track, monkeypatch):
    kernels = found(TRACKS[track][1], "amd64")
    assert not check.judge_called(kernels)[0]
    stub = next(name for name, is_stub in kernels.items() if is_stub and name.startswith(TEMPLATE))
    monkeypatch.setattr(
        check, "CALLED", (*check.CALLED, ("cutlass_scaled_mm", re.escape(stub), "x"))
    )
    errors, _ = check.judge_called(kernels)
    assert errors == [
        f"cutlass_scaled_mm (called from sglang's x): 1 of its 1 kernels are "
        f"trap stubs, e.g. {stub[:120]}"
    ]


def extract(library: Path, arch: str, folder: Path) -> list[Path]:
    """The library's `arch` cubins, extracted into folder as `check.scan` does."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [tool("cuobjdump"), "-xelf", "all", "-arch", arch, str(library)],
        cwd=folder,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return sorted(folder.glob(f"*.{arch}.cubin"))


def sass_of(library: Path, arch: str, function: str, tmp_path: Path) -> str:
    """nvdisasm's SASS of one function: its section of the cubin that holds it."""
    for cubin in extract(library, arch, tmp_path):
        if function.encode() not in cubin.read_bytes():
            continue
        lines = subprocess.run(
            [tool("nvdisasm"), "-ndf", "-c", str(cubin)],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        ).stdout.splitlines()
        start = lines.index(f".text.{function}:")
        end = next(
            (
                i
                for i in range(start + 1, len(lines))
                if check.FUNCTION.match(lines[i]) or lines[i].lstrip().startswith(".section")
            ),
            len(lines),
        )
        return "\n".join(lines[start:end])
    raise AssertionError(f"{function} is in no {arch} cubin")


def test_a_stub_is_known_by_its_sass_body_not_its_name(tmp_path):
    kernels = found("0.4.5", "arm64")
    stub = min(
        (n for n, s in kernels.items() if s and n.startswith(TEMPLATE) and "Sm90" in n), key=len
    )
    real = min(
        (n for n, s in kernels.items() if not s and n.startswith(TEMPLATE) and "Sm120" in n),
        key=len,
    )
    library = (
        kernel_wheels.unpacked("0.4.5", "aarch64") / "sgl_kernel" / "sm100" / "common_ops.abi3.so"
    )
    stub_sass = sass_of(library, "sm_121a", stub, tmp_path / "a")
    real_sass = sass_of(library, "sm_121a", real, tmp_path / "b")
    assert check.parse_sass(stub_sass) == {stub: True}
    assert check.parse_sass(real_sass) == {real: False}
    # The body decides: each body under the other's name keeps its verdict.
    assert check.parse_sass(stub_sass.replace(stub, "renamed")) == {"renamed": True}
    assert check.parse_sass(real_sass.replace(real, "renamed")) == {"renamed": False}
    # The real kernel carries the MMA the stub lost; the stub prints, then traps.
    assert re.search(r"\bHMMA|\bQMMA|\bOMMA", real_sass)
    assert re.search(r"CALL\.ABS\.NOINC[^\n]*\n(?:\S*:\n)?[^\n]*BPT\.TRAP", stub_sass)


def _wheel(path: Path, files: dict[str, str]) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return kernel_wheels.sha256(path)


def _unpack_logged(wheel, digest, target, log, barrier):
    """One xdist worker's call, in a forked process: each extraction is logged."""
    real = zipfile.ZipFile.extractall

    def logged(self, *args, **kwargs):
        with open(log, "a") as out:
            out.write(f"{os.getpid()}\n")
        return real(self, *args, **kwargs)

    zipfile.ZipFile.extractall = logged
    barrier.wait(timeout=60)
    kernel_wheels.unpack_once(wheel, digest, target)


def test_a_wheel_is_unpacked_once_across_processes(tmp_path):
    import multiprocessing

    files = {f"pkg/m{i}.py": f"x = {i}\n" * 200 for i in range(300)}
    wheel = tmp_path / "w.whl"
    digest = _wheel(wheel, files)
    target, log = tmp_path / "cache" / "unpacked" / "w", tmp_path / "log"
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(4)
    workers = [
        context.Process(target=_unpack_logged, args=(wheel, digest, target, log, barrier))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    assert len(log.read_text().splitlines()) == 1
    assert (target / "pkg" / "m299.py").read_text() == files["pkg/m299.py"]
    assert (target / ".complete").read_text() == digest
    assert [p.name for p in target.parent.iterdir() if not p.name.endswith(".lock")] == ["w"]


def test_an_unpacked_tree_of_another_digest_or_half_made_is_unpacked_again(tmp_path):
    wheel, target = tmp_path / "w.whl", tmp_path / "unpacked" / "w"
    first = _wheel(wheel, {"pkg/a.py": "old\n"})
    kernel_wheels.unpack_once(wheel, first, target)
    assert (target / "pkg" / "a.py").read_text() == "old\n"
    # A new pin (the key: the wheel's sha256): the tree is made again from the new wheel.
    second = _wheel(wheel, {"pkg/a.py": "new\n"})
    kernel_wheels.unpack_once(wheel, second, target)
    assert (target / "pkg" / "a.py").read_text() == "new\n"
    assert (target / ".complete").read_text() == second
    # A tree left without its stamp (a killed run) is not trusted.
    (target / ".complete").unlink()
    (target / "pkg" / "a.py").write_text("torn\n")
    kernel_wheels.unpack_once(wheel, second, target)
    assert (target / "pkg" / "a.py").read_text() == "new\n"
    # A wheel that is not the pinned file is refused, and the tree is kept.
    with pytest.raises(FileNotFoundError, match="is not the pinned file"):
        kernel_wheels.unpack_once(wheel, first, target)
    assert (target / ".complete").read_text() == second


def cubins(track: str, arch: str, folder: Path) -> list[Path]:
    """The arch's cubins of a track's common_ops, as `check.scan` extracts them."""
    machine, _, sass = ARCHES[arch]
    library = (
        kernel_wheels.unpacked(TRACKS[track][1], machine) / "sgl_kernel" / "sm100"
    ) / "common_ops.abi3.so"
    return sorted(extract(library, sass, folder), key=lambda p: p.stat().st_size)


@pytest.mark.parametrize("track", TRACKS)
def test_a_cubin_that_declares_no_external_function_holds_no_stub(track, tmp_path):
    """What lets `check.scan` skip nvdisasm on most cubins, held on the real
    wheels: a cubin whose ELF declares no external function disassembles to no
    CALL.ABS and so to no stub, and nvdisasm finds exactly the functions its
    section names give (its three smallest such cubins; docs/benchmarks.md has
    the whole libraries, the same map either way). The cubins that do declare
    one (vprintf: the stubs' message) are the ones nvdisasm still reads."""
    read = cubins(track, "amd64", tmp_path / "cubins")
    outlines = {c: check.outline(c.read_bytes()) for c in read}
    assert all(o is not None for o in outlines.values())
    quiet = [c for c in read if not outlines[c][1]]
    calling = [c for c in read if outlines[c][1]]
    assert quiet and calling, (len(quiet), len(calling))
    assert all("vprintf" in outlines[c][1] for c in calling)
    for cubin in [c for c in quiet if outlines[c][0]][:3]:
        sass = subprocess.run(
            [tool("nvdisasm"), "-ndf", "-c", str(cubin)],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        ).stdout
        assert "CALL.ABS" not in sass, cubin.name
        assert check.parse_sass(sass) == dict.fromkeys(outlines[cubin][0], False)
    # The stubs are all in cubins nvdisasm reads.
    stubs = {name for name, stub in found(TRACKS[track][1], "amd64").items() if stub}
    assert stubs and stubs <= {f for c in calling for f in outlines[c][0]}


def test_anything_but_a_cubin_s_elf_is_left_to_nvdisasm(tmp_path):
    """outline answers None (scan then runs nvdisasm) for what is not a
    little-endian ELF64 or is cut short, never a guess."""
    cubin = cubins("pinned", "arm64", tmp_path / "c")[0]
    data = cubin.read_bytes()
    assert check.outline(data) is not None
    assert check.outline(b"") is None
    assert check.outline(b"\x7fELF\x01\x01" + data[6:]) is None  # ELF32
    assert check.outline(data[:64]) is None  # the header, no sections
