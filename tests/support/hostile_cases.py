"""The hostile cases: which command meets which hostile server
(tests/support/hostile.py), the bound it must end within, and what its
report must say. Shared by tests/integration/test_hostile.py and
benchmarks/hostile_bounds.py.

Each bound is a budget made of the command's own limits (how many times it may
wait out a stall limit S or a whole-request limit T, by design) plus what
starting the command costs on this machine now: BASELINE, verify against a
server that refuses at once (401), measured in the same run with the same
Python (bound_s). A bare constant for start-up held on an idle machine and
failed on a loaded one (23 s against 12 s at load 8, where the start alone
took most of it); a baseline measured beside the case grows with the load
and keeps the bound tight when the machine is idle. Limits are small so a
run is cheap, and the budgets are tight enough that the old behaviour (one
stall limit per streamed check, per-read timeouts) would overrun them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.hostile import HostileServer

ROOT = Path(__file__).resolve().parents[2]
FAKE_BENCH = ROOT / "tests" / "support" / "fake_bench"
# bound = budget + START_FACTOR x baseline + MARGIN_S: the case pays one start
# (interpreter, imports, report) like the baseline, and may pay it again in
# scheduling while the machine is loaded; MARGIN_S covers loopback and the
# hostile server's own timers.
START_FACTOR = 2.0
MARGIN_S = 3.0
MAX_RSS_MIB = 500.0

# verify: T (whole request), S (stall), small soak.
T, S = 6.0, 2.0
VERIFY_ARGS = [
    "--timeout",
    f"{T:g}",
    "--stall-timeout",
    f"{S:g}",
    "--connect-timeout",
    "2",
    "--soak-concurrency",
    "4",
    "--soak-rounds",
    "2",
    "--soak-max-tokens",
    "64",
]
# bench: R (--request-timeout) for each of its own requests.
R = 1.0
BENCH_ARGS = [
    "--request-timeout",
    f"{R:g}",
    # A folder here: bench resolves the tokenizer before its runs (never the Hub).
    "--tokenizer",
    str(ROOT / "tests" / "fixtures" / "bench" / "tokenizer"),
    "--recipe",
    "rtx-pro-6000-tp4",
    "--container",
    "none",
    "--concurrency",
    "16",
    "--num-prompts",
    "4",
    "--no-chart",
]
# doctor: D (--timeout) for each command, docker's among them.
D = 1.0


@dataclass(frozen=True)
class Case:
    tool: str  # verify | bench | doctor
    behaviour: str  # a key of hostile.BEHAVIOURS
    target: str  # where the server misbehaves (hostile.TARGETS)
    budget_s: float  # the limits the command may wait out, by design
    why: str  # how the budget is made up
    expect: tuple[str, ...]  # text the report's cause must hold (any one)

    @property
    def id(self) -> str:
        return f"{self.tool}-{self.behaviour}-{self.target}"

    def bound_s(self, baseline_s: float) -> float:
        """The wall-clock bound, given the baseline measured in this run."""
        return self.budget_s + START_FACTOR * baseline_s + MARGIN_S


FAST = "ends on its first look at the reply"
VERIFY = [
    Case("verify", "never-answers", "all", S, "health stalls once (S)", ("no byte",)),
    Case(
        "verify",
        "never-answers",
        "stream",
        3 * S,
        "two streamed checks stall (2S), the rest are not sent, the soak loses one round (S)",
        ("not sent: the last 2 streamed",),
    ),
    Case(
        "verify",
        "one-byte-per-second",
        "all",
        T,
        "health runs out its deadline (T)",
        ("whole-request limit",),
    ),
    Case(
        "verify",
        "one-byte-per-second",
        "chat",
        2 * T,
        "two non-streamed requests run out their deadline (2T), the rest are not sent",
        ("not sent: the last 2 non-streamed",),
    ),
    Case("verify", "endless-body", "chat", 0, FAST, ("over 8 MiB",)),
    Case("verify", "2gib-body", "all", 0, FAST, ("over 8 MiB",)),
    Case(
        "verify",
        "endless-events",
        "stream",
        10.0,
        "reads the events max_tokens allows (2 x max_tokens + 64) on each of six streamed "
        "checks before it stops: about 15,000 events in all (10 s)",
        ("more than max_tokens allows",),
    ),
    Case("verify", "line-without-newline", "stream", 0, FAST, ("over 1 MiB", "over 8 MiB")),
    Case("verify", "invalid-json", "gen", 0, FAST, ("not valid JSON",)),
    Case("verify", "invalid-utf8", "gen", 0, FAST, ("not UTF-8",)),
    Case(
        "verify",
        "empty-object",
        "gen",
        0,
        FAST,
        ("could not read the server's reply", "cannot be read"),
    ),
    Case("verify", "reset-mid-response", "gen", 0, FAST, ("connection broke",)),
    Case("verify", "unauthorized", "all", 0, FAST, ("authentication",)),
]
# bench: /v1/models answers (so bench goes on), every other request of its own
# is hostile: GET /server_info, GET /get_server_info, POST /set_internal_state.
BENCH_BUDGET = 3 * R + 5.0
BENCH_WHY = "three hostile requests (3R) and one short benchmark run (5 s)"
BENCH = [
    Case("bench", b, "bench", BENCH_BUDGET, BENCH_WHY, expect)
    for b, expect in [
        # R is both bench's stall and whole-request limit: either may fire first.
        ("never-answers", ("no byte", "no answer within 1 s")),
        ("one-byte-per-second", ("whole-request limit",)),
        ("endless-body", ("over 8 MiB",)),
        ("2gib-body", ("over 8 MiB",)),
        ("line-without-newline", ("over 8 MiB",)),
        ("invalid-json", ("not JSON",)),
        ("invalid-utf8", ("not JSON",)),
        ("empty-object", ("not sglang's server info",)),
        ("reset-mid-response", ("ReadError", "RemoteProtocolError", "reset")),
        ("unauthorized", ("authentication",)),
    ]
]
# doctor talks HTTP to the Docker daemon through the docker CLI: DOCKER_HOST
# points at the hostile server. At most three docker commands reach it.
DOCTOR = [
    Case("doctor", b, "all", 3 * D, "at most three docker commands wait out --timeout (3D)", expect)
    for b, expect in [
        ("never-answers", ("did not answer within 1 s",)),
        ("one-byte-per-second", ("did not answer within 1 s",)),
        ("endless-body", ("did not answer within 1 s",)),
        ("2gib-body", ("did not answer within 1 s",)),
        ("line-without-newline", ("did not answer within 1 s",)),
        ("invalid-json", ("does not answer",)),
        ("invalid-utf8", ("does not answer",)),
        ("empty-object", ("without a version",)),
        ("reset-mid-response", ("does not answer",)),
        ("unauthorized", ("401",)),
    ]
]
CASES = VERIFY + BENCH + DOCTOR
# What a start costs now: verify's whole run against a server that answers 401
# to everything (its budget is 0: it ends on the first reply).
BASELINE = next(c for c in VERIFY if c.behaviour == "unauthorized")
# run() gives up on a command at the bound plus this (the test then fails on
# the bound, with the command's output).
KILL_AFTER_S = 60.0


class Baselines:
    """The baseline per Python, measured once and again whenever a case
    overruns the bound it gave (load changes within a run): a case is judged
    against the largest start cost seen beside it, never against an idle
    machine's."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.seen: dict[str, float] = {}
        self.runs = 0

    def measure(self, python: str) -> float:
        self.runs += 1
        outcome = run(
            BASELINE, python, self.workdir / f"baseline-{self.runs}", kill_after_s=KILL_AFTER_S
        )
        if not outcome.cause_found:
            raise RuntimeError(
                f"the baseline run ({BASELINE.id}) did not end as expected: {outcome.output}"
            )
        self.seen[python] = max(self.seen.get(python, 0.0), outcome.wall_s)
        return self.seen[python]

    def get(self, python: str) -> float:
        return self.seen[python] if python in self.seen else self.measure(python)


def judge(case: Case, python: str, workdir: Path, baselines: Baselines) -> tuple[Outcome, float]:
    """Run the case; return its outcome and the bound it is held to. When it
    overruns, the baseline is measured again right after (the same load) and
    the larger one bounds it."""
    bound = case.bound_s(baselines.get(python))
    outcome = run(case, python, workdir, kill_after_s=bound + KILL_AFTER_S)
    if outcome.wall_s >= bound:
        bound = case.bound_s(baselines.measure(python))
    return outcome, bound


@dataclass
class Outcome:
    case: Case
    python: str
    wall_s: float
    peak_rss_mib: float
    children_peak_rss_mib: float
    exit: int | None
    cause: str  # the report's text for the failure
    reports: list[str] = field(default_factory=list)  # report files written
    output: str = ""

    @property
    def cause_found(self) -> bool:
        return any(text in self.cause for text in self.case.expect)


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SM12X_API_KEY", "OPENAI_API_KEY", "DOCKER_CONTEXT")
    }
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
            "COLUMNS": "200",
            "LANG": "C.UTF-8",
            **extra,
        }
    )
    return env


def run(case: Case, python: str, workdir: Path, kill_after_s: float) -> Outcome:
    """Start the hostile server, run the command against it under the peak-RSS
    launcher, and read back what it reported."""
    workdir.mkdir(parents=True, exist_ok=True)
    rss = workdir / "rss.json"
    with HostileServer(case.behaviour, case.target) as server:
        env: dict[str, str] = {}
        if case.tool == "verify":
            argv = [
                "verify",
                "--base-url",
                server.url,
                *VERIFY_ARGS,
                "--json",
                str(workdir / "report.json"),
                "--junit",
                str(workdir / "junit.xml"),
            ]
        elif case.tool == "bench":
            argv = [
                "sm12x.cli",
                "bench",
                "--url",
                server.url,
                *BENCH_ARGS,
                "--python",
                sys.executable,
                "--out",
                str(workdir / "out"),
            ]
            scenario = workdir / "scenario.json"
            line = json.loads(
                (ROOT / "tests/fixtures/bench/c16.json").read_text(), parse_constant=lambda _c: None
            )
            scenario.write_text(json.dumps({"default": {"line": line}}))
            env = {
                "PYTHONPATH": os.pathsep.join([str(FAKE_BENCH), str(ROOT), str(ROOT / "tests")]),
                "SM12X_FAKE_BENCH_SCENARIO": str(scenario),
            }
        else:
            argv = [
                "sm12x.cli",
                "doctor",
                "--json",
                "--timeout",
                f"{D:g}",
                "--recipe",
                "rtx-pro-6000-tp2",
                "--env-file",
                os.devnull,
            ]
            env = {"DOCKER_HOST": "tcp://" + server.url.split("//", 1)[1]}
        started = time.monotonic()
        done = subprocess.run(
            [python, "-m", "tests.support.peak_rss", str(rss), *argv],
            cwd=ROOT,
            env=_env(env),
            capture_output=True,
            text=True,
            timeout=kill_after_s,
        )
        wall = time.monotonic() - started
    measured = json.loads(rss.read_text()) if rss.exists() else {}
    cause, reports = _read_reports(case, workdir, done.stdout)
    return Outcome(
        case,
        measured.get("python", "?"),
        wall,
        measured.get("peak_rss_mib", -1.0),
        measured.get("children_peak_rss_mib", -1.0),
        done.returncode,
        cause,
        reports,
        done.stdout[-4000:] + done.stderr[-4000:],
    )


def _read_reports(case: Case, workdir: Path, stdout: str) -> tuple[str, list[str]]:
    if case.tool == "verify":
        files = [p for p in (workdir / "report.json", workdir / "junit.xml") if p.exists()]
        if len(files) < 2:
            return "", [p.name for p in files]
        report = json.loads(files[0].read_text())
        ET.parse(files[1])  # well-formed
        failed = [c for c in report["checks"] if c["verdict"] == "fail"]
        text = " | ".join(f"{c['name']}: {c['problem']} / {c['cause']}" for c in failed)
        return text, [p.name for p in files]
    if case.tool == "bench":
        result = workdir / "out" / "result.json"
        if not result.exists():
            return "", []
        data = json.loads(result.read_text())
        return " | ".join(data["warnings"]), ["result.json"]
    try:
        data = json.loads(stdout)
    except ValueError:
        return "", []
    docker = next((c for c in data["checks"] if c["id"] == "docker"), {})
    return f"{docker.get('verdict')}: {docker.get('detail')}", ["doctor --json"]
