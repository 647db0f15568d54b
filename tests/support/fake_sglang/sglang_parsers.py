"""Import sglang's real DeepSeek-V4 parsers and OpenAI protocol models without torch.

The pinned sglang wheel (versions.env SGLANG_VERSION, cached by
tests/support/wheels.py) is unpacked once into $SM12X_CACHE/sglang-parsers/<v>/.
`sglang` is registered as a bare package whose __path__ points there, so
sglang/__init__.py (which imports torch) never runs, and `xgrammar` (its real
package imports torch too) is stubbed with the one name sglang's protocol
module uses, a `StructuralTag` pydantic model.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sm12x.versions import load_versions  # noqa: E402
from tests.support import wheels  # noqa: E402

# The whole package: what the parsers import reaches into many corners of
# sglang/srt (environ.py alone imports debug_utils); unpacked once, ~1 s later.
_MEMBERS = ("sglang/",)


@dataclass(frozen=True)
class Sglang:
    version: str
    FunctionCallParser: type
    ReasoningParser: type
    protocol: types.ModuleType
    build_sse_content: object


def _stub_xgrammar() -> None:
    if "xgrammar" in sys.modules:
        return
    from pydantic import BaseModel, ConfigDict

    class StructuralTag(BaseModel):
        model_config = ConfigDict(extra="allow")

    module = types.ModuleType("xgrammar")
    module.StructuralTag = StructuralTag
    sys.modules["xgrammar"] = module


def _tree(version: str) -> Path:
    cache = Path(os.environ.get("SM12X_CACHE", ROOT / ".cache"))
    dest = cache / "sglang-parsers" / version
    marker = dest / ".complete"
    if not marker.exists():
        wheels.unpack("sglang", version, dest, members=_MEMBERS)
        marker.write_text("ok\n")
    return dest


def load(version: str | None = None) -> Sglang:
    """The real parsers of sglang `version` (default: versions.env SGLANG_VERSION)."""
    version = version or load_versions()["SGLANG_VERSION"]
    tree = _tree(version)
    existing = sys.modules.get("sglang")
    if existing is None or getattr(existing, "__sm12x_tree__", None) != str(tree):
        for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
            del sys.modules[name]
        package = types.ModuleType("sglang")
        package.__path__ = [str(tree / "sglang")]
        package.__sm12x_tree__ = str(tree)
        sys.modules["sglang"] = package
    _stub_xgrammar()
    fcp = importlib.import_module("sglang.srt.function_call.function_call_parser")
    rp = importlib.import_module("sglang.srt.parser.reasoning_parser")
    protocol = importlib.import_module("sglang.srt.entrypoints.openai.protocol")
    sse = importlib.import_module("sglang.srt.entrypoints.openai.sse_utils")
    return Sglang(
        version=version,
        FunctionCallParser=fcp.FunctionCallParser,
        ReasoningParser=rp.ReasoningParser,
        protocol=protocol,
        build_sse_content=sse.build_sse_content,
    )
