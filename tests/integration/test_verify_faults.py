"""verify against the fake sglang (sglang's real DeepSeek-V4 parsers inside):
healthy passes; each fault is caught by the checks meant for it, by no
unrelated one, and with the cause named."""

import pytest

from tests.integration.conftest import SMALL_SOAK, check, verdicts

TOOL_CHECKS = {"tools", "tools-stream", "tools-parallel", "tool-choice", "soak"}
STREAMED_TOOL_CHECKS = {"tools-stream", "tools-parallel", "tool-choice", "soak"}

# fault -> (checks that must fail, one check to read, text its cause/problem must hold)
CASES = {
    "loop": ({"soak"}, "soak", "repeating_tail"),
    "salad": ({"soak"}, "soak", "distinct_words"),
    "think-leak": ({"reasoning-on", "soak"}, "reasoning-on", "</think> inside"),
    "no-reasoning-parser": ({"reasoning-on", "soak"}, "reasoning-on", "--reasoning-parser"),
    "no-tool-parser": (TOOL_CHECKS, "tools", "--tool-call-parser deepseekv4"),
    "bad-tool-json": (TOOL_CHECKS, "tools", "break its schema"),
    "truncated-tool-stream": (STREAMED_TOOL_CHECKS, "tools-stream", "not JSON"),
    "tool-id-change": (STREAMED_TOOL_CHECKS, "tools-stream", "id of call 0 changed"),
    "wrong-finish-reason": (TOOL_CHECKS, "tools", "finish_reason 'stop' with tool calls"),
    "no-usage": ({"chat", "raw-stream"}, "chat", "no usage"),
    "no-done": ({"raw-stream", "soak"}, "raw-stream", "without 'data: [DONE]'"),
    "no-spec": ({"spec"}, "spec", "--speculative-algorithm DSPARK"),
    "low-accept": ({"spec"}, "spec", "below the floor"),
    # Wrong tokens in fluent text: no repetition detector fires, ground truth does.
    "substitute": ({"soak"}, "soak", "differs at char"),
    "nonword": ({"soak"}, "soak", "nonwords"),
    "drift": (set(), "soak", ""),  # healthy speculative numerics: see test_compare.py
}


def _text(result: dict) -> str:
    return " ".join(
        [str(result.get(k) or "") for k in ("problem", "cause", "fix")] + result["evidence"]
    )


def test_healthy_server_passes_every_check(fake, verify):
    server = fake()
    code, report = verify("--base-url", server.base_url, *SMALL_SOAK)
    assert code == 0, [c for c in report["checks"] if c["verdict"] != "pass"]
    assert set(verdicts(report).values()) == {"pass"}
    soak = check(report, "soak")["metrics"]
    assert soak["requests"] == 32 and soak["failed"] == 0 and soak["pass_k"] == 1.0
    assert soak["ttft_s"]["p50"] > 0 and soak["output_tokens_per_s"] > 0
    assert check(report, "spec")["metrics"]["accept_length"] == pytest.approx(3.4)


@pytest.mark.parametrize("fault", sorted(CASES))
def test_fault_is_caught_by_its_check_only(fault, fake, verify):
    must_fail, reader, text = CASES[fault]
    server = fake(fault)
    code, report = verify("--base-url", server.base_url, *SMALL_SOAK)
    assert code == (1 if must_fail else 0)
    failed = {n for n, v in verdicts(report).items() if v != "pass"}
    assert failed == must_fail, report
    assert text in _text(check(report, reader))


@pytest.mark.parametrize("fault", ["substitute", "nonword"])
def test_wrong_tokens_are_named_as_such(fault, fake, verify):
    """The soak says what it saw: wrong tokens (not loops), the first
    difference with the text around it, the cause and the comparison fix."""
    server = fake(fault)
    code, report = verify(
        "--base-url", server.base_url, *SMALL_SOAK, "--only", "health,models,one-token,soak"
    )
    soak = check(report, "soak")
    assert code == 1 and "wrong tokens in otherwise fluent output" in soak["cause"]
    assert "--no-spec" in soak["fix"]
    repetition = ("repeating_tail", "distinct_", "compression_ratio", "duplicate_lines")
    assert not any(r in soak["problem"] for r in repetition), soak["problem"]
    if fault == "substitute":
        wrong = {k: v for k, v in soak["metrics"]["exact"].items() if v["wrong"]}
        assert "exact-copy" in wrong, soak["metrics"]["exact"]
        first = wrong["exact-copy"]["first"]
        assert first["expected"] != first["received"] and first["position"] >= 0
        assert any(
            line.startswith("exact-copy: ") and "expected '" in line for line in soak["evidence"]
        )


def test_stalled_stream_times_out_and_never_hangs(fake, verify):
    server = fake("stall")
    code, report = verify("--base-url", server.base_url, *SMALL_SOAK, "--stall-timeout", "1")
    assert code == 1
    v = verdicts(report)
    # Non-streamed checks still pass; every streamed one fails on the stall limit.
    assert v["chat"] == v["tools"] == v["tools-multi-turn"] == "pass"
    assert v["chat-stream"] == v["raw-stream"] == v["tools-stream"] == v["soak"] == "fail"
    assert "stopped sending" in check(report, "chat-stream")["cause"]
    assert "stalled" in " ".join(check(report, "soak")["evidence"])


def test_server_that_never_answers(fake, verify):
    server = fake("hang")
    code, report = verify("--base-url", server.base_url, "--stall-timeout", "1")
    assert code == 1
    assert verdicts(report)["health"] == "fail"
    assert set(verdicts(report).values()) == {"fail", "not-run"}


def test_http_500(fake, verify):
    server = fake("http-500")
    code, report = verify("--base-url", server.base_url, *SMALL_SOAK)
    assert code == 1
    v = verdicts(report)
    assert v["health"] == v["models"] == "pass"
    assert v["one-token"] == "fail" and v["soak"] == v["spec"] == "not-run"
    assert "HTTP 500" in check(report, "one-token")["problem"]


def test_router_info_makes_spec_not_run_unless_metrics_url(fake, verify):
    router_like = fake("router-info")
    code, report = verify("--base-url", router_like.base_url, *SMALL_SOAK)
    assert code == 1
    spec = check(report, "spec")
    assert spec["verdict"] == "not-run" and "--metrics-url" in spec["problem"]
    backend = fake()
    backend.state.generated = 1  # the backend has served traffic
    code, report = verify(
        "--base-url", router_like.base_url, *SMALL_SOAK, "--metrics-url", backend.base_url
    )
    assert code == 0 and check(report, "spec")["verdict"] == "pass"


def test_floor_flag(fake, verify):
    server = fake()
    code, report = verify(
        "--base-url",
        server.base_url,
        "--only",
        "health,models,one-token,spec",
        "--min-accept-length",
        "3.5",
    )
    assert code == 1 and "below the floor 3.50" in check(report, "spec")["problem"]


def test_api_key(fake, verify, monkeypatch):
    server = fake(api_key="sekrit")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("SM12X_API_KEY", raising=False)
    code, report = verify("--base-url", server.base_url, "--only", "health,models")
    assert code == 1 and "API key" in check(report, "models")["cause"]
    monkeypatch.setenv("SM12X_API_KEY", "sekrit")
    code, report = verify("--base-url", server.base_url, "--only", "health,models,one-token")
    assert code == 0
