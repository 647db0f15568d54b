"""What the documented commands write into the checkout is ignored by git: a
newcomer who runs README and docs/ as written sees no untracked files.

The outputs: every relative path a documented `sm12x`/`python -m verify`
command names with an output flag or a `>` redirection, and the folders bench
and verify write by default (read from their code, so a new default shows
here)."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support import doc_commands as dc

ROOT = dc.ROOT
OUTPUT_FLAGS = {"--out", "--cache-dir", "--json", "--junit"}
# Default output folders, each with where its code says so.
DEFAULTS = {
    "bench-results": ("sm12x/bench/main.py", r'Path\("bench-results"\)'),
    "verify-report": ("verify/cli.py", r'Path\("verify-report/report\.json"\)'),
    # qualify's bundle: qualify-RECIPE unless --out says otherwise.
    "qualify-rtx-pro-6000-tp4": ("sm12x/qualify/run.py", r'Path\(f"qualify-\{recipe\.name\}"\)'),
}


def documented_outputs() -> set[str]:
    found = set()
    for command in dc.all_commands():
        try:
            words = command.words
        except ValueError:
            continue
        if not (words[:1] == ["sm12x"] or words[1:3] == ["-m", "verify"]):
            continue
        for k, word in enumerate(words[:-1]):
            target = words[k + 1]
            if (word in OUTPUT_FLAGS or word == ">") and not target.startswith(
                ("/", "-", "$", ">")
            ):
                found.add(target.split("/")[0])
    return found


def test_the_docs_write_the_outputs_this_test_knows():
    # Else the check below proves nothing: these are the ones issue 43 saw untracked.
    assert {"sps-try", "doctor.json"} <= documented_outputs()


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_the_defaults_are_the_code_s(name):
    path, pattern = DEFAULTS[name]
    assert re.search(pattern, (ROOT / path).read_text()), (name, path)


def test_every_documented_output_is_ignored_by_git():
    names = sorted(documented_outputs() | set(DEFAULTS))
    probes = [f"{n}/x" if "." not in n else n for n in names]
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *probes],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    # --non-matching prints "::\tPATH" for a path no rule ignores.
    unignored = [line.split("\t")[1] for line in done.stdout.splitlines() if line.startswith("::")]
    assert not unignored, f"not in .gitignore: {unignored}"
