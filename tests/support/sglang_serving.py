"""sglang's real OpenAI serving code (serving_chat.py and what it calls), on a CPU.

`tree(version, patched)` unpacks a cached sglang wheel (tests/support/wheels.py)
into $SM12X_CACHE/sglang-serving/ and, when asked, patches it with
scripts/apply-patches, the script the image build runs. The folder's name
carries a digest of the patch series, so editing a patch rebuilds it.

`load(site)` imports, from that tree, `OpenAIServingChat` and everything its
chat path runs: the protocol models, the DeepSeek-V4 encoder, the `deepseek-v4`
reasoning parser, the `deepseekv4` tool-call detector, the SSE helpers, usage
accounting. Only what belongs to the engine behind the serving layer, which the
stand-in engine (dspark_engine.py) replaces, is stubbed, because importing it
drags in the scheduler, the model configs and CUDA-only packages:

- `sglang.srt.managers.io_struct`: `GenerateReqInput`, the request the
  tokenizer manager receives (here a plain record of the keyword arguments);
- `sglang.srt.server_args.ServerArgs` (serving_base only tests isinstance);
- `sglang.srt.observability.req_time_stats.monotonic_time`;
- `xgrammar`, unless already imported: the grammar library; the stand-in
  engine does not constrain decoding, so only the names the parsers import
  exist (the real package costs the stand-in seconds at every start);
- `torchvision.io.decode_jpeg`, imported by sglang's utilities (torchvision
  would pull a CUDA torch).

`sglang` is registered as a bare package (sglang/__init__.py imports the whole
runtime), so each process holds one sglang tree: run one version per process.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support import wheels  # noqa: E402

APPLY = ROOT / "scripts" / "apply-patches"
PATCHES = ROOT / "patches" / "sglang"


def _series_digest(version: str) -> str:
    """What apply-patches would apply to `version`: patches.toml and the folder."""
    digest = hashlib.sha256((PATCHES / "patches.toml").read_bytes())
    folder = PATCHES / version
    for path in sorted(folder.glob("*.patch")) if folder.is_dir() else []:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def cache_root() -> Path:
    return Path(os.environ.get("SM12X_CACHE", ROOT / ".cache")) / "sglang-serving"


def tree(version: str, patched: bool) -> Path:
    """A site-packages folder holding sglang `version`, patched or pristine.

    Built once per cache and patch series, under a lock (several stand-in
    servers may start at once), into a temporary folder renamed into place, so
    an interrupted build never leaves half a tree.
    """
    label = f"{version}-patched-{_series_digest(version)}" if patched else f"{version}-pristine"
    site = cache_root() / label
    if (site / ".complete").exists():
        return site
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (site / ".complete").exists():
            return site
        building = cache_root() / f".{label}.{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        wheels.unpack("sglang", version, building, members=("sglang/",))
        if patched:
            done = subprocess.run(
                [sys.executable, str(APPLY), "--site-packages", str(building)],
                capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                shutil.rmtree(building, ignore_errors=True)
                raise RuntimeError(f"scripts/apply-patches failed on sglang {version}:\n"
                                   f"{done.stdout}{done.stderr}")
        (building / ".complete").write_text(f"{time.ctime()}\n")
        shutil.rmtree(site, ignore_errors=True)
        building.rename(site)
    return site


@dataclass(frozen=True)
class Serving:
    """The real modules of one sglang tree."""

    version: str
    site: Path
    serving_chat: types.ModuleType
    protocol: types.ModuleType
    encoding_dsv4: types.ModuleType
    sse_utils: types.ModuleType
    FunctionCallParser: type
    ReasoningParser: type
    detokenizer_source: Path
    utils: types.ModuleType  # sglang/utils.py (find_printable_text)

    @property
    def OpenAIServingChat(self) -> type:  # noqa: N802 (sglang's name)
        return self.serving_chat.OpenAIServingChat


def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


class GenerateReqInput:
    """Stands in for sglang's io_struct.GenerateReqInput: the serving layer only
    builds it and hands it to the tokenizer manager, which is emulated."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


class EmbeddingReqInput(GenerateReqInput):
    pass


class ServerArgs:
    """isinstance target only (serving_base); the emulated manager's args are not one."""


def _stub_engine_side() -> list[str]:
    """Install the stubs; returns the third-party module names stubbed, which
    are only needed while sglang's modules import (see load)."""
    # Nothing here may reach a model hub (sglang >= 0.5.18 looks for the
    # checkpoint's encoder file there when it is not on disk): fail at once.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from pydantic import BaseModel, ConfigDict

    # transformers decides whether torchvision exists when first imported; it
    # must see none, or it would load its image stack through the stub below.
    import transformers.utils.chat_template_utils  # noqa: F401

    class StructuralTag(BaseModel):
        model_config = ConfigDict(extra="allow")

    def grammar_format(name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (StructuralTag,), {})

    # A real xgrammar or torchvision already imported in this process stays.
    stubbed = []
    if "xgrammar" not in sys.modules:
        stubbed += ["xgrammar", "xgrammar.structural_tag"]
        structural_tag = _module("xgrammar.structural_tag", __getattr__=grammar_format)
        _module("xgrammar", StructuralTag=StructuralTag, structural_tag=structural_tag,
                __path__=[])
    if "torchvision" not in sys.modules and importlib.util.find_spec("torchvision") is None:
        stubbed += ["torchvision", "torchvision.io"]
        io = _module("torchvision.io", decode_jpeg=lambda *args, **kwargs: None)
        _module("torchvision", io=io, __path__=[])
    _module("sglang.srt.managers.io_struct", GenerateReqInput=GenerateReqInput,
            EmbeddingReqInput=EmbeddingReqInput)
    _module("sglang.srt.server_args", ServerArgs=ServerArgs)
    _module("sglang.srt.observability.req_time_stats", monotonic_time=time.monotonic)
    return stubbed


def load(site: Path, replace: bool = False) -> Serving:
    """Import the serving modules of the sglang tree in `site`.

    A process holds one tree: loading another raises, unless `replace`, which
    drops every sglang module first (objects from the old tree must not be
    used after that)."""
    site = Path(site)
    package_dir = site / "sglang"
    existing = sys.modules.get("sglang")
    if existing is not None and getattr(existing, "__sm12x_tree__", None) != str(site):
        if not replace and any(n.startswith("sglang.srt.entrypoints") for n in sys.modules):
            raise RuntimeError(f"this process already imported sglang from "
                               f"{existing.__sm12x_tree__}; load {site} in another process")
        for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
            del sys.modules[name]
    # FastAPI deprecates the ORJSONResponse sglang answers errors with: noise here
    warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")
    # sglang reads the deprecated max_tokens itself, for every request
    warnings.filterwarnings("ignore", message="max_tokens is deprecated")
    stubbed = []
    if "sglang" not in sys.modules:
        package = _module("sglang", __path__=[str(package_dir)], __sm12x_tree__=str(site))
        package.__file__ = str(package_dir / "__init__.py")
        stubbed = _stub_engine_side()
    try:
        return _import(site, package_dir)
    finally:
        # sglang took what it needs from them at import. Left in sys.modules,
        # a stub module would mislead other code in this process (transformers
        # asks whether torchvision is installed when lm-eval loads it).
        for name in stubbed:
            sys.modules.pop(name, None)


def _import(site: Path, package_dir: Path) -> Serving:
    from importlib.metadata import distributions

    dists = list(distributions(name="sglang", path=[str(site)]))
    version = dists[0].version if dists else "unknown"
    return Serving(
        version=version,
        site=site,
        serving_chat=importlib.import_module("sglang.srt.entrypoints.openai.serving_chat"),
        protocol=importlib.import_module("sglang.srt.entrypoints.openai.protocol"),
        encoding_dsv4=importlib.import_module("sglang.srt.entrypoints.openai.encoding_dsv4"),
        sse_utils=importlib.import_module("sglang.srt.entrypoints.openai.sse_utils"),
        FunctionCallParser=importlib.import_module(
            "sglang.srt.function_call.function_call_parser").FunctionCallParser,
        ReasoningParser=importlib.import_module(
            "sglang.srt.parser.reasoning_parser").ReasoningParser,
        detokenizer_source=package_dir / "srt" / "managers" / "detokenizer_manager.py",
        utils=importlib.import_module("sglang.utils"),
    )
