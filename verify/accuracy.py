"""`--accuracy`: a public benchmark through lm-eval, gated on the recipe's floor.

lm-eval (`pip install 'sm12x[accuracy]'`) runs the task against the endpoint
as `local-chat-completions` (the chat template applied server side, no
tokenizer on the client), loads the dataset itself (Hugging Face, cached),
and grades every answer. verify counts the correct ones, puts a 95% Wilson
interval around the accuracy, shows it beside published figures, and fails
when the accuracy is below the floor: `--accuracy-floor`, else the recipe's
`verify.accuracy.floor` (its task must be the one run).

The default task is sm12x_gsm8k (lm_eval_tasks/sm12x_gsm8k.yaml): GSM8K's
1,319 test questions as a thinking chat model is asked them. `--accuracy-task`
takes any lm-eval task name, or a task YAML file (its folder is added to
lm-eval's task paths).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from verify.context import Context
from verify.result import Evidence

TASKS_DIR = Path(__file__).with_name("lm_eval_tasks")
DEFAULT_TASK = "sm12x_gsm8k"
METRIC = "exact_match"
GATE_FILTER = "flexible-extract"  # graded on the last number, as the references are
Z95 = 1.959964


@dataclass(frozen=True)
class Reference:
    """A published accuracy to show beside the measured one."""

    accuracy: float
    config: str
    source: str
    correct: int | None = None
    total: int | None = None
    url: str | None = None

    def __str__(self) -> str:
        counts = f"{self.correct:,}/{self.total:,} = " if self.correct is not None else ""
        return f"{counts}{self.accuracy:.2%} ({self.config}; {self.source})"


# Figures about the model, whatever the rig (the rigs' own are in their
# recipes, verify.accuracy.references). Not comparable one to one: other
# prompts, shots and graders; shown for scale, never gated on.
MODEL_REFERENCES = {
    "sm12x_gsm8k": (
        Reference(
            0.908,
            "DeepSeek-V4-Flash-Base, the base model, 8-shot exact match",
            "DeepSeek's model card (DeepSeek-V4-Flash, base model table)",
            url="https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash",
        ),
        Reference(
            0.954,
            "DeepSeek-V4-Flash, sglang with EAGLE, 8-shot, sglang's "
            "benchmark/gsm8k/bench_sglang.py, 1,319 questions",
            "sglang pull request #25052",
            url="https://github.com/sgl-project/sglang/pull/25052",
        ),
    ),
}


@dataclass(frozen=True)
class AccuracyOptions:
    task: str = DEFAULT_TASK  # an lm-eval task name or a task YAML path
    limit: int | None = None  # questions; None: the whole test split
    floor: float = 0.0
    floor_source: str = ""
    concurrency: int = 16
    references: tuple[Reference, ...] = field(default_factory=tuple)


def wilson(correct: int, total: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (sound near 0 and 1, unlike
    the normal approximation lm-eval's stderr is)."""
    if total == 0:
        return 0.0, 1.0
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def task_name(task: str) -> tuple[str, list[str]]:
    """(the lm-eval task name, extra task folders) for a name or a YAML path."""
    path = Path(task)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ValueError(f"--accuracy-task {task}: no such file")
        import yaml

        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict) or not data.get("task"):
            raise ValueError(f"--accuracy-task {task}: not an lm-eval task file (no `task:`)")
        return str(data["task"]), [str(path.resolve().parent)]
    return task, []


def _counts(samples: list[dict], filter_name: str | None) -> tuple[int, int, list[dict]]:
    rows = [s for s in samples if s.get("filter") == filter_name]
    wrong = [s for s in rows if not s.get(METRIC)]
    return len(rows) - len(wrong), len(rows), wrong


def evaluate(
    base_url: str, model: str, api_key: str | None, options: AccuracyOptions, timeout: float
) -> dict:
    """Run lm-eval; its results dict (with per-sample logs)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    name, extra = task_name(options.task)
    for noisy in ("lm-eval", "lm_eval", "httpx", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    model_args = {
        "base_url": base_url.rstrip("/") + "/v1/chat/completions",
        "model": model,
        "num_concurrent": options.concurrency,
        "max_retries": 2,
        "timeout": int(timeout),
        "tokenizer_backend": "none",
        "tokenized_requests": False,
    }
    if api_key:
        model_args["header"] = {"Authorization": f"Bearer {api_key}"}
    # lm-eval's own thousands of task files take seconds to index: only when
    # the task is one of them.
    ours = name == DEFAULT_TASK or bool(extra)
    manager = TaskManager(include_path=[str(TASKS_DIR), *extra], include_defaults=not ours)
    if name not in manager.all_tasks:
        raise ValueError(
            f"lm-eval knows no task {name!r} (sm12x's own: {DEFAULT_TASK}; "
            "or pass a task YAML file)"
        )
    return lm_eval.simple_evaluate(
        model="local-chat-completions",
        model_args=model_args,
        tasks=[name],
        task_manager=manager,
        limit=options.limit,
        apply_chat_template=True,
        log_samples=True,
        bootstrap_iters=0,
        verbosity="WARNING",
    )


def accuracy(ctx: Context, ev: Evidence) -> None:
    options = ctx.options.accuracy
    assert isinstance(options, AccuracyOptions)  # registered only with --accuracy
    name, _ = task_name(options.task)
    ep = ctx.endpoint
    ev.saw(
        f"lm-eval task {name} ({options.task}), "
        f"{options.limit or 'all'} questions, {options.concurrency} in flight, "
        f"model {ctx.model!r} at {ep.base_url}"
    )
    if ctx.model is None:
        ev.fail(
            "no model id to ask lm-eval for",
            "the server's /v1/models listed none (see the models check)",
            "fix the models check's failure first",
        )
    try:
        results = evaluate(ep.base_url, ctx.model, ep.api_key, options, ep.timeout)
    except ValueError as exc:
        ev.fail(
            str(exc),
            "the task is not one lm-eval can load",
            "check --accuracy-task (an lm-eval task name or a task YAML file)",
        )
    except Exception as exc:  # noqa: BLE001 - lm-eval, datasets and aiohttp raise many kinds
        text = f"{type(exc).__name__}: {str(exc)[:200]}"
        if "ClientResponseError" in text or "ClientConnector" in text or "Timeout" in text:
            cause = (
                "requests to the server failed (after lm-eval's retries): it rejected, "
                "dropped or stalled them"
            )
            fix = "run verify without --accuracy first; it names the server's problem"
        else:
            cause = (
                "lm-eval could not run the task: the dataset could not be loaded (it "
                "comes from the Hugging Face Hub on first use) or the task is broken"
            )
            fix = (
                "check network access to huggingface.co (or a filled HF_DATASETS cache), "
                "and that `python -c 'import lm_eval'` works"
            )
        ev.fail(f"lm-eval failed: {text}", cause, fix)
    samples = (results.get("samples") or {}).get(name) or []
    filters = list(dict.fromkeys(s.get("filter") for s in samples))
    gate = GATE_FILTER if GATE_FILTER in filters else (filters[0] if filters else None)
    correct, total, wrong = _counts(samples, gate)
    if total == 0:
        ev.fail(
            f"lm-eval graded no sample of {name} (filters {filters})",
            "the task has no test documents, or lm-eval changed its output format",
            "run `lm_eval --tasks NAME --limit 2 --log_samples` by hand to see",
        )
    value = correct / total
    low, high = wilson(correct, total)
    for other in filters:
        if other != gate:
            c, t, _ = _counts(samples, other)
            ev.saw(f"{other}: {c}/{t} = {c / t:.2%}")
    ev.metrics.update(
        {
            "task": name,
            "filter": gate,
            "correct": correct,
            "total": total,
            "accuracy": value,
            "ci95": [low, high],
            "floor": options.floor,
            "floor_source": options.floor_source,
            "references": [
                {
                    "accuracy": r.accuracy,
                    "correct": r.correct,
                    "total": r.total,
                    "config": r.config,
                    "source": r.source,
                    "url": r.url,
                }
                for r in options.references
            ],
        }
    )
    ev.saw(
        f"{gate}: {correct}/{total} = {value:.2%} (95% CI {low:.2%}-{high:.2%}); floor "
        f"{options.floor:.2%} ({options.floor_source})"
    )
    for ref in options.references:
        ev.saw(f"reference: {ref}")
    for sample in wrong[:2]:
        answer = (sample.get("filtered_resps") or [""])[0]
        ev.saw(
            f"wrong: doc {sample.get('doc_id')}: target {str(sample.get('target'))[-20:]!r}, "
            f"answered {str(answer)[:40]!r}"
        )
    if value < options.floor:
        ev.fail(
            f"accuracy {value:.2%} ({correct}/{total}, 95% CI {low:.2%}-{high:.2%}) below "
            f"the floor {options.floor:.2%} ({options.floor_source})",
            "the served model answers worse than this rig should: corrupted tokens "
            "(speculative decoding, a kernel), a wrong checkpoint revision or quantisation, "
            "or thinking off / too small a token budget for the task",
            "run the soak and --compare-url against `sm12x launch --no-spec`; check the "
            "checkpoint revision with `sm12x doctor`; with few questions (--accuracy-limit) "
            "the interval is wide: rerun with more",
        )
