"""The metric names sglang (every track) and sglang-router export, read from their code.

deploy/monitoring/metrics.json is the table every dashboard query and alert
rule is checked against (sm12x.deploy.monitoring.check_names); tools/regen.py
writes it from here.

- sglang: each track's wheel (.cache/wheels, sm12x.mock.wheels), read with `ast`
  and never imported: every call `Counter|Gauge|Histogram|Summary|GaugeHistogram(
  name="sglang:...", ...)` under sglang/srt, with its documentation and the
  label names it adds to the collector's own (a literal list after
  `labels.keys()`). The collector's labels (model_name, engine_type, tp_rank,
  pp_rank, moe_ep_rank, and dp_rank under DP attention) are set at run time.
- sglang-router: its metrics live in the Rust extension module
  (sglang_router_rs.abi3.so, the `metrics` crate). The binary keeps each
  `describe_counter!/describe_gauge!/describe_histogram!(name, description)` as
  the name's bytes immediately followed by the description's, and every
  description starts with a capital letter while names are `smg_[a-z0-9_]+`:
  so a described metric is `smg_[a-z0-9_]+` ending where a capital begins. A
  name glued to other lowercase literals (a label name) never ends on a
  capital and is left out rather than guessed; a name that precedes an unrelated
  capitalised string is still a name the router registers. The wheel read is the one
  installed at SGLANG_ROUTER_VERSION (scripts/test installs it); its metric
  types are not in the binary, so the table gives none and the query check
  accepts a histogram's series names for them.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import re
import zipfile
from pathlib import Path

from sm12x.mock import wheels
from sm12x.versions import load_versions, tracks

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "deploy" / "monitoring" / "metrics.json"
TYPES = ("Counter", "Gauge", "Histogram", "Summary", "GaugeHistogram")
ROUTER_NAME = re.compile(rb"(smg_[a-z0-9_]+?)(?=[A-Z])")


def _call_type(node: ast.Call) -> str | None:
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return name if name in TYPES else None


def _extra_labels(node: ast.expr | None) -> list[str]:
    """The literal label names a metric adds (`list(labels.keys()) + ["x"]`, `[*labels, "x"]`)."""
    if node is None:
        return []
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, (ast.List, ast.Tuple)):
            found += [e.value for e in sub.elts if isinstance(e, ast.Constant)]
    return [str(v) for v in found]


def sglang_metrics(wheel: Path) -> dict[str, dict]:
    """Every `sglang:` metric one sglang wheel defines: name -> type, help, labels, file."""
    out: dict[str, dict] = {}
    with zipfile.ZipFile(wheel) as archive:
        for member in sorted(archive.namelist()):
            if not (member.startswith("sglang/srt/") and member.endswith(".py")):
                continue
            text = archive.read(member).decode()
            if '"sglang:' not in text:
                continue
            for node in ast.walk(ast.parse(text)):
                if not isinstance(node, ast.Call) or _call_type(node) is None:
                    continue
                kw = {k.arg: k.value for k in node.keywords}
                name = kw.get("name") or (node.args[0] if node.args else None)
                if not (isinstance(name, ast.Constant) and str(name.value).startswith("sglang:")):
                    continue
                doc = kw.get("documentation") or (node.args[1] if len(node.args) > 1 else None)
                out[str(name.value)] = {
                    "type": _call_type(node).lower(),  # type: ignore[union-attr]
                    "help": doc.value if isinstance(doc, ast.Constant) else "",
                    "labels": _extra_labels(kw.get("labelnames")),
                    "file": member,
                }
    return out


def router_binary() -> tuple[str, Path]:
    """(version, the extension module) of the installed sglang-router, which must be the pin."""
    wanted = load_versions()["SGLANG_ROUTER_VERSION"]
    version = importlib.metadata.version("sglang-router")
    if version != wanted:
        raise RuntimeError(
            f"sglang-router {version} is installed, versions.env pins {wanted}: run scripts/test"
        )
    spec = importlib.util.find_spec("sglang_router")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations)))
    (binary,) = sorted(folder.glob("sglang_router_rs*.so"))
    return version, binary


def router_metrics(binary: Path) -> dict[str, dict]:
    """Every metric the router's binary describes. Only the name: the bytes after
    it are its description only where the compiler kept the pair together (for
    a few names they are another string), so no help text is recorded."""
    data = binary.read_bytes()
    names = [m[1] for m in ROUTER_NAME.finditer(data)]
    # a run that holds a second name is two literals glued together: neither is taken
    return {
        name.decode(): {"type": None, "labels": []} for name in names if b"smg_" not in name[4:]
    }


def table() -> dict:
    sglang: dict[str, dict] = {}
    for track in tracks():
        version = load_versions(track)["SGLANG_VERSION"]
        for name, spec in sglang_metrics(wheels.wheel("sglang", version)).items():
            entry = sglang.setdefault(name, {**spec, "versions": []})
            entry["versions"].append(version)
    version, binary = router_binary()
    router = {
        name: {**spec, "versions": [version]} for name, spec in router_metrics(binary).items()
    }
    return {
        "about": "Generated by `python -m tools.regen --only metric-names` from sglang's wheels "
        "(each track) and sglang-router's binary (tools/metric_names.py): the metric "
        "names the dashboards and alerts may use.",
        "sglang": dict(sorted(sglang.items())),
        "sglang-router": dict(sorted(router.items())),
    }


def render() -> dict[Path, str]:
    return {TABLE: json.dumps(table(), indent=2, sort_keys=False) + "\n"}
