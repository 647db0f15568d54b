"""`sm12x watch` evaluates the shipped alert rules itself (sm12x.watch.rules);
this proves, rule by rule and rig by rig, that it fires exactly when
Debian's promtool does on the same series.

For every case (a set of input series, an evaluation time), the series are
fed to watch's evaluator one sample a minute, and what it says fires at that
time is written as the `exp_alerts` of a `promtool test rules` case, with the
labels and annotations Prometheus would give it. promtool passes only when
the real rules fire exactly those alerts: none more, none fewer. Each case
also says what it expects to fire, so the agreement is not two silences.

The cases: every alert's firing and healthy series from the monitoring stack's
tests, and the edges: a condition held one minute short of its `for` and held
exactly its `for`, acceptance at the floor, a rig that is not generating, one
low DP rank of two, a counter reset, the error share at 5% and above it, the
running requests one short of the saturation line and on it, and a rig down
one and two minutes.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from sm12x.deploy import monitoring
from sm12x.watch.rules import Evaluator
from sm12x.watch.scrape import Point, Rank
from tests.integration.test_monitoring_stack import (
    RECIPES,
    RIGS,
    _annotations,
    alert_cases,
    promtool,
)

SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}$")
LABEL = re.compile(r'(\w+)="([^"]*)"')
TERM = re.compile(r"^(-?[0-9.e]+)(?:([+-][0-9.e]+)x(\d+)|x(\d+))?$")


def expand(values: str) -> list[float]:
    """promtool's expanding notation: `a+bxn`, `axn` and plain numbers."""
    out: list[float] = []
    for term in values.split():
        m = TERM.match(term)
        assert m, term
        start = float(m.group(1))
        if m.group(2) is not None:
            out += [start + float(m.group(2)) * i for i in range(int(m.group(3)) + 1)]
        elif m.group(4) is not None:
            out += [start] * (int(m.group(4)) + 1)
        else:
            out.append(start)
    return out


def parse_series(text: str) -> tuple[str, dict[str, str]]:
    m = SERIES.match(text)
    assert m, text
    return m.group(1), dict(LABEL.findall(m.group(2)))


def points(series: list[dict]) -> list[Point]:
    """The series as watch's scrapes, one a minute."""
    parsed = [(*parse_series(s["series"]), expand(s["values"])) for s in series]
    length = max(len(v) for _, _, v in parsed)
    out = []
    for i in range(length):
        point = Point(at=60.0 * i)
        for name, labels, values in parsed:
            if i >= len(values):
                continue
            v = values[i]
            rank = labels.get("dp_rank", "0")
            if name == "up":
                point.up = v == 1
            elif name == "sglang:generation_tokens_total":
                point.tokens = (point.tokens or 0.0) + v
            elif name == "sglang:http_responses_total":
                key = f"{labels.get('endpoint', '/v1/chat/completions')} {labels['status_code']}"
                point.responses[key] = point.responses.get(key, 0.0) + v
            else:
                attr = {
                    "sglang:spec_accept_length": "accept_length",
                    "sglang:num_running_reqs": "running",
                    "sglang:num_queue_reqs": "queued",
                }[name]
                setattr(point.ranks.setdefault(rank, Rank()), attr, v)
        out.append(point)
    return out


def _by_name(series: list[dict], name: str) -> list[dict]:
    return [s for s in series if parse_series(s["series"])[0] == name]


def watch_fires(t: monitoring.Thresholds, series: list[dict], at: str) -> dict[str, list[dict]]:
    """alert -> the labels of each alert watch says fires at `at`."""
    end = float(at[:-1]) * 60
    rules = Evaluator(t)
    alerts = []
    for p in points(series):
        if p.at > end:
            break
        alerts = rules.add(p)
    fired: dict[str, list[dict]] = {}
    by_rig = {"rig": t.rig, "instance": "rig:30000"}
    for a in alerts:
        if not a.firing:
            continue
        if a.name == "DsparkAcceptanceCollapse":
            (s,) = [
                s
                for s in _by_name(series, "sglang:spec_accept_length")
                if parse_series(s["series"])[1].get("dp_rank", "0") == a.key
            ]
            labels = parse_series(s["series"])[1]
        elif a.name == "RigDown":
            labels = parse_series(_by_name(series, "up")[0]["series"])[1]
        else:
            labels = by_rig
        fired.setdefault(a.name, []).append(labels)
    return fired


def _s(rig: str, name: str, values: str, extra: str = "") -> dict:
    labels = f'rig="{rig}", instance="rig:30000", job="sglang"' + (f", {extra}" if extra else "")
    return {"series": f"{name}{{{labels}}}", "values": values}


def edge_cases(t: monitoring.Thresholds) -> list[tuple[str, list[dict], str, set[str]]]:
    """(what, series, eval time, the alerts expected to fire)."""
    rig, floor = t.rig, t.min_accept_length
    low, good = f"{floor - 0.5:g}", f"{floor + 1:g}"
    tokens = _s(rig, "sglang:generation_tokens_total", "0+600x30", 'is_streaming="true"')
    flat = _s(rig, "sglang:generation_tokens_total", "100x30", 'is_streaming="true"')
    reset = _s(rig, "sglang:generation_tokens_total", "0+600x15 0+600x14", 'is_streaming="true"')
    acc = "sglang:spec_accept_length"
    full = t.max_running_requests
    cases = [
        ("accept low 9 minutes", [_s(rig, acc, f"{good}x20 {low}x9"), tokens], "30m", set()),
        (
            "accept low 10 minutes",
            [_s(rig, acc, f"{good}x19 {low}x10"), tokens],
            "30m",
            {"DsparkAcceptanceCollapse"},
        ),
        ("accept at the floor", [_s(rig, acc, f"{floor:g}x30"), tokens], "30m", set()),
        ("accept low, not generating", [_s(rig, acc, f"{low}x30"), flat], "30m", set()),
        (
            "accept low on one DP rank of two",
            [
                _s(rig, acc, f"{low}x30", 'dp_rank="1"'),
                _s(rig, acc, f"{good}x30", 'dp_rank="0"'),
                tokens,
            ],
            "30m",
            {"DsparkAcceptanceCollapse"},
        ),
        (
            "accept low across a counter reset",
            [_s(rig, acc, f"{low}x30"), reset],
            "30m",
            {"DsparkAcceptanceCollapse"},
        ),
        (
            "5xx at 5% of responses",
            [
                _s(rig, "sglang:http_responses_total", "0+3x30", 'status_code="500"'),
                _s(rig, "sglang:http_responses_total", "0+57x30", 'status_code="200"'),
            ],
            "30m",
            set(),
        ),
        (
            "5xx at 10% of responses",
            [
                _s(rig, "sglang:http_responses_total", "0+6x30", 'status_code="503"'),
                _s(rig, "sglang:http_responses_total", "0+54x30", 'status_code="200"'),
            ],
            "30m",
            {"ServerErrors"},
        ),
        ("down 1 minute", [_s(rig, "up", "1x27 0x1")], "29m", set()),
        ("down 2 minutes", [_s(rig, "up", "1x26 0x2")], "29m", {"RigDown"}),
    ]
    if full is not None:
        line = -(-monitoring.SATURATION * full // 1)  # the first whole number on the line
        cases += [
            (
                "queue, running one short of the line",
                [
                    _s(rig, "sglang:num_queue_reqs", "3x30"),
                    _s(rig, "sglang:num_running_reqs", f"{line - 1:g}x30"),
                ],
                "30m",
                set(),
            ),
            (
                "queue, running on the line",
                [
                    _s(rig, "sglang:num_queue_reqs", "3x30"),
                    _s(rig, "sglang:num_running_reqs", f"{line:g}x30"),
                ],
                "30m",
                {"QueueSaturated"},
            ),
        ]
    return cases


def cases(t: monitoring.Thresholds) -> list[tuple[str, list[dict], str, set[str]]]:
    out = []
    for name, (bad, healthy, at, _labels) in alert_cases(t).items():
        out.append((f"{name} firing", bad, at, {name}))
        out.append((f"{name} healthy", healthy, at, set()))
    return out + edge_cases(t)


def thresholds(rig: str) -> monitoring.Thresholds:
    if rig == "auto":
        return monitoring.auto_thresholds(RECIPES)
    return monitoring.thresholds(next(r for r in RECIPES if r.name == rig))


@pytest.mark.parametrize("rig", RIGS)
def test_watch_fires_exactly_when_promtool_does(rig, tmp_path):
    t = thresholds(rig)
    (group,) = yaml.safe_load((monitoring.FOLDER / "rules" / f"{rig}.yml").read_text())["groups"]
    rules = {r["alert"]: r for r in group["rules"] if "alert" in r}
    tests = []
    for what, series, at, expected in cases(t):
        fired = watch_fires(t, series, at)
        assert set(fired) == expected, (rig, what, fired)
        checks = [
            {
                "eval_time": at,
                "alertname": name,
                "exp_alerts": [
                    {
                        "exp_labels": {**labels, **rules[name]["labels"]},
                        "exp_annotations": _annotations(rules[name], labels),
                    }
                    for labels in fired.get(name, [])
                ],
            }
            for name in rules
        ]
        tests.append(
            {"name": what, "interval": "1m", "input_series": series, "alert_rule_test": checks}
        )
    shutil.copytree(monitoring.FOLDER / "rules", tmp_path / "rules")
    spec = {"rule_files": [f"rules/{rig}.yml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run(
        [promtool(), "test", "rules", "tests.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "SUCCESS" in result.stdout
