"""Commit messages that read in `git log --oneline`: a subject of at most 72
characters, then a blank line before the why.

    python -m tools.commit_msg FILE            check one message (git's commit-msg hook)
    python -m tools.commit_msg --range A..B    check every commit in a range

The hook is scripts/commit-msg, which `make hooks` (and every other make
target a contributor runs first) installs. tests/unit/test_commit_msg.py holds
every commit made after the rule's base commit to it, so a commit made without
the hook is still caught by the suite.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

SUBJECT_MAX = 72
# The last commit made before the rule: its history stays as it was written.
RULE_BASE = "70331d0825a704ff7aeaca0f1306c3f3f15759f7"


def problems(message: str) -> list[str]:
    """What is wrong with one commit message, as git would store it."""
    # git strips the comment lines of the editor's template before storing.
    lines = [line for line in message.splitlines() if not line.startswith("#")]
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ["the message is empty: write a subject line saying what the commit does"]
    subject = lines[0].rstrip()
    found = []
    if len(subject) > SUBJECT_MAX:
        found.append(
            f"the subject is {len(subject)} characters, over {SUBJECT_MAX}: "
            "shorten it and put the why in the body, after a blank line"
        )
    if len(lines) > 1 and lines[1].strip():
        found.append(
            "the second line is not blank: leave one blank line between the subject and the body"
        )
    return found


def _git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"tools.commit_msg: git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def range_problems(spec: str, cwd: Path | None = None) -> list[str]:
    """One line per bad commit in `git rev-list spec`."""
    found = []
    for sha in _git("rev-list", "--no-merges", spec, cwd=cwd).split():
        body = _git("log", "-1", "--format=%B", sha, cwd=cwd)
        found += [f"{sha[:12]}: {p}" for p in problems(body)]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.commit_msg", description=__doc__.split("\n\n")[0]
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "file", nargs="?", help="a commit message file (git passes .git/COMMIT_EDITMSG)"
    )
    what.add_argument("--range", dest="spec", help="a revision range, e.g. origin/main..HEAD")
    args = parser.parse_args(argv)
    if args.spec:
        found = range_problems(args.spec)
    else:
        try:
            found = problems(Path(args.file).read_text(encoding="utf-8", errors="replace"))
        except OSError as err:
            print(f"commit-msg: cannot read {args.file}: {err.strerror}", file=sys.stderr)
            return 2
    for line in found:
        print(f"commit-msg: {line}", file=sys.stderr)
    if found and not args.spec:
        print(
            f"commit-msg: your message is kept in {args.file}; fix it and commit again",
            file=sys.stderr,
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
