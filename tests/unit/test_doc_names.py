"""README.md and docs/*.md name only what exists: commands and their flags,
compose profiles, settings, repository files. A rename in the code that
leaves a document behind fails here, in the code blocks and in the prose's
`inline code` alike."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest
import yaml

from sm12x import cli
from sm12x.settings.model import Settings, env_name, meta
from tests.support import doc_commands as dc
from verify.cli import parser as verify_parser

ROOT = dc.ROOT
DOCS = dc.docs()
IDS = [p.relative_to(ROOT).as_posix() for p in DOCS]


def snippets(path: Path) -> list[str]:
    """Every command-like piece of text: the logical lines of the sh blocks and
    the inline code spans."""
    lines = [c.text for b in dc.blocks(path) if b.lang in dc.COMMAND_LANGS for c in dc.commands(b)]
    return lines + dc.inline_code(path)


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def parsers() -> dict[str, set[str]]:
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    found = {name: option_strings(p) for name, p in sub.choices.items()}
    found["verify"] = option_strings(verify_parser())
    return found


PARSERS = parsers()
# A command word: at the start, after `(`, `$(`, a pipe or `;`/`&&`, and
# environment assignments; not `-n sm12x` (a namespace) or a path.
INVOCATION = re.compile(
    r"(?:^|[(;|&]\s*|\$\()\s*(?:[A-Za-z_]\w*=\S*\s+)*(sm12x|python3? -m verify) (.*)"
)


def invocations(text: str) -> list[tuple[str, list[str]]]:
    """(command, its --flags) for each `sm12x CMD ...` / `python -m verify ...` in text."""
    found = []
    for match in INVOCATION.finditer(text):
        rest = match[2].split(" | ")[0]
        try:
            words = shlex.split(rest, comments=True)
        except ValueError:
            words = rest.split()
        if match[1] != "sm12x":
            words = ["verify", *words]
        if not words or not re.fullmatch(r"[a-z][\w-]*", words[0]):
            continue  # `sm12x COMMAND`, `sm12x <command>`, `sm12x gate: error: ...`
        if "--" in words:
            words = words[: words.index("--")]  # what follows goes to sglang
        flags = [w.split("=")[0].strip("[]") for w in words[1:] if re.match(r"\[?--\w", w)]
        found.append((words[0], flags))
    return found


# Spellings a doc shows on purpose because sm12x refuses them (docs/security.md's
# bad-input table): each must stay refused, which the second test below checks.
REFUSED_ON_PURPOSE = {("launch", "--api-key"): "an abbreviation of --api-key-file"}


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_sm12x_commands_and_flags_exist(path):
    bad = []
    for text in snippets(path):
        for command, flags in invocations(text):
            if command not in PARSERS:
                bad.append(f"sm12x {command}: no such command ({text})")
                continue
            # Exactly a flag of that command: argparse would also take an abbreviation.
            bad += [
                f"sm12x {command} {flag}: no such flag ({text})"
                for flag in flags
                if flag not in PARSERS[command] and (command, flag) not in REFUSED_ON_PURPOSE
            ]
    assert not bad, "\n".join(bad)


def test_what_the_docs_show_refused_is_no_flag():
    for command, flag in REFUSED_ON_PURPOSE:
        assert flag not in PARSERS[command], (command, flag)


def compose_profiles() -> set[str]:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return {p for s in compose["services"].values() for p in s.get("profiles", [])}


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_compose_profiles_exist(path):
    named = set(re.findall(r"--profile[ =]([a-z0-9][a-z0-9-]*)", path.read_text()))
    assert named <= compose_profiles(), named - compose_profiles()


CODE_DIRS = (
    "sm12x",
    "verify",
    "scripts",
    "tests",
    "tools",  # the generators and the suite's census tools
    "deploy",
    "benchmarks",
    "recipes",
    "patches",
    ".github",
    ".ci",
)
CODE_FILES = (
    "compose.yaml",
    "Dockerfile",
    "docker-bake.hcl",
    "versions.env",
    ".env.example",
    "pyproject.toml",
)


def names_outside_docs() -> str:
    """The text of everything that is not prose: code, scripts, config, workflows."""
    paths = [ROOT / name for name in CODE_FILES]
    for folder in CODE_DIRS:
        paths += [
            p
            for p in (ROOT / folder).rglob("*")
            if p.is_file()
            and "__pycache__" not in p.parts
            and "fixtures" not in p.relative_to(ROOT).parts
            and p.suffix not in (".md", ".png", ".json", ".jsonl", ".gz")
        ]
    texts = []
    for path in paths:
        try:
            texts.append(path.read_text())
        except UnicodeDecodeError:
            continue
    return "\n".join(texts)


def test_every_variable_the_docs_name_is_read_somewhere():
    """An SM12X_ name in prose that no code, script or config file has is a
    renamed or invented setting."""
    code = names_outside_docs()
    known = set(re.findall(r"\bSM12X_[A-Z0-9_]+\b", code))
    for name in Settings.model_fields:
        known.add(env_name(name))
        known.update(meta(name).old)
    bad = []
    for path in DOCS:
        for name in set(re.findall(r"\bSM12X_[A-Z0-9_]+\b", path.read_text())):
            if name not in known:
                bad.append(f"{path.relative_to(ROOT)}: {name}")
    assert not bad, bad


REPO_ROOTS = (
    "scripts",
    "tests",
    "deploy",
    "benchmarks",
    "docs",
    "recipes",
    "patches",
    "sm12x",
    "verify",
    ".github",
    ".ci",
)
PATH_SPAN = re.compile(rf"^(?:{'|'.join(re.escape(r) for r in REPO_ROOTS)})/[\w./<>*{{}},@-]*$")


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_repository_paths_in_the_prose_exist(path):
    missing = []
    for span in dc.inline_code(path):
        for word in span.split():
            word = word.rstrip(".,:;)")
            if not PATH_SPAN.match(word) or word.startswith("sm12x/data/"):
                continue
            # <rig>, <version>, * and {a,b} are patterns: one file must match.
            pattern = re.sub(r"<[^>]+>|\{[^}]+\}", "*", word.split("@")[0])
            if not list(ROOT.glob(pattern.rstrip("/"))):
                missing.append(word)
    assert not missing, missing


def test_docs_name_the_rdma_tool_doctor_reads():
    """`ibv_devinfo` shows each port's state (PORT_ACTIVE), which NCCL_IB_HCA must
    match; `ibv_devices` lists names only."""
    for path in [*DOCS, ROOT / ".env.example", *sorted((ROOT / "recipes").glob("*.yaml"))]:
        assert "ibv_devices" not in path.read_text(), path.relative_to(ROOT)
    assert "ibv_devinfo" in (ROOT / "sm12x" / "doctor" / "rdma.py").read_text()
