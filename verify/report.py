"""The three outputs: a table in the terminal (rich), a JSON report, a JUnit XML
file for CI systems (one testcase per check)."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from verify.result import CheckResult, Verdict

STYLE = {
    Verdict.PASS: "green",
    Verdict.FAIL: "bold red",
    Verdict.SKIP: "dim",
    Verdict.NOT_RUN: "yellow",
}


def passed(results: list[CheckResult]) -> bool:
    return all(r.ok for r in results)


def table(results: list[CheckResult], console: Console) -> None:
    t = Table(title="sm12x verify", show_lines=False, expand=True)
    t.add_column("check", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    t.add_column("evidence / problem", ratio=3)
    t.add_column("s", justify="right", no_wrap=True)
    for r in results:
        # Text, not markup: a problem may quote a server's answer, brackets and all.
        if r.verdict is Verdict.FAIL:
            detail = Text(str(r.problem), style="red")
            if r.cause:
                detail.append("\ncause: ", style="bold").append(str(r.cause))
            if r.fix:
                detail.append("\nfix: ", style="bold").append(str(r.fix))
        elif r.problem:
            detail = Text(str(r.problem))
        else:
            detail = Text("; ".join(r.evidence[-2:]))
        t.add_row(
            r.name, Text(r.verdict.value, style=STYLE[r.verdict]), detail, f"{r.duration_s:.1f}"
        )
    console.print(t)
    ok = passed(results)
    counts = {v.value: sum(r.verdict is v for r in results) for v in Verdict}
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    console.print(f"[{'green' if ok else 'bold red'}]{'PASS' if ok else 'FAIL'}[/] ({summary})")


def to_json(results: list[CheckResult], meta: dict) -> dict:
    return {
        "verify": meta,
        "passed": passed(results),
        "summary": {v.value: sum(r.verdict is v for r in results) for v in Verdict},
        "checks": [r.to_dict() for r in results],
    }


def write_json(path: Path, results: list[CheckResult], meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(results, meta), indent=2, default=str) + "\n")


def junit(results: list[CheckResult], meta: dict) -> ET.ElementTree:
    suite = ET.Element(
        "testsuite",
        name="sm12x-verify",
        tests=str(len(results)),
        failures=str(sum(r.verdict is Verdict.FAIL for r in results)),
        errors=str(sum(r.verdict is Verdict.NOT_RUN and r.required for r in results)),
        skipped=str(sum(r.verdict is Verdict.SKIP for r in results)),
        time=f"{sum(r.duration_s for r in results):.3f}",
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    props = ET.SubElement(suite, "properties")
    for key, value in meta.items():
        ET.SubElement(props, "property", name=str(key), value=str(value))
    for r in results:
        case = ET.SubElement(
            suite, "testcase", classname="verify", name=r.name, time=f"{r.duration_s:.3f}"
        )
        if r.verdict is Verdict.FAIL:
            node = ET.SubElement(case, "failure", message=r.problem or "failed")
            node.text = f"cause: {r.cause}\nfix: {r.fix}\n" + "\n".join(r.evidence)
        elif r.verdict is Verdict.NOT_RUN:
            tag = "error" if r.required else "skipped"
            ET.SubElement(case, tag, message=r.problem or "not run")
        elif r.verdict is Verdict.SKIP:
            ET.SubElement(case, "skipped", message=r.problem or "skipped")
        if r.evidence:
            ET.SubElement(case, "system-out").text = "\n".join(r.evidence)
    return ET.ElementTree(suite)


def write_junit(path: Path, results: list[CheckResult], meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = junit(results, meta)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
