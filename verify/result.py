"""What a check reports: a name, a verdict, the evidence seen and, on failure,
the likely cause and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import NoReturn


class Verdict(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"  # not asked for (flag, or needs something not offered)
    NOT_RUN = "not-run"  # could not run: a check it depends on failed, or no data


@dataclass
class CheckResult:
    name: str
    title: str
    verdict: Verdict
    required: bool = True
    evidence: list[str] = field(default_factory=list)
    problem: str | None = None  # what was wrong (fail) or why it did not run
    cause: str | None = None  # the likely cause
    fix: str | None = None  # what to do about it
    duration_s: float = 0.0
    metrics: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Counts towards exit 0: passed, or not required."""
        return self.verdict is Verdict.PASS or not self.required

    def to_dict(self) -> dict:
        data = asdict(self)
        data["verdict"] = self.verdict.value
        return data


class CheckFailure(Exception):
    """Raised inside a check: what was wrong, the likely cause, the fix."""

    def __init__(self, problem: str, cause: str | None = None, fix: str | None = None):
        super().__init__(problem)
        self.problem, self.cause, self.fix = problem, cause, fix


class CheckSkipped(Exception):
    def __init__(self, reason: str, verdict: Verdict = Verdict.SKIP):
        super().__init__(reason)
        self.reason, self.verdict = reason, verdict


class Evidence:
    """What a check saw, collected as it runs (kept short: one line each)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.metrics: dict = {}

    def saw(self, line: str) -> None:
        self.lines.append(line if len(line) <= 300 else line[:297] + "...")

    def fail(self, problem: str, cause: str | None = None, fix: str | None = None) -> NoReturn:
        raise CheckFailure(problem, cause, fix)
