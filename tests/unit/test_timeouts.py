"""Every subprocess and network call bench and doctor make has a timeout.

Read from the source with ast, so a new call without one fails here rather
than hanging a user's terminal on a dead server or a wedged docker daemon.
"""

from __future__ import annotations

import ast

import pytest

from support.cli import ROOT

MODULES = sorted((ROOT / "sm12x" / "bench").glob("*.py")) + sorted(
    (ROOT / "sm12x" / "doctor").glob("*.py"))
# (object, method) pairs that block on something outside the process.
NEEDS_TIMEOUT = {("subprocess", "run"), ("subprocess", "check_output"),
                 ("subprocess", "check_call"), ("httpx", "get"), ("httpx", "post"),
                 ("httpx", "request"), ("socket", "create_connection"),
                 ("urllib.request", "urlopen"), ("proc", "wait")}


def calls(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else ast.unparse(owner)
            yield name, node.func.attr, node


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_blocking_calls_have_timeouts(path):
    missing = []
    for owner, method, node in calls(path):
        if (owner, method) not in NEEDS_TIMEOUT:
            continue
        has = any(k.arg == "timeout" for k in node.keywords) or (
            method == "create_connection" and len(node.args) >= 2)
        if not has:
            missing.append(f"{path.name}:{node.lineno} {owner}.{method}")
    assert missing == []


def test_the_scan_sees_the_calls():
    seen = {(o, m) for p in MODULES for o, m, _ in calls(p)}
    assert {("subprocess", "run"), ("httpx", "get"), ("httpx", "post"), ("proc", "wait")} <= seen
