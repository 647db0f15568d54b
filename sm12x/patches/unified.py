"""Running one patch: `patch -p1 --fuzz=0`, or, where the base has no `patch`
(sglang's images do not promise the tool, and nothing is installed for it),
an exact-context applier of its own that does the same.

Standard library only, like the rest of what scripts/apply-patches runs
(sm12x.patches.apply).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

Hunk = tuple[int, list[str], list[str]]


def run_patch(site: Path, patch_file: Path, *extra: str) -> subprocess.CompletedProcess:
    if shutil.which("patch") is None:
        return apply_unified(site, patch_file, *extra)
    return subprocess.run(
        [
            "patch",
            "-p1",
            "--fuzz=0",
            "--force",
            "--no-backup-if-mismatch",
            "-r",
            "-",
            "-d",
            str(site),
            "-i",
            str(patch_file),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def parse_unified(text: str) -> list[tuple[str, list[Hunk]]]:
    """[(file relative to -p1, [(old start, old lines, new lines), ...]), ...]."""
    files: list[tuple[str, list[Hunk]]] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("+++ ") and i and lines[i - 1].startswith("--- "):
            name = line[4:].split("\t")[0].strip()
            files.append((name.split("/", 1)[1] if "/" in name else name, []))
        elif line.startswith("@@ ") and files:
            head = line.split("@@")[1].split()
            start, _, count = head[0][1:].partition(",")
            remaining_old = int(count or 1)
            _, _, count = head[1][1:].partition(",")
            remaining_new = int(count or 1)
            old: list[str] = []
            new: list[str] = []
            while remaining_old or remaining_new:
                i += 1
                body = lines[i]
                if body.startswith("\\"):
                    continue
                tag, content = body[:1], body[1:]
                if body in ("\n", "\r\n"):  # an empty context line some tools write
                    tag, content = " ", body
                if tag in " -":
                    old.append(content)
                    remaining_old -= 1
                if tag in " +":
                    new.append(content)
                    remaining_new -= 1
            # "\ No newline at end of file" after the hunk's last line
            if i + 1 < len(lines) and lines[i + 1].startswith("\\"):
                for block in (old, new):
                    if block and block[-1].endswith("\n"):
                        block[-1] = block[-1][:-1]
            files[-1][1].append((max(int(start) - 1, 0), old, new))
        i += 1
    return files


def apply_unified(site: Path, patch_file: Path, *extra: str) -> subprocess.CompletedProcess:
    """`patch -p1 --fuzz=0` for the flags apply-patches uses (--forward, --reverse,
    --dry-run): every context line must match exactly (a hunk may sit at another
    line, as with patch); nothing is written unless every hunk of every file fits."""
    reverse, dry = "--reverse" in extra, "--dry-run" in extra
    args = ["apply-patches(python)", str(patch_file), *extra]
    try:
        parsed = parse_unified(patch_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, IndexError) as err:
        return subprocess.CompletedProcess(args, 2, f"cannot read {patch_file}: {err}\n", "")
    results = {}
    for name, hunks in parsed:
        target = site / name
        if not target.is_file():
            return subprocess.CompletedProcess(args, 1, f"can't find file to patch: {name}\n", "")
        text = target.read_text(encoding="utf-8").splitlines(keepends=True)
        shift = 0
        for number, (start, old, new) in enumerate(hunks, 1):
            if reverse:
                old, new = new, old
            found = locate(text, old, start + shift)
            if found is None:
                return subprocess.CompletedProcess(
                    args, 1, f"Hunk #{number} FAILED at {start + 1} ({name}).\n", ""
                )
            text[found : found + len(old)] = new
            shift = found - start + len(new) - len(old)
        results[target] = "".join(text)
    if not dry:
        for target, content in results.items():
            target.write_text(content, encoding="utf-8")
    done = "".join(
        f"{'checking' if dry else 'patching'} file {p.relative_to(site)}\n" for p in results
    )
    return subprocess.CompletedProcess(args, 0, done, "")


def locate(text: list[str], block: list[str], guess: int) -> int | None:
    """Where block matches text exactly, nearest to guess first."""
    for distance in range(len(text) + 1):
        for at in {guess - distance, guess + distance}:
            if 0 <= at <= len(text) - len(block) and text[at : at + len(block)] == block:
                return at
    return None


def touched(patch_file: Path) -> list[str]:
    """The files a patch changes (its `+++ b/` lines), relative to site-packages."""
    files = []
    for line in patch_file.read_text(encoding="utf-8").splitlines():
        if line.startswith("+++ b/"):
            files.append(line[len("+++ b/") :].split("\t")[0].strip())
    return files
