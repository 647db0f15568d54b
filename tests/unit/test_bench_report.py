"""bench's report from recorded lines: tables beside the references, the JSON
result and its schema, and the PNG chart (opened and measured)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from sm12x.bench import chart, compare
from sm12x.bench.result import BenchResult, load_schema, validate
from sm12x.recipe import load_recipe
from tests.support.cli import ROOT, run_sm12x

FIXTURES = ROOT / "tests" / "fixtures" / "bench"
WIDE = {"COLUMNS": "200"}


def recorded(tmp_path: Path, *names: str) -> Path:
    path = tmp_path / "runs.jsonl"
    path.write_text("".join((FIXTURES / n).read_text() for n in names))
    return path


def report(tmp_path: Path, *names: str, recipe: str = "rtx-pro-6000-tp4", extra=()):
    out = tmp_path / "out"
    result = run_sm12x(
        "bench",
        "--from-jsonl",
        str(recorded(tmp_path, *names)),
        "--recipe",
        recipe,
        "--out",
        str(out),
        *extra,
        env=WIDE,
    )
    data = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else None
    return result, data, out


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    # Ends with the IEND chunk (length 0, type, its fixed CRC): not truncated.
    assert data[-12:] == b"\x00\x00\x00\x00IEND\xaeB`\x82", "truncated PNG"
    # It decodes, and something is drawn on it (not a blank canvas).
    from PIL import Image

    with Image.open(path) as image:
        image.load()
        assert image.size == (width, height)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50
    return width, height


def test_three_healthy_runs(tmp_path):
    result, data, out = report(tmp_path, "c16.json", "c32.json", "c64.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    # A table per concurrency with the references beside, as ratios marked `~`
    # (no shipped reference is comparable).
    for c in (16, 32, 64):
        assert f"concurrency {c}: ok, {10 * c}/{10 * c} requests" in result.stdout
    assert "701.5" in result.stdout and "697.0" in result.stdout and "~1.01x" in result.stdout
    assert "NOT comparable, context only" in result.stdout
    assert "ref 1~" in result.stdout and "ref 2~" in result.stdout  # two sources, numbered once
    assert result.stdout.count("ref 1: ") == 1
    # The JSON result: valid against the schema, every run ok, ratios computed.
    assert validate(data) == []
    jsonschema.validate(data, load_schema())
    assert data["passed"] is True and [r["status"] for r in data["runs"]] == ["ok"] * 3
    c16 = [c for c in data["comparisons"] if c["concurrency"] == 16]
    assert {c["comparable"] for c in c16} == {False}
    seed = next(c for c in c16 if "33407" in c["source"])
    tps = next(f for f in seed["figures"] if f["metric"] == "output_tokens_per_s")
    assert tps["ratio"] == pytest.approx(701.5 / 697)
    assert data["environment"]["sglang_version"] == "0.5.16"  # from the lines' server_info
    assert data["server"]["tp_size"] == 4 and data["server"]["speculative_dspark_block_size"] == 4
    assert data["runs"][0]["sglang_line"]["tag"] == "sm12x:c16:n160"
    assert "server_info" not in data["runs"][0]["sglang_line"]
    # The chart: a real PNG of the size drawn (12 x 4.8 in at 100 dpi).
    assert png_size(out / "chart.png") == (1200, 480)
    assert (out / "chart.png").stat().st_size > 20_000


def test_failed_partial_and_missing_runs_are_reported_not_hidden(tmp_path):
    result, data, out = report(
        tmp_path, "all-failed-c16.jsonl", "missing-field-c32.json", "partial-c64.json"
    )
    assert result.returncode == 1
    assert "concurrency 16: failed, 0/160 requests" in result.stdout
    assert "no request completed" in result.stdout
    assert "concurrency 64: partial, 602/640 requests" in result.stdout
    assert "sglang's line has no p99_itl_ms field" in result.stdout
    assert "2 of 3 run(s) did not complete every request: c16 failed, c64 partial" in (
        result.stderr
    )
    assert validate(data) == []
    assert data["passed"] is False
    runs = {r["concurrency"]: r for r in data["runs"]}
    assert runs[16]["status"] == "failed" and runs[16]["metrics"]["output_tokens_per_s"] is None
    assert runs[32]["missing_fields"] == ["p99_itl_ms"]
    assert runs[64]["completed"] == 602
    # A failed run has no ratio: nothing measured to compare.
    c16 = next(c for c in data["comparisons"] if c["concurrency"] == 16)
    assert all(f["ratio"] is None for f in c16["figures"])
    assert png_size(out / "chart.png") == (1200, 480)


def test_ranges_and_other_engines(tmp_path):
    result, data, _ = report(
        tmp_path,
        "c16.json",
        recipe="dgx-spark-tp2",
        extra=("--gpu", "NVIDIA GB10", "--gpu", "NVIDIA GB10"),
    )
    assert "191.0-290.0" in result.stdout and "~2.42-3.67x" in result.stdout
    tps = data["comparisons"][0]["figures"][0]
    assert tps["reference_max"] == 290 and tps["ratio_max"] == pytest.approx(701.5 / 290)
    assert data["comparisons"][0]["engine"] == "vllm"
    # The lines came from a TP4 server: judged against a TP2 recipe, bench says so.
    assert "the server runs tp_size=4, recipe dgx-spark-tp2 says 2" in result.stdout
    assert data["environment"]["gpus"] == ["NVIDIA GB10"] * 2
    assert data["environment"]["sources"]["gpus"] == "--gpu"


def test_comparable_reference_gets_a_plain_ratio():
    recipe = load_recipe("rtx-pro-6000-tp4")
    refs = [r.model_copy(update={"comparable": True}) for r in recipe.references]
    recipe = recipe.model_copy(update={"references": refs})
    data = json.loads((FIXTURES / "c16.json").read_text())
    from sm12x.bench import lines
    from sm12x.bench.main import build_run
    from sm12x.bench.report import fmt_ratio
    from sm12x.bench.result import Workload

    run = build_run(lines.judge(data, 16, 160))
    workload = Workload(
        backend="sglang",
        dataset_name="random-ids",
        dataset_path=None,
        input_len=1024,
        output_len=512,
        range_ratio=1.0,
        concurrencies=[16],
    )
    comparisons = compare.compare(recipe, [run], workload)
    assert all(c.comparable for c in comparisons)
    assert str(fmt_ratio(comparisons[0].figures[0], True)) == "1.01x"
    # Another workload is not compared at all, and bench says why.
    other = workload.model_copy(update={"input_len": 2048})
    assert compare.compare(recipe, [run], other) == []
    assert "not compared" in compare.workload_mismatches(recipe, other)[0]


def test_validate_a_submission(tmp_path):
    _, data, out = report(tmp_path, "c16.json")
    good = out / "result.json"
    result = run_sm12x("bench", "--validate", str(good))
    assert result.returncode == 0 and "a valid sm12x bench result" in result.stdout
    data["runs"][0]["status"] = "great"
    del data["environment"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    result = run_sm12x("bench", "--validate", str(bad))
    assert result.returncode == 1
    assert "'environment' is a required property" in result.stdout
    assert "great" in result.stdout
    (tmp_path / "junk.json").write_text("{")
    result = run_sm12x("bench", "--validate", str(tmp_path / "junk.json"))
    assert result.returncode == 1 and "not JSON" in result.stderr


def test_result_round_trips_through_the_model(tmp_path):
    _, data, _ = report(tmp_path, "c16.json", "c32.json")
    assert BenchResult.model_validate(data).model_dump(mode="json", by_alias=True) == data


def test_report_refuses_what_is_not_a_result(tmp_path):
    (tmp_path / "x.json").write_text('{"schema": "sm12x-bench/1"}')
    result = run_sm12x("bench", "--report", str(tmp_path / "x.json"))
    assert result.returncode == 1
    assert "is not a valid sm12x bench result" in result.stderr


def test_from_jsonl_needs_a_recipe_and_lines(tmp_path):
    path = recorded(tmp_path, "c16.json")
    result = run_sm12x("bench", "--from-jsonl", str(path))
    assert result.returncode == 1 and "--from-jsonl needs --recipe NAME" in result.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    result = run_sm12x("bench", "--from-jsonl", str(empty), "--recipe", "rtx-pro-6000-tp4")
    assert result.returncode == 1 and "no JSON line" in result.stderr


def test_chart_is_skipped_with_a_hint_without_matplotlib(tmp_path):
    """The runtime image has no matplotlib: bench still reports, and says how to get the chart."""
    path = recorded(tmp_path, "c16.json")
    out = tmp_path / "out"
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from sm12x.cli import main\n"
        f"sys.exit(main(['bench', '--from-jsonl', {str(path)!r}, '--recipe', "
        f"'rtx-pro-6000-tp4', '--out', {str(out)!r}]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    assert "chart: skipped, matplotlib is not installed: pip install 'sm12x[bench]'" in done.stdout
    assert "sm12x bench --report RESULT.json" in done.stdout
    assert (out / "result.json").exists() and not (out / "chart.png").exists()
    # Where matplotlib is (the host), --report redraws it from the result alone.
    result = run_sm12x("bench", "--report", str(out / "result.json"), env=WIDE)
    assert result.returncode == 0, result.stderr
    assert "concurrency 16: ok" in result.stdout
    assert png_size(out / "chart.png") == (1200, 480)


def test_write_chart_reports_missing_matplotlib(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert "pip install 'sm12x[bench]'" in chart.matplotlib_missing()


def test_pyproject_keeps_matplotlib_out_of_the_runtime_dependencies():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("matplotlib") for d in project["dependencies"])
    assert any(d.startswith("matplotlib") for d in project["optional-dependencies"]["bench"])


@pytest.mark.parametrize(
    ("names", "recipe"),
    [
        (("c16.json",), "rtx-pro-6000-tp4"),  # one concurrency: one point per series
        (("c16.json", "c32.json", "c64.json"), "rtx-pro-6000-tp4"),
        (("c16.json",), "dgx-spark-tp2"),  # a published range and other engines' references
        (("all-failed-c16.jsonl", "missing-field-c32.json", "partial-c64.json"), "rtx-5090-tp8"),
    ],
)
def test_the_legend_never_hides_a_measured_point(tmp_path, names, recipe):
    """On the drawn figure: no measured point lies under either legend, every one
    inside its axes, and each legend inside the figure."""
    result, data, _ = report(tmp_path, *names, recipe=recipe)
    assert data is not None, result.stdout + result.stderr
    import matplotlib.pyplot as plt

    fig = chart.draw(BenchResult.model_validate(data), load_recipe(recipe))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    try:
        for ax in fig.axes:
            points = chart.measured_points(ax)
            assert points, ax.get_ylabel()  # the test sees the measured points
            legend = ax.get_legend()
            box = legend.get_window_extent(renderer)
            assert chart.covered(box, points) == [], (ax.get_ylabel(), legend._loc)
            frame = ax.get_window_extent(renderer)
            assert all(frame.x0 <= x <= frame.x1 and frame.y0 <= y <= frame.y1 for x, y in points)
            assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
    finally:
        plt.close(fig)


def test_covered_sees_a_point_under_the_legend():
    """The check above can fail: the old placement (upper left) hid C4's only point."""
    from matplotlib.transforms import Bbox

    box = Bbox([[100, 300], [250, 400]])
    assert chart.covered(box, [(120, 350), (600, 100)]) == [(120, 350)]
    assert chart.covered(box, [(95, 350)]) == [(95, 350)]  # at the edge: still hidden
