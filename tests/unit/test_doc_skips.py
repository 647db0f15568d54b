"""tools/doc_skips.py lists exactly the doc commands the doc-command test skips."""

from __future__ import annotations

from tests.unit import test_doc_commands as doc
from tools import doc_skips


def test_it_lists_the_not_here_commands_and_nothing_that_runs():
    found = doc_skips.skipped()
    ids = {c.id for c in doc.COMMANDS}
    assert found and all(entry["id"] in ids for entry in found)
    listed = {entry["command"] for entry in found}
    for command in doc.COMMANDS:
        how = doc.CLASSIFIED.get(command.text)
        if doc.by_rule(command):
            assert (command.text in listed) == (command.text in doc.EXPLAIN_ONLY), command.id
        else:
            assert (command.text in listed) == isinstance(how, doc.NotHere), command.id
    # One each of a run command, an install, a suite claim and a skip, by name.
    assert "python3 -m venv .venv" not in listed
    assert ".venv/bin/pip install -e '.[mock]'" not in listed
    assert "scripts/test" not in listed  # InSuite: this session, when whole
    assert "docker pull ghcr.io/sm12x/sm12x:0.1.0-pinned" in listed
    assert sum("needs a Kubernetes cluster" in e["why"] for e in found) >= 1
