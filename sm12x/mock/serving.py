"""sglang's real OpenAI serving code (serving_chat.py and what it calls), on a CPU.

`locate(version, patched)` is where that code comes from: the installed sglang
when it is that release, patched by scripts/apply-patches (its record,
sglang/.sm12x-patches.json) when `patched` (the image), else
`tree(version, patched)`, which unpacks the sglang wheel (sm12x.mock.wheels,
downloaded unless SM12X_OFFLINE=1) into <cache>/sglang-serving/ and, when
asked, patches it in process with sm12x.patches.apply, what the image build's
scripts/apply-patches runs. The folder's name carries a digest of the patch
series, so editing a patch rebuilds it.

`load(site)` imports, from that tree, `OpenAIServingChat` and everything its
chat path runs: the protocol models, the DeepSeek-V4 encoder, the `deepseek-v4`
reasoning parser, the `deepseekv4` tool-call detector, the SSE helpers, usage
accounting. Only what belongs to the engine behind the serving layer, which the
stand-in engine (sm12x.mock.engine) replaces, is stubbed, because importing it
drags in the scheduler, the model configs and CUDA-only packages:

- `sglang.srt.managers.io_struct`: `GenerateReqInput`, the request the
  tokenizer manager receives (here a plain record of the keyword arguments);
- `sglang.srt.server_args.ServerArgs` (serving_base only tests isinstance), up
  to 0.5.18; from 0.5.23 the serving code reads the published configuration
  (`runtime_context.get_serving()`), so the real ServerArgs is built from the
  stand-in's server arguments and published (`Serving.publish`);
- `sglang.srt.observability.req_time_stats.monotonic_time`;
- `xgrammar`, unless already imported: the grammar library; the stand-in
  engine does not constrain decoding, so only the names the parsers import
  exist (the real package costs the stand-in seconds at every start);
- `torchvision.io.decode_jpeg`, imported by sglang's utilities, and from 0.5.23
  every `torchvision.*` its multimodal configs import (placeholders,
  sm12x.selftest.env), only while sglang's modules import (torchvision would
  pull a CUDA torch).

DeepSeek-V4's encoder: up to 0.5.18 sglang carries DeepSeek's reference encoder
(`encoding_dsv4`); 0.5.23 encodes through the deepseek-recipe package instead
and has none, so `reference_encoder()` loads the pinned track's copy (the
model writes what it writes whatever serves it).

`sglang` is registered as a bare package (sglang/__init__.py imports the whole
runtime), so each process holds one sglang tree: run one version per process.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import sys
import time
import types
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sm12x.mock import wheels
from sm12x.patches import apply as patch_apply
from sm12x.paths import data_path
from sm12x.selftest.env import _TorchvisionStub
from sm12x.versions import load_versions

# What the image records in the sglang it patched (scripts/apply-patches RECORD).
RECORD = ".sm12x-patches.json"
SOURCES = ("auto", "installed", "wheel")


def _patches() -> Path:
    return data_path("patches") / "sglang"


def _series_digest(version: str) -> str:
    """What apply-patches would apply to `version`: patches.toml and the folder."""
    digest = hashlib.sha256((_patches() / "patches.toml").read_bytes())
    folder = _patches() / version
    for path in sorted(folder.glob("*.patch")) if folder.is_dir() else []:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def cache_root() -> Path:
    return wheels.cache_root() / "sglang-serving"


def installed(version: str, patched: bool) -> Path | None:
    """The site-packages folder of the sglang this Python would import, when it
    can stand for the tree of (version, patched): that release, patched by
    scripts/apply-patches (its record) when `patched`, unrecorded when not.
    A tree of this cache on sys.path (the tests put some there) does not count."""
    from importlib.machinery import PathFinder
    from importlib.metadata import distributions

    spec = PathFinder.find_spec("sglang")  # searches sys.path, imports nothing
    if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
        return None
    package_dir = Path(spec.origin).parent
    site = package_dir.parent
    if site.resolve().is_relative_to(cache_root().resolve()):
        return None
    dists = list(distributions(name="sglang", path=[str(site)]))
    if not dists or dists[0].version != version:
        return None
    return site if (package_dir / RECORD).is_file() == patched else None


def locate(version: str, patched: bool, source: str = "auto") -> Path:
    """Where sglang `version`'s serving code comes from: `source` "installed" (the
    image's sglang, refused when it is not that release, so patched), "wheel"
    (`tree`), or "auto": the installed one when it fits, else the wheel's tree."""
    wheels.guard(f"run sglang {version}'s serving code")
    if source not in SOURCES:
        raise ValueError(f"unknown sglang source {source!r}; known: {', '.join(SOURCES)}")
    if source != "wheel":
        found = installed(version, patched)
        if found is not None:
            return found
        if source == "installed":
            raise RuntimeError(
                f"no installed sglang {version} {'patched by scripts/apply-patches' if patched else 'unpatched'}"
                " on this Python's path: install it, or use the wheel's code (--sglang-source wheel)"
            )
    return tree(version, patched)


def tree(version: str, patched: bool) -> Path:
    """A site-packages folder holding sglang `version`, patched or pristine.

    Built once per cache and patch series, under a lock (several stand-in
    servers may start at once), into a temporary folder renamed into place, so
    an interrupted build never leaves half a tree.
    """
    wheels.guard(f"run sglang {version}'s serving code")
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
            said: list[str] = []
            try:
                patch_apply.run(str(building), _patches(), say=said.append)
            except patch_apply.PatchError as err:
                shutil.rmtree(building, ignore_errors=True)
                lines = "".join(f"{line}\n" for line in said)
                raise RuntimeError(
                    f"apply-patches failed on sglang {version}:\n{lines}apply-patches: error: {err}"
                ) from None
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
    encoding_dsv4: types.ModuleType | None  # None from 0.5.23 (reference_encoder())
    sse_utils: types.ModuleType
    FunctionCallParser: type
    ReasoningParser: type
    detokenizer_source: Path
    utils: types.ModuleType  # sglang/utils.py (find_printable_text)

    @property
    def OpenAIServingChat(self) -> type:  # noqa: N802 (sglang's name)
        return self.serving_chat.OpenAIServingChat

    @property
    def publishes_config(self) -> bool:
        return publishes_config(self.site / "sglang")

    def publish(self, args) -> None:
        """sglang >= 0.5.23: publish the real ServerArgs for the stand-in's server
        arguments (a dataclass of flag values, sm12x.mock.engine.ServerArgsView)."""
        if not self.publishes_config:
            return
        from sglang.srt.runtime_context import publish
        from sglang.srt.server_args import prepare_server_args

        argv = ["--model-path", "dummy"]
        for item in dataclasses.fields(args):
            value = getattr(args, item.name)
            if (
                value is None
                or value is False
                or value == item.default
                and item.name
                not in ("reasoning_parser", "tool_call_parser", "speculative_algorithm")
            ):
                continue
            flag = "--" + item.name.replace("_", "-")
            argv += (
                [flag]
                if value is True
                else [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
            )
        publish(prepare_server_args(argv), role="tokenizer")


def publishes_config(package_dir: Path) -> bool:
    """Whether this sglang's chat serving code reads the published configuration
    (`get_serving()`, 0.5.23; 0.5.17-0.5.18 have the function but not this use)."""
    chat = package_dir / "srt" / "entrypoints" / "openai" / "serving_chat.py"
    return chat.is_file() and "get_serving()" in chat.read_text(encoding="utf-8")


@functools.cache
def reference_encoder() -> types.ModuleType:
    """DeepSeek's reference DeepSeek-V4 encoder, as the pinned track's sglang ships it
    (encoding_dsv4.py: the standard library only), loaded on its own."""
    version = load_versions()["SGLANG_VERSION"]
    member = "sglang/srt/entrypoints/openai/encoding_dsv4.py"
    with zipfile.ZipFile(wheels.wheel("sglang", version)) as archive:
        source = archive.read(member).decode()
    module = types.ModuleType("sm12x_reference_encoding_dsv4")
    module.__file__ = f"sglang-{version}.whl/{member}"
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 (sglang's code)
    return module


def tree_package(site: Path) -> types.ModuleType:
    """`sglang` registered as the bare package of the tree in `site`, without
    running its __init__ (which imports the whole runtime). It carries a real
    spec, as an imported package does: importlib.util.find_spec("sglang") in
    this process (launch's installed_sglang) raises on a module without one."""
    package_dir = Path(site) / "sglang"
    spec = importlib.util.spec_from_file_location(
        "sglang", package_dir / "__init__.py", submodule_search_locations=[str(package_dir)]
    )
    assert spec is not None
    package = importlib.util.module_from_spec(spec)
    package.__sm12x_tree__ = str(site)  # type: ignore[attr-defined]
    sys.modules["sglang"] = package
    return package


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


def _stub_engine_side(real_server_args: bool) -> list[str]:
    """Install the stubs; returns the third-party module names stubbed, which
    are only needed while sglang's modules import (see load)."""
    # Nothing here may reach a model hub (sglang >= 0.5.18 looks for the
    # checkpoint's encoder file there when it is not on disk): fail at once.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # transformers decides whether torchvision exists when first imported; it
    # must see none, or it would load its image stack through the stub below.
    import transformers.utils.chat_template_utils  # noqa: F401
    from pydantic import BaseModel, ConfigDict

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
        _module("xgrammar", StructuralTag=StructuralTag, structural_tag=structural_tag, __path__=[])
    if "torchvision" not in sys.modules and importlib.util.find_spec("torchvision") is None:
        stubbed.append("torchvision")  # with every torchvision.* the import brings
        if real_server_args:
            # 0.5.23's configs import torchvision.transforms too (with its own
            # transformers, whose image processors need no torchvision).
            sys.meta_path.insert(0, _TorchvisionStub())
        else:
            # Up to 0.5.18 only torchvision.io.decode_jpeg: a fuller stub would
            # make transformers 5.12 register image processors it cannot load.
            io = _module("torchvision.io", decode_jpeg=lambda *args, **kwargs: None)
            _module("torchvision", io=io, __path__=[])
    _module(
        "sglang.srt.managers.io_struct",
        GenerateReqInput=GenerateReqInput,
        EmbeddingReqInput=EmbeddingReqInput,
    )
    if not real_server_args:
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
            raise RuntimeError(
                f"this process already imported sglang from "
                f"{existing.__sm12x_tree__}; load {site} in another process"
            )
        for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
            del sys.modules[name]
    # FastAPI deprecates the ORJSONResponse sglang answers errors with: noise here
    warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")
    # sglang reads the deprecated max_tokens itself, for every request
    warnings.filterwarnings("ignore", message="max_tokens is deprecated")
    # Its AWQ and GGUF modules warn at import on a machine without a GPU backend
    # ("Only CUDA, HIP and XPU support AWQ currently.", "Only CUDA, MUSA and NPU
    # support GGUF quantization currently."): true on every CPU, nothing to do.
    warnings.filterwarnings(
        "ignore", message=r"Only CUDA\b.* support (AWQ|GGUF)\b", category=UserWarning
    )
    stubbed = []
    if "sglang" not in sys.modules:
        tree_package(site)
        stubbed = _stub_engine_side(real_server_args=publishes_config(package_dir))
    try:
        return _import(site, package_dir)
    finally:
        # sglang took what it needs from them at import. Left in sys.modules,
        # a stub module would mislead other code in this process (transformers
        # asks whether torchvision is installed when lm-eval loads it).
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _TorchvisionStub)]
        for name in stubbed:
            for loaded in [n for n in sys.modules if n == name or n.startswith(name + ".")]:
                sys.modules.pop(loaded, None)


def _import(site: Path, package_dir: Path) -> Serving:
    from importlib.metadata import distributions

    dists = list(distributions(name="sglang", path=[str(site)]))
    version = dists[0].version if dists else "unknown"
    if publishes_config(package_dir):
        # Imported while the stubs stand: Serving.publish builds the real ServerArgs.
        importlib.import_module("sglang.srt.server_args")
    return Serving(
        version=version,
        site=site,
        serving_chat=importlib.import_module("sglang.srt.entrypoints.openai.serving_chat"),
        protocol=importlib.import_module("sglang.srt.entrypoints.openai.protocol"),
        encoding_dsv4=(
            importlib.import_module("sglang.srt.entrypoints.openai.encoding_dsv4")
            if (package_dir / "srt/entrypoints/openai/encoding_dsv4.py").is_file()
            else None
        ),
        sse_utils=importlib.import_module("sglang.srt.entrypoints.openai.sse_utils"),
        FunctionCallParser=importlib.import_module(
            "sglang.srt.function_call.function_call_parser"
        ).FunctionCallParser,
        ReasoningParser=importlib.import_module(
            "sglang.srt.parser.reasoning_parser"
        ).ReasoningParser,
        detokenizer_source=package_dir / "srt" / "managers" / "detokenizer_manager.py",
        utils=importlib.import_module("sglang.utils"),
    )
