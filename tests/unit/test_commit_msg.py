"""Commit subjects of at most 72 characters, the why in the body (issue 42):
the rule itself, git's real hook as `make hooks` installs it, and every commit
made after the rule's base."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tools import commit_msg

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Short subject\n\nThe why.\n", []),
        ("Short subject\n", []),
        ("x" * 72 + "\n", []),
        ("x" * 73 + "\n\nwhy\n", ["the subject is 73 characters, over 72"]),
        ("Subject\nbody glued on\n", ["the second line is not blank"]),
        ("\n# only a comment\n", ["the message is empty"]),
        ("# Please enter the commit message\nSubject\n\n# comment\nbody\n", []),
    ],
)
def test_the_rule(message, expected):
    found = commit_msg.problems(message)
    assert len(found) == len(expected), found
    for line, start in zip(found, expected, strict=True):
        assert line.startswith(start), line


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=60, check=check
    )


def test_make_installs_the_hook_and_git_runs_it(tmp_path):
    """The real make and git: a long subject is refused, a good one lands."""
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.fail("make and git are needed: scripts/test's machine has both")
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "tools").mkdir()
    shutil.copy(ROOT / "Makefile", repo / "Makefile")
    shutil.copy(ROOT / "scripts" / "commit-msg", repo / "scripts" / "commit-msg")
    shutil.copy(ROOT / "tools" / "commit_msg.py", repo / "tools" / "commit_msg.py")
    (repo / "tools" / "__init__.py").write_text("")
    _git(repo, "init", "-q")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    made = subprocess.run(
        ["make", "--no-print-directory", "hooks"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    assert os.access(repo / ".git" / "hooks" / "commit-msg", os.X_OK)
    (repo / "f").write_text("1")
    _git(repo, "add", "f")
    refused = _git(repo, "commit", "-q", "-m", "y" * 80, check=False)
    assert refused.returncode != 0
    assert "the subject is 80 characters, over 72" in refused.stderr
    landed = _git(
        repo, "commit", "-q", "-m", "Add f\n\nBecause the test needs a commit.", check=False
    )
    assert landed.returncode == 0, landed.stderr
    assert commit_msg.range_problems("HEAD", cwd=repo) == []


def test_every_commit_since_the_rule_keeps_it():
    """The suite's own check, for commits made without the hook."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no history to read")
    have = subprocess.run(
        ["git", "cat-file", "-e", f"{commit_msg.RULE_BASE}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    if have.returncode != 0:
        pytest.skip(
            f"the rule's base {commit_msg.RULE_BASE[:12]} is not in this clone's history (shallow)"
        )
    assert commit_msg.range_problems(f"{commit_msg.RULE_BASE}..HEAD", cwd=ROOT) == []
