"""Which sglang-kernel library the sm_12x path loads, and whether its kernels run there.

Standard library only, Python >= 3.8: scripts/image-build imports it (the image
copies it to /opt/sm12x/scripts/kernel_check.py) before sm12x is installed.

- `loader_choice`: the library sgl_kernel's own loader (its load_utils.py)
  picks for a compute capability, read by running that loader against a
  stand-in `torch` that reports the capability, stopped where it would load
  the file. A wheel whose loader picks another file moves the check with it.
- `kernels`: every function in a cubin, from nvdisasm's SASS, with whether it
  is a disabled-arch stub: the kernel prints and traps (a CALL.ABS.NOINC to
  vprintf straight before BPT.TRAP, CUTLASS's "Attempting to use ... without
  CUTE_ARCH_MMA_SM90A_ENABLED") and carries no tensor-core MMA instruction,
  because the arch it was compiled for has none of the MMA it was written for.
  Recognised by that body, never by the kernel's name. A cubin whose ELF
  declares no external function (`outline`) cannot hold that call, so its
  functions are read from its section names and nvdisasm skips it: most of a
  library's cubins, most of the check's time.
- `CALLED`: the sgl_kernel ops sglang's DeepSeek-V4 path calls on sm_12x, each
  with the mangled-name pattern of its kernels and where sglang calls it.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

# (op, pattern of its kernels' mangled names, where sglang calls it). Read from
# sglang 0.5.17 and 0.5.23 (sglang/srt/...): the CUDA branch's `from sgl_kernel
# import ...` in the layers DeepSeek-V4 runs, where no sm_12x branch routes
# the op elsewhere. Attention (flash_mla_sm120.py routes it to flashinfer or
# Triton) and the JIT kernels (sglang/kernels/jit) are not sgl_kernel's.
CALLED = (
    ("rmsnorm", r"flashinfer4norm13RMSNormKernel", "layers/layernorm.py (CUDA: sgl_kernel)"),
    ("fused_add_rmsnorm", r"flashinfer4norm21FusedAddRMSNormKernel", "layers/layernorm.py"),
    ("silu_and_mul", r"act_and_mul_kernel.*4silu", "layers/activation.py (CUDA: sgl_kernel)"),
    ("topk_softmax", r"topkGatingSoftmax|moeSoftmax", "layers/moe/topk.py (AOT sgl_kernel)"),
    ("topk_sigmoid", r"topkGatingSigmoid", "layers/moe/topk.py (AOT sgl_kernel)"),
    ("top_k_renorm_prob", r"TopKRenormProbKernel", "layers/sampler.py (CUDA: sgl_kernel)"),
    ("top_p_renorm_prob", r"TopPRenormProbKernel", "layers/sampler.py (CUDA: sgl_kernel)"),
)

INSTRUCTION = re.compile(r"/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([^;]*?)\s*;")
FUNCTION = re.compile(r"^\.text\.(\S+):$")
MMA = re.compile(r"^(?:[HIQOBD]MMA|HGMMA|UTC\w*MMA)\b")

# The loader run against a stand-in torch that reports the capability; it stops
# with the path where it would load the library (spec_from_file_location).
PROBE = r"""
import ast, importlib.util, json, sys, types
package, major, minor = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
class Chosen(BaseException):
    pass
props = types.SimpleNamespace(major=major, minor=minor, name="sm12x probe")
cuda = types.SimpleNamespace(is_available=lambda: True, current_device=lambda: 0,
                             device_count=lambda: 1, get_device_properties=lambda d=0: props,
                             get_device_capability=lambda d=0: (major, minor))
torch = types.ModuleType("torch")
torch.cuda = cuda
torch.version = types.SimpleNamespace(cuda="13.0")
sys.modules["torch"] = torch
real = importlib.util.spec_from_file_location
spec = real("sgl_kernel.load_utils", package + "/load_utils.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
def chosen(name, location=None, *args, **kwargs):
    raise Chosen(str(location))
importlib.util.spec_from_file_location = chosen
tree = ast.parse(open(package + "/__init__.py").read())
calls = [node.value.func.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
         and any(isinstance(t, ast.Name) and t.id == "common_ops" for t in node.targets)
         and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)]
if not calls:
    print(json.dumps({"error": "__init__.py assigns common_ops from no call"}))
    sys.exit(0)
try:
    getattr(module, calls[0])()
except Chosen as path:
    print(json.dumps({"loader": calls[0], "path": str(path)}))
except Exception as exc:
    print(json.dumps({"error": f"{calls[0]}() loads nothing: {type(exc).__name__}"}))
else:
    print(json.dumps({"error": f"{calls[0]}() returned without loading a file"}))
"""


class CheckError(Exception):
    pass


def loader_choice(package: Path, capability: tuple[int, int], python: str = sys.executable) -> Path:
    """The file sgl_kernel's loader at `package` loads on a GPU of `capability`."""
    proc = subprocess.run(
        [python, "-S", "-c", PROBE, str(package), str(capability[0]), str(capability[1])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise CheckError(
            f"sgl_kernel's loader at {package} could not be read: "
            f"{(proc.stderr or proc.stdout).strip()[-300:]}"
        )
    answer = json.loads(lines[-1])
    if "error" in answer:
        raise CheckError(f"sgl_kernel's loader at {package}: {answer['error']}")
    return Path(answer["path"])


def parse_sass(text: str) -> dict[str, bool]:
    """{function: is a disabled-arch stub} from nvdisasm's output."""
    found: dict[str, bool] = {}
    name, ops = None, []  # type: tuple[str | None, list[str]]

    def close() -> None:
        if name is not None:
            found[name] = found.get(name, False) or is_stub(ops)

    for line in text.splitlines():
        head = FUNCTION.match(line)
        if head:
            close()
            name, ops = head.group(1), []
            continue
        match = INSTRUCTION.search(line)
        if match and name is not None:
            ops.append(match.group(1))
    close()
    return found


def is_stub(ops: list[str]) -> bool:
    traps = any(
        a.startswith("CALL.ABS.NOINC") and b.startswith("BPT.TRAP") for a, b in zip(ops, ops[1:])
    )
    return traps and not any(MMA.match(op) for op in ops)


def kernels(
    cuobjdump: str, nvdisasm: str, library: Path, arch: str, cache: Path | None = None
) -> dict[str, bool]:
    """{function: is a stub} over every `arch` cubin (sm_120a, ...) in `library`.
    cache: a folder keeping each answer under the hash of the library, the arch
    and this file (reading a library's SASS takes minutes on a small machine)."""
    key = None
    if cache is not None:
        digest = hashlib.sha256(Path(__file__).read_bytes() + arch.encode())
        with open(library, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        key = cache / f"kernels-{digest.hexdigest()[:24]}.json"
        if key.is_file():
            return json.loads(key.read_text())
    found = scan(cuobjdump, nvdisasm, library, arch)
    if key is not None:
        key.parent.mkdir(parents=True, exist_ok=True)
        partial = key.with_suffix(".partial")
        partial.write_text(json.dumps(found))
        partial.replace(key)
    return found


def outline(cubin: bytes) -> tuple[list[str], list[str]] | None:
    """(its functions, the external functions it declares) from a cubin's ELF,
    or None for anything but the little-endian ELF64 nvcc writes (nvdisasm reads
    that one). The functions are its `.text.<name>` sections, the headers
    nvdisasm prints; the external ones are its symbol table's undefined FUNC
    entries (vprintf, __assertfail, malloc), the only targets a CALL.ABS has in a
    cubin: calls inside it are CALL.REL. So a cubin declaring none holds no
    stub (`is_stub` needs the CALL.ABS.NOINC). Measured on all four sglang-kernel
    libraries of the tracks: the same map as nvdisasm's (docs/benchmarks.md)."""
    try:
        if cubin[:6] != b"\x7fELF\x02\x01":
            return None
        (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
        size, count, names_at = struct.unpack_from("<HHH", cubin, 0x3A)
        # (name, type, offset, size, link) of each section header
        sections = [struct.unpack_from("<II16xQQI", cubin, shoff + i * size) for i in range(count)]

        def text(table: int, at: int) -> str:
            start = sections[table][2] + at
            return cubin[start : cubin.index(b"\0", start)].decode()

        functions = [
            name[len(".text.") :]
            for name in (text(names_at, s[0]) for s in sections)
            if name.startswith(".text.")
        ]
        external = []
        for _, kind, offset, length, link in sections:
            if kind != 2:  # SHT_SYMTAB
                continue
            for at in range(offset, offset + length, 24):
                name, info, _, index = struct.unpack_from("<IBBH", cubin, at)
                if index == 0 and info & 0xF == 2 and name:  # undefined, STT_FUNC
                    external.append(text(link, name))
        return functions, sorted(external)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError):
        return None


def scan(cuobjdump: str, nvdisasm: str, library: Path, arch: str) -> dict[str, bool]:
    found: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="sm12x-cubins-") as tmp:
        proc = subprocess.run(
            [cuobjdump, "-xelf", "all", "-arch", arch, str(library.resolve())],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            raise CheckError(f"cuobjdump -xelf {library} failed: {proc.stderr.strip()[:300]}")
        for cubin in sorted(Path(tmp).glob(f"*.{arch}.cubin")):
            read = outline(cubin.read_bytes())
            if read is not None and not read[1]:
                for function in read[0]:
                    found[function] = found.get(function, False)
                continue
            dump = subprocess.run(
                [nvdisasm, "-ndf", "-c", str(cubin)], capture_output=True, text=True, timeout=900
            )
            if dump.returncode != 0:
                raise CheckError(
                    f"nvdisasm {cubin.name} of {library} failed: {dump.stderr.strip()[:300]}"
                )
            for function, stub in parse_sass(dump.stdout).items():
                found[function] = found.get(function, False) or stub
    return found


def judge_called(found: dict[str, bool]) -> tuple[list[str], list[str]]:
    """(errors, notes): a called op with no kernel, or with a stub among its kernels."""
    errors, notes = [], []
    for op, pattern, where in CALLED:
        matched = sorted(f for f in found if re.search(pattern, f))
        stubs = [f for f in matched if found[f]]
        if not matched:
            errors.append(f"{op} (called from sglang's {where}) has no kernel here")
        elif stubs:
            errors.append(
                f"{op} (called from sglang's {where}): {len(stubs)} of its "
                f"{len(matched)} kernels are trap stubs, e.g. {stubs[0][:120]}"
            )
        else:
            notes.append(f"{op}: {len(matched)} kernels")
    return errors, notes


def kernel_requirement(requires: list[str], names: tuple[str, ...]) -> str | None:
    """The exact version sglang's Requires-Dist pins a kernel distribution at."""
    for requirement in requires:
        match = re.match(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;,]+)\s*(;.*)?$", requirement)
        if match and re.sub(r"[-_.]+", "-", match.group(1)).lower() in names:
            return match.group(2)
    return None
