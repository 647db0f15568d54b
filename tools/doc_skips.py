"""The documented commands this checkout's doc-command test does not run, and why.

    python -m tools.doc_skips [--json]

Read from tests/unit/test_doc_commands.py itself (its `CLASSIFIED` table's
`NotHere` entries and its `EXPLAIN_ONLY` commands), one line per test id. Run it
in two checkouts (`git worktree add /tmp/old COMMIT`) and compare, to see which
skips a change added and whether a command that ran before is skipped now
(issue 44: no test newly skipped).
"""

from __future__ import annotations

import argparse
import json
import sys

from tests.unit import test_doc_commands as doc


def skipped() -> list[dict[str, str]]:
    out = []
    for command in doc.COMMANDS:
        how = doc.CLASSIFIED.get(command.text)
        if doc.by_rule(command):
            why = getattr(doc, "EXPLAIN_ONLY", {}).get(command.text)
        else:
            why = how.why if isinstance(how, doc.NotHere) else None
        if why is not None:
            out.append({"id": command.id, "command": command.text, "why": why})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON list instead of lines")
    args = parser.parse_args(argv)
    found = skipped()
    if args.json:
        json.dump(found, sys.stdout, indent=1)
        print()
    else:
        for entry in found:
            print(f"{entry['id']}\t{entry['why'][:70]}\t{entry['command']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
