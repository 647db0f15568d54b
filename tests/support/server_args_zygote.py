"""server_args_probe.py --serve: one sglang import, a fork per validation.

Importing a track's sglang (torch, `sglang.srt.server_args`, the 0.5.23 resolution
pipeline, DSpark's config) is about 12 of the probe's 15 seconds on this kind, and
test_sglang_validates_recipes runs ~40 validations per run. A zygote imports once,
then forks a child per request: the child sets the request's environment and
working directory, runs the same `answer()` as a one-shot probe and exits, so no
request sees another's state (sglang mutates os.environ and logging while it
resolves; all of that dies with the child).

What the import could have depended on is the zygote's key, never assumed:
- the interpreter, sglang tree and flashinfer tree (the patch series hash is in
  the tree's path): server_args_check.py keys zygotes by them; the stubbed GPU and
  count too if the import asked torch.cuda anything ("device_asked");
- every environment variable Python code read while importing, recorded here by a
  recording `os.environ` and returned in the hello line. A request is sent to this
  zygote only if it has the same value (or the same absence) for each one, and only
  if nothing iterated the environment during the import (then the whole
  environment must match). A scan whose code reads only one prefix (KNOWN_SCANS,
  checked by the scanning frame's file and function) makes every variable with
  that prefix part of the match instead. HOME and PATH are the sandbox: a request gets its own
  (its work folder; its stand-in nvidia-smi first on PATH) and the zygote keeps
  them out of the match.
What a module imports after the zygote's import list is imported in the child, with
the request's environment, exactly as a one-shot probe does.

Two stages (the hello's "stage"): a "full" zygote imports PREIMPORT (sglang and
all it pulls in); a "base" one only BASE, the third-party libraries sglang's import
graph loads (about 8 of its 11 CPU seconds here), so its child imports sglang and
flashinfer itself with the request's environment (about 3.5 s). server_args_zygotes.py sends a request
whose environment differs from a full zygote's in a variable sglang's import read
to a base zygote instead of importing everything again; the same read record keys
both.

Protocol (one JSON object a line): the caller writes a hello {"gpu", "gpus", "stage"}; the
zygote answers {"ready": true, "reads": {name: value or null}, "prefixes": [...],
"unknown_scans": [...], "imported": [...], "device_asked": [...]}. Then per request {"env": {...}, "cwd": "...", "request": {...}}
it answers the probe's object plus "log" (the child's stdout and stderr).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import MutableMapping

# Imported before forking: what every validation imports (server_args' own import
# graph) plus the two modules sglang imports lazily on every DSPARK resolution
# (0.5.23's resolve_once pipeline; DSpark's config). A name missing on a track is
# skipped: the child then imports what it needs itself.
PREIMPORT = (
    "sglang.srt.server_args",
    "sglang.srt.arg_groups.pipeline",
    "sglang.srt.speculative.dspark_components.dspark_config",
)
# A base zygote's import list: the third-party packages sglang.srt.server_args and the
# DSPARK resolution import (sglang's own modules and what they read stay in the child).
BASE = (
    "torch",
    "transformers",
    "openai",
    "scipy.optimize",
    "sympy",
    "pandas",
    "networkx",
    "sklearn",
    "triton",
    "compressed_tensors",
    "fastapi",
    "requests",
)  # not flashinfer: its import asks torch.cuda for the device, making the GPU a key
SANDBOX = ("HOME", "PATH")


# Scans of the whole environment during the import that read only names with a
# prefix, by their code (environ.py rewrites SGL_* to SGLANG_*: 0.5.17 in
# `_convert_SGL_to_SGLANG`, 0.5.23 in `_handle_deprecated_envs`; networkx's
# backends read NETWORKX_BACKEND_PRIORITY_*); test_server_args_zygote.py reads
# each function to hold this. A scan from anywhere else makes the whole
# environment part of the key.
KNOWN_SCANS = {
    ("sglang/srt/environ.py", "_convert_SGL_to_SGLANG"): "SGL_",
    ("sglang/srt/environ.py", "_handle_deprecated_envs"): "SGL_",
    # (3.11 runs the dict comprehension of its _set_configs_from_environment as a frame)
    ("networkx/utils/backends.py", "<dictcomp>"): "NETWORKX_BACKEND_PRIORITY_",
}
_MAPPING_ABC = ("_collections_abc",)


def _caller() -> tuple[str, str]:
    """(file, function) of the first frame outside this file and collections.abc."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name != __file__ and not any(m in name for m in _MAPPING_ABC):
            return name, frame.f_code.co_name
        frame = frame.f_back
    return "", ""


class RecordingEnviron(MutableMapping):
    """os.environ that notes, while `recording` is on, each variable read by name and
    each scan of the whole environment (as a prefix where KNOWN_SCANS knows it)."""

    def __init__(self, real):
        self.real = real
        self.recording = True
        self.reads: set[str] = set()
        self.prefixes: set[str] = set()
        self.unknown_scans: list[str] = []

    def _note(self, key):
        if not (self.recording and isinstance(key, str)):
            return
        # items()/values() read every key on behalf of a scan, already recorded as one
        caller = sys._getframe(2).f_code.co_filename  # not inside the generator below
        if any(m in caller for m in _MAPPING_ABC):
            return
        self.reads.add(key)

    def _scan(self):
        if not self.recording:
            return
        filename, function = _caller()
        for (suffix, name), prefix in KNOWN_SCANS.items():
            if filename.endswith(suffix) and function == name:
                self.prefixes.add(prefix)
                return
        self.unknown_scans.append(f"{filename}:{function}")

    def __getitem__(self, key):
        self._note(key)
        return self.real[key]

    def get(self, key, default=None):
        self._note(key)
        return self.real.get(key, default)

    def __contains__(self, key):
        self._note(key)
        return key in self.real

    def __iter__(self):
        self._scan()
        return iter(self.real)

    def __len__(self):
        return len(self.real)

    def __setitem__(self, key, value):
        self.real[key] = value

    def __delitem__(self, key):
        del self.real[key]

    def copy(self):
        self._scan()
        return dict(self.real)


def _child(answer, request: dict, import_warnings: list[str]) -> bytes:
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        out = answer(request["request"])
        # what sglang logged while the zygote imported it, which a one-shot probe
        # collects during its own import
        out["warnings"] = [*import_warnings, *out["warnings"]]
        sys.stdout.flush()
        sys.stderr.flush()
        log.seek(0)
        out["log"] = log.read().decode(errors="replace")
    return json.dumps(out).encode()


def _run(answer, request: dict, import_warnings: list[str]) -> dict:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the zygote's loop
        os.close(read)
        code = 0
        try:
            data = _child(answer, request, import_warnings)
            with os.fdopen(write, "wb") as pipe:
                pipe.write(data)
        except BaseException:  # noqa: BLE001 - reported by the parent as a crash
            code = 70
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {
            "ok": False,
            "type": "ProbeCrash",
            "error": f"the zygote's child ended with wait status {status} and no answer",
            "traceback": "",
            "warnings": [],
            "log": "",
        }
    return json.loads(data)


def _watch_device() -> set[str]:
    """Note which stubbed torch.cuda answers the import asks for: if none, the GPU
    the zygote was started with is not an input of its import."""
    import torch

    asked: set[str] = set()
    for name in STUBBED:
        real = getattr(torch.cuda, name)

        def watched(*args, _real=real, _name=name, **kwargs):
            if asked is not None and WATCHING[0]:
                asked.add(_name)
            return _real(*args, **kwargs)

        setattr(torch.cuda, name, watched)
    return asked


# server_args_probe.stub_device's answers; the child stubs them again for its GPU.
STUBBED = (
    "is_available",
    "device_count",
    "current_device",
    "get_device_name",
    "get_device_capability",
    "get_device_properties",
    "mem_get_info",
)
WATCHING = [True]


def serve(answer, stub_device) -> int:
    # The answers get their own copy of stdout; what sglang prints while importing
    # (some of its deprecation notices are print()s) goes to stderr instead.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    hello = json.loads(sys.stdin.readline())
    stub_device(hello["gpu"], hello["gpus"])
    asked = _watch_device()
    before = dict(os.environ)  # the import's input: it sets variables of its own
    recorder = RecordingEnviron(os.environ)
    # Replaced, not cleared (B003's concern): every value stays; os.getenv reads
    # this global too, and the recorder writes through to the real environment.
    os.environ = recorder  # noqa: B003
    imported = []
    collect = answer.__globals__["_Collect"]()
    logging.getLogger("sglang").addHandler(collect)
    from sm12x.selftest.env import stub_torchvision

    stub_torchvision()
    sys.meta_path.insert(0, answer.__globals__["_CudaOnly"]())
    for name in BASE if hello.get("stage") == "base" else PREIMPORT:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        imported.append(name)
    recorder.recording = False
    WATCHING[0] = False
    logging.getLogger("sglang").removeHandler(collect)
    reads = {name: before.get(name) for name in sorted(recorder.reads)}
    hello = {
        "ready": True,
        "reads": reads,
        "prefixes": sorted(recorder.prefixes),
        "unknown_scans": recorder.unknown_scans,
        "imported": imported,
        "device_asked": sorted(asked),
    }
    print(json.dumps(hello), file=answers, flush=True)
    for line in sys.stdin:
        if line.strip():
            answer_line = json.dumps(_run(answer, json.loads(line), collect.messages))
            print(answer_line, file=answers, flush=True)
    return 0
