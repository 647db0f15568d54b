"""Everything doctor learns about the machine goes through Host.

Commands run with a timeout and never raise; files are read under `root`
(default /), so tests point one Host at a folder of recorded /proc, /sys and
model files and replace run() with recorded command output.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sm12x import proc

# What a CLI prints under its error: how to get help, never what went wrong.
BOILERPLATE = re.compile(r"^(Usage:|Run '.*--help' for more information|See '.*--help'\.?$)")


@dataclass(frozen=True)
class Output:
    """What a command did: ok, or why not (missing, timed out, exit status)."""

    argv: tuple[str, ...]
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    error: str | None = None  # set when it could not run or timed out

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0

    def why(self) -> str:
        """One line saying what went wrong: the command's own last line that says
        something, not the usage hint under it ("Run 'docker --help' for more
        information" follows "docker: unknown command: docker compose")."""
        if self.error:
            return self.error
        said = [
            line.strip()
            for line in (self.stderr or self.stdout).splitlines()
            if line.strip() and not BOILERPLATE.match(line.strip())
        ]
        return f"`{' '.join(self.argv[:3])}` exit {self.returncode}" + (
            f": {said[-1]}" if said else ""
        )


@dataclass
class Host:
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    root: Path = Path("/")
    timeout: float = 20.0
    # What one doctor run already asked this host, by question (packages.py: the
    # apt-cache candidates, all asked at once): a host is one run's.
    asked: dict[str, dict[str, object]] = field(default_factory=dict, repr=False, compare=False)

    # --- commands -------------------------------------------------------------

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.environ.get("PATH"))

    def run(self, argv: Sequence[str], timeout: float | None = None) -> Output:
        argv = tuple(argv)
        binary = self.which(argv[0]) if "/" not in argv[0] else argv[0]
        if binary is None:
            return Output(argv, error=f"{argv[0]} is not installed (not on PATH)")
        limit = self.timeout if timeout is None else timeout
        # Bounded: the command's whole process group dies at the limit, and
        # what it prints is capped (a hostile daemon cannot fill doctor's memory).
        done = proc.run([binary, *argv[1:]], limit, env=self.environ)
        if done.error:
            return Output(
                argv,
                done.stdout,
                done.stderr,
                error=done.error.replace(f"`{binary}", f"`{argv[0]}", 1),
            )
        return Output(argv, done.stdout, done.stderr, done.returncode)

    # --- files ------------------------------------------------------------------

    def path(self, path: str | Path) -> Path:
        """A host path under root (absolute paths are re-rooted)."""
        path = Path(path)
        return self.root / path.relative_to("/") if path.is_absolute() else self.root / path

    def read(self, path: str | Path) -> str | None:
        try:
            return self.path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def listdir(self, path: str | Path) -> list[str]:
        try:
            return sorted(os.listdir(self.path(path)))
        except OSError:
            return []

    def disk(self, path: str | Path) -> tuple[int, int] | None:
        """(total, free) bytes of the filesystem holding path, or None."""
        try:
            usage = shutil.disk_usage(self.path(path))
        except OSError:
            return None
        return usage.total, usage.free
