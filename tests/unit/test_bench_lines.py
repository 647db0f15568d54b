"""Reading sglang's benchmark lines: recorded lines in the real format, a
failed run, a partial one and a missing field."""

from __future__ import annotations

import json
import math

import pytest

from sm12x.bench import lines
from sm12x.versions import load_versions
from tests.support import bench_cli
from tests.support.cli import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "bench"

pytestmark = pytest.mark.wheels  # sglang's real benchmark code, from each release's wheel


def load(name: str) -> dict:
    return lines.parse_line((FIXTURES / name).read_text().strip())


@pytest.mark.parametrize(
    "name", ["c16.json", "c32.json", "c64.json", "partial-c64.json", "all-failed-c16.jsonl"]
)
def test_fixtures_have_exactly_sglangs_fields_in_its_order(name):
    keys = list(json.loads((FIXTURES / name).read_text(), parse_constant=float))
    # Recorded from sglang 0.5.16; the pinned sglang writes the same fields in
    # the same order (and the next test checks every patched release).
    assert keys == bench_cli.result_keys(load_versions()["SGLANG_VERSION"])


def test_missing_field_fixture_lacks_only_p99_itl():
    keys = set(json.loads((FIXTURES / "missing-field-c32.json").read_text()))
    assert set(bench_cli.result_keys(load_versions()["SGLANG_VERSION"])) - keys == {"p99_itl_ms"}


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17", "0.5.18"])
def test_the_fields_bench_reads_exist_in_every_patched_release(version):
    keys = set(bench_cli.result_keys(version))
    for _name, source, *_ in lines.METRICS:
        assert source in keys
    for _name, source in lines.EXTRA_FIELDS:
        assert source in keys
    assert set(lines.REQUIRED_FIELDS) <= keys
    assert "tag" in keys and "max_concurrency" in keys


def test_healthy_run():
    outcome = lines.judge(load("c16.json"), 16, 160)
    assert outcome.status == "ok" and outcome.problems == []
    assert outcome.metrics["output_tokens_per_s"] == 701.5
    assert outcome.metrics["mean_itl_ms"] == 19.4
    assert outcome.metrics["p99_itl_ms"] == 48.0
    assert outcome.metrics["accept_length"] == 3.11
    assert outcome.extra["duration_s"] == pytest.approx(160 * 512 / 701.5)
    assert outcome.completed == 160


def test_all_requests_failed_line_with_nan():
    text = (FIXTURES / "all-failed-c16.jsonl").read_text()
    assert "NaN" in text and "Infinity" in text  # what sglang's json.dumps writes
    line = lines.parse_line(text.strip())
    assert line["mean_e2e_latency_ms"] is None and line["request_rate"] is None
    outcome = lines.judge(line, 16, 160)
    assert outcome.status == "failed"
    assert "no request completed" in outcome.problems[0]
    # sglang's zero throughput and 0.0 TTFT of a failed run are not figures.
    assert all(value is None for value in outcome.metrics.values())


def test_partial_run():
    outcome = lines.judge(load("partial-c64.json"), 64, 640)
    assert outcome.status == "partial"
    assert "only 602 of 640 requests completed" in outcome.problems[0]
    assert outcome.metrics["output_tokens_per_s"] == 1180.0


def test_missing_field_and_null_acceptance():
    outcome = lines.judge(load("missing-field-c32.json"), 32, 320)
    assert outcome.status == "ok"
    assert outcome.missing_fields == ["p99_itl_ms"]
    assert outcome.metrics["p99_itl_ms"] is None
    assert outcome.metrics["accept_length"] is None
    assert any("no p99_itl_ms field" in p for p in outcome.problems)
    assert any("accept_length is null" in p for p in outcome.problems)


def test_no_line_and_not_a_benchmark_line():
    assert lines.judge(None, 16, 160).status == "failed"
    outcome = lines.judge({"completed": 5}, 16, 160)
    assert outcome.status == "failed" and "output_throughput" in outcome.problems[0]


def test_read_lines_reports_bad_lines_by_number():
    text = (FIXTURES / "c16.json").read_text() + "\n{broken\n[1, 2]\n"
    parsed = lines.read_lines(text)
    assert isinstance(parsed[0], dict)
    assert isinstance(parsed[1], lines.LineError) and str(parsed[1]).startswith("line 3")
    assert isinstance(parsed[2], lines.LineError) and "not a JSON object" in str(parsed[2])


def test_tag_round_trip():
    tag = lines.make_tag(32, 320)
    assert lines.parse_tag(tag) == (32, 320)
    assert lines.parse_tag("my-own-tag") is None and lines.parse_tag(None) is None
    line = load("c32.json")
    assert lines.concurrency_of(line) == 32 and lines.num_prompts_of(line) == 320
    line["tag"] = None
    assert lines.concurrency_of(line) == 32 and lines.num_prompts_of(line) is None


def test_non_finite_numbers_never_reach_metrics():
    line = load("c16.json")
    line["p99_itl_ms"] = math.inf
    assert lines.judge(line, 16, 160).metrics["p99_itl_ms"] is None
