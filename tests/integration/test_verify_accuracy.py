"""--accuracy end to end: lm-eval's local-chat-completions against the stand-in,
through sm12x's own GSM8K task file with its dataset swapped for a small local
JSONL (the same prompt, generation settings, filters and metric)."""

import importlib.util
import json
from pathlib import Path

import pytest

from tests.integration.conftest import check
from verify import accuracy
from verify.cli import _accuracy_options, parser

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "fixtures" / "accuracy" / "mini-gsm8k.jsonl"
ONLY = ["--only", "health,models,one-token,accuracy"]

# Marked per test, not skipped for the module: the same tests are collected
# with and without lm-eval installed, and those that do not need it run.
needs_lm_eval = pytest.mark.skipif(
    importlib.util.find_spec("lm_eval") is None,
    reason="the [accuracy] extra (scripts/test installs it)",
)


@pytest.fixture
def task(tmp_path) -> Path:
    """sm12x_gsm8k over the local JSONL: 8 arithmetic questions the stand-in
    solves, 2 word problems it cannot (so a healthy run scores 8/10)."""
    path = tmp_path / "local_gsm8k.yaml"
    path.write_text(
        json.dumps(
            {
                "include": str(accuracy.TASKS_DIR / "sm12x_gsm8k.yaml"),
                "task": "sm12x_gsm8k_local",
                "dataset_path": "json",
                "dataset_name": None,
                "dataset_kwargs": {"data_files": {"test": str(DATA)}},
            }
        )
    )
    return path


@needs_lm_eval
def test_accuracy_runs_through_lm_eval_and_passes_above_the_floor(fake, verify, task):
    server = fake(api_key="sekrit")
    code, report = verify(
        "--base-url",
        server.base_url,
        "--api-key",
        "sekrit",
        *ONLY,
        "--accuracy",
        "--accuracy-task",
        str(task),
        "--accuracy-floor",
        "0.7",
        "--accuracy-concurrency",
        "4",
    )
    result = check(report, "accuracy")
    assert code == 0 and result["verdict"] == "pass", result
    m = result["metrics"]
    assert (m["task"], m["filter"], m["correct"], m["total"]) == (
        "sm12x_gsm8k_local",
        "flexible-extract",
        8,
        10,
    )
    assert m["ci95"] == pytest.approx(list(accuracy.wilson(8, 10)))
    assert m["floor"] == 0.7 and m["floor_source"] == "--accuracy-floor"
    evidence = " ".join(result["evidence"])
    assert "strict-match: 8/10" in evidence and "80.00% (95% CI 49.02%-94.33%)" in evidence
    assert "wrong: doc 8" in evidence


@needs_lm_eval
def test_accuracy_below_the_floor_fails_with_the_interval(fake, verify, task):
    server = fake()
    code, report = verify(
        "--base-url",
        server.base_url,
        *ONLY,
        "--accuracy",
        "--accuracy-task",
        str(task),
        "--accuracy-floor",
        "0.9",
        "--accuracy-limit",
        "9",
    )
    result = check(report, "accuracy")
    assert code == 1 and result["verdict"] == "fail"
    assert "accuracy 88.89% (8/9, 95% CI" in result["problem"]
    assert "below the floor 90.00% (--accuracy-floor)" in result["problem"]
    assert "--no-spec" in result["fix"]


def test_wilson_interval():
    """Against the closed form (2k + z^2 -+ z sqrt(z^2 + 4k(n-k)/n)) / 2(n + z^2),
    worked out separately: 1,263/1,319 -> 94.53%-96.72%."""
    low, high = accuracy.wilson(1263, 1319)
    assert (low, high) == pytest.approx((0.945269, 0.967161), abs=1e-6)
    assert accuracy.wilson(0, 10)[0] == 0.0 and accuracy.wilson(10, 10)[1] == pytest.approx(1.0)


def test_floor_and_references_come_from_the_recipe():
    args = parser().parse_args(["--accuracy", "--recipe", "rtx-pro-6000-tp2"])
    options = _accuracy_options(args)
    assert options.floor == 0.92 and options.floor_source == "recipe rtx-pro-6000-tp2"
    assert options.task == "sm12x_gsm8k" and options.limit is None
    rig = [r for r in options.references if r.correct == 1263]
    assert rig and rig[0].total == 1319 and str(rig[0]).startswith("1,263/1,319 = 95.75%")
    assert any("DeepSeek's model card" in r.source for r in options.references)
    # Another task: the recipe's floor is not for it.
    args = parser().parse_args(
        ["--accuracy", "--recipe", "rtx-pro-6000-tp2", "--accuracy-task", "gsm8k_cot_llama"]
    )
    with pytest.raises(Exception, match="needs a floor for gsm8k_cot_llama"):
        _accuracy_options(args)


@pytest.mark.parametrize(
    "args, text",
    [
        (["--accuracy"], "--accuracy needs a floor"),
        (["--accuracy", "--accuracy-floor", "92"], "between 0 and 1"),
        (["--accuracy", "--accuracy-floor", "0.9", "--accuracy-limit", "0"], "at least 1"),
        (
            ["--accuracy", "--accuracy-floor", "0.9", "--accuracy-task", "missing.yaml"],
            "no such file",
        ),
    ],
)
def test_bad_accuracy_options(args, text, fake, verify, capsys):
    server = fake()
    code, _ = verify("--base-url", server.base_url, *args)
    assert code == 2 and text in capsys.readouterr().err


@needs_lm_eval
def test_unknown_lm_eval_task_fails_the_check(fake, verify):
    server = fake()
    code, report = verify(
        "--base-url",
        server.base_url,
        *ONLY,
        "--accuracy",
        "--accuracy-task",
        "no_such_task_anywhere",
        "--accuracy-floor",
        "0.5",
    )
    result = check(report, "accuracy")
    assert code == 1 and "lm-eval knows no task 'no_such_task_anywhere'" in result["problem"]


def test_without_lm_eval_one_clear_error(fake, verify, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "lm_eval" else real(name, *a)
    )
    server = fake()
    code, _ = verify("--base-url", server.base_url, "--accuracy", "--accuracy-floor", "0.9")
    err = capsys.readouterr().err
    assert code == 2 and "pip install 'sm12x[accuracy]'" in err and "Traceback" not in err
