"""The command-line surface of an sglang release, read from its wheel.

sglang 0.5.23 builds its parser from namespace classes (arg_groups/fields/)
and imports cleanly on a CPU (with its own transformers pin, tests/support/
wheels.py): its real parser is built in a subprocess (`ServerArgs.add_cli_args`
on an argparse parser) and read. Importing 0.5.16-0.5.18's server_args on a CPU
drags in transformers, torchvision and most of sglang, so for those this reads
the source with `ast` instead, mirroring how they build their parser
(arg_groups/arg_utils.py: add_cli_args_from_dataclass):

- every ServerArgs field annotated `A[T, "help"]` or `A[T, Arg(...)]` becomes
  `--field-name` (or Arg.cli_name) plus Arg.aliases, unless Arg.no_cli;
- a `bool` (or Optional[bool]) field without an action is a switch;
- choices come from Arg.choices (a list literal or a module-level list of
  strings) or a Literal[...] type;
- ServerArgs.add_cli_args adds more flags by hand; those with a `new_flag`
  or a Deprecated* action are deprecated spellings. --reasoning-parser and
  --tool-call-parser take their choices from the parser registries.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from sm12x.mock import wheels

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class FlagSpec:
    name: str
    switch: bool | None  # None: a custom action, value-ness unknown
    choices: list[str] | None = None
    deprecated: bool = False
    aliases: list[str] = field(default_factory=list)


def _read(archive: zipfile.ZipFile, member: str) -> ast.Module:
    return ast.parse(archive.read(member).decode())


def _module_lists(tree: ast.Module) -> dict[str, list[str]]:
    lists = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple)):
            values = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
            if len(values) == len(node.value.elts):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        lists[target.id] = [str(v) for v in values]
    return lists


def _dict_keys(tree: ast.Module, class_attr: str) -> list[str]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == class_attr
            and isinstance(node.value, ast.Dict)
        ):
            return [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    raise LookupError(class_attr)


def _choices(expr: ast.expr | None, lists: dict[str, list[str]]) -> list[str] | None:
    if isinstance(expr, ast.List):
        values = [e.value for e in expr.elts if isinstance(e, ast.Constant)]
        return [str(v) for v in values] if len(values) == len(expr.elts) else None
    if isinstance(expr, ast.Name):
        return lists.get(expr.id)
    return None


def _unwrap_optional(expr: ast.expr) -> ast.expr:
    if (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.value, ast.Name)
        and expr.value.id == "Optional"
    ):
        return expr.slice
    return expr


def _literal(expr: ast.expr) -> list[str] | None:
    if (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.value, ast.Name)
        and expr.value.id == "Literal"
    ):
        elts = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
        return [str(e.value) for e in elts if isinstance(e, ast.Constant)]
    return None


# Run in a subprocess with the release's tree first on the path: its real parser.
_DUMP = """
import argparse, json, sys
from sm12x.selftest.env import stub_torchvision
stub_torchvision()
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
out = {}
for action in parser._actions:
    for flag in action.option_strings:
        out[flag] = {"name": action.option_strings[0], "nargs": action.nargs,
                     "choices": None if action.choices is None else [str(c) for c in action.choices],
                     "deprecated": type(action).__name__.startswith("Deprecated")
                     or getattr(action, "new_flag", None) is not None,
                     "aliases": action.option_strings[1:]}
json.dump(out, sys.stdout)
"""


@functools.cache
def _real_flags(sglang_version: str) -> dict[str, FlagSpec]:
    from sm12x.mock import serving as sglang_serving

    site = sglang_serving.tree(sglang_version, patched=False)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*wheels.pythonpath(sglang_version), str(site), str(ROOT)]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _DUMP],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=site,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sglang {sglang_version}'s parser: {proc.stderr[-2000:]}")
    flags = {}
    for flag, spec in json.loads(proc.stdout).items():
        nargs = spec["nargs"]
        # nargs 0: a switch; None: one value; anything else: value-ness unknown.
        switch = True if nargs == 0 else False if nargs is None else None
        flags[flag] = FlagSpec(
            spec["name"], switch, spec["choices"], spec["deprecated"], spec["aliases"]
        )
    return flags


def builds_from_namespaces(sglang_version: str) -> bool:
    """sglang >= 0.5.23 declares its fields in arg_groups/fields/, not on ServerArgs."""
    with zipfile.ZipFile(wheels.wheel("sglang", sglang_version)) as archive:
        return "sglang/srt/arg_groups/fields/__init__.py" in archive.namelist()


def server_flags(sglang_version: str) -> dict[str, FlagSpec]:
    """Every flag `python -m sglang.launch_server` accepts in that release."""
    if builds_from_namespaces(sglang_version):
        return _real_flags(sglang_version)
    with zipfile.ZipFile(wheels.wheel("sglang", sglang_version)) as archive:
        tree = _read(archive, "sglang/srt/server_args.py")
        reasoning = _dict_keys(
            _read(archive, "sglang/srt/parser/reasoning_parser.py"), "DetectorMap"
        )
        tools = _dict_keys(
            _read(archive, "sglang/srt/function_call/function_call_parser.py"), "ToolCallParserEnum"
        )
    lists = _module_lists(tree)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    flags: dict[str, FlagSpec] = {}

    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        ann = node.annotation
        if not (
            isinstance(ann, ast.Subscript)
            and isinstance(ann.value, ast.Name)
            and ann.value.id == "A"
        ):
            continue
        inner, meta = ann.slice.elts[0], ann.slice.elts[1]
        kwargs = {}
        if isinstance(meta, ast.Call):
            kwargs = {k.arg: k.value for k in meta.keywords}
        if isinstance(kwargs.get("no_cli"), ast.Constant) and kwargs["no_cli"].value:
            continue
        cli = kwargs.get("cli_name")
        name = (
            cli.value if isinstance(cli, ast.Constant) else "--" + node.target.id.replace("_", "-")
        )
        aliases = (
            [e.value for e in kwargs["aliases"].elts]
            if isinstance(kwargs.get("aliases"), ast.List)
            else []
        )
        base = _unwrap_optional(inner)
        if "action" in kwargs:
            switch = None
        else:
            switch = isinstance(base, ast.Name) and base.id == "bool"
        choices = _choices(kwargs.get("choices"), lists) or _literal(base)
        spec = FlagSpec(name, switch, choices, aliases=aliases)
        for flag in [name, *aliases]:
            flags[flag] = spec

    add_cli = next(
        n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"
    )
    for call in ast.walk(add_cli):
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "add_argument"
        ):
            continue
        names = [
            a.value
            for a in call.args
            if isinstance(a, ast.Constant) and str(a.value).startswith("--")
        ]
        kwargs = {k.arg: k.value for k in call.keywords}
        action = kwargs.get("action")
        deprecated = "new_flag" in kwargs or (
            isinstance(action, ast.Name) and action.id.startswith("Deprecated")
        )
        switch = None
        if isinstance(action, ast.Constant):
            switch = action.value in ("store_true", "store_false")
        elif action is None:
            switch = False
        for flag in names:
            flags[flag] = FlagSpec(flag, switch, None, deprecated=deprecated)
    flags["--reasoning-parser"].choices = ["auto", *reasoning]
    flags["--tool-call-parser"].choices = ["auto", *tools]
    return flags


def env_vars(sglang_version: str) -> tuple[set[str], dict[str, str]]:
    """The SGLANG_* variables sglang.srt.environ declares, and the ones it
    renames or retires (old name -> what to do)."""
    with zipfile.ZipFile(wheels.wheel("sglang", sglang_version)) as archive:
        source = archive.read("sglang/srt/environ.py").decode()
        hook = archive.read("sglang/srt/arg_groups/speculative_hook.py").decode()
    tree = ast.parse(source)
    declared = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Envs":
            for item in node.body:
                if isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    declared |= {t.id for t in targets if isinstance(t, ast.Name)}
    retired = {}
    for node in ast.walk(tree):
        # 0.5.16/0.5.17: _print_deprecated_env("OLD", "NEW");
        # 0.5.18: {"OLD": _DeprecatedEnv(replacement="NEW")}
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "_print_deprecated_env"
            and node.args
        ):
            old = node.args[0].value
            new = node.args[1].value if len(node.args) > 1 else None
            retired[old] = f"use {new}" if new else "removed"
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and isinstance(value, ast.Call)
                    and isinstance(value.func, ast.Name)
                    and value.func.id == "_DeprecatedEnv"
                ):
                    repl = {k.arg: k.value for k in value.keywords}.get("replacement")
                    retired[key.value] = (
                        f"use {repl.value}" if isinstance(repl, ast.Constant) else "removed"
                    )
    if "SGLANG_ENABLE_SPEC_V2 has been removed" in hook:
        retired["SGLANG_ENABLE_SPEC_V2"] = "removed"
    return declared, retired


# The parser `sglang serve` builds, as sm12x.sglang_parser describes it.
_DESCRIBE = """
import json, sys
from sm12x.selftest.env import stub_torchvision
stub_torchvision()
from sm12x.sglang_parser import describe, real_parser
print(json.dumps(describe(real_parser(), sys.argv[1]), indent=1, sort_keys=True))
"""


@functools.cache
def parser_description(sglang_version: str) -> str:
    """sglang `sglang_version`'s real parser, described (JSON text), built in a
    subprocess with the release's tree (from its wheel) first on the path."""
    from sm12x.mock import serving as sglang_serving

    site = sglang_serving.tree(sglang_version, patched=False)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*wheels.pythonpath(sglang_version), str(site), str(ROOT)]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _DESCRIBE, sglang_version],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=site,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sglang {sglang_version}'s parser: {proc.stderr[-2000:]}")
    return proc.stdout


# Each token list parsed by the real parser made to report only what it sets
# (sm12x.launch.judge's way): the dests and values, or argparse's refusal.
_PARSE = """
import json, sys
from sm12x.selftest.env import stub_torchvision
stub_torchvision()
from sm12x.launch.judge import recording
from sm12x.sglang_parser import ParserError, real_parser
out = []
for tokens in json.loads(sys.argv[1]):
    try:
        out.append({"set": vars(recording(real_parser()).parse_args(tokens))})
    except ParserError as exc:
        out.append({"error": str(exc)})
print(json.dumps(out, default=repr))
"""


def real_parse(sglang_version: str, token_lists: list[list[str]]) -> list[dict]:
    """What sglang `sglang_version`'s real parser sets for each token list."""
    from sm12x.mock import serving as sglang_serving

    site = sglang_serving.tree(sglang_version, patched=False)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*wheels.pythonpath(sglang_version), str(site), str(ROOT)]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _PARSE, json.dumps(token_lists)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=site,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sglang {sglang_version}'s parser: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def track_versions() -> list[str]:
    """The sglang release of every track (versions.env)."""
    from sm12x.versions import load_versions, tracks

    return sorted({load_versions(track)["SGLANG_VERSION"] for track in tracks()})


def descriptions() -> dict[Path, str]:
    """sm12x/sglang_parsers/<version>.json for every track (tools/regen.py)."""
    from sm12x.sglang_parser import description_path

    return {description_path(v): parser_description(v) for v in track_versions()}
