"""--compare-url: the same temperature-0 prompts to the server without
speculative decoding. Two healthy stand-ins agree; one whose near-ties
resolve the other way (drift, what healthy numerics do) passes; one that
swaps words under load fails, on ground truth and on agreement."""

import pytest

from tests.integration.conftest import check, verdicts
from verify import compare

ONLY = ["--only", "health,models,one-token,compare", "--soak-concurrency", "32"]


def _compare(verify, target, reference, *extra):
    code, report = verify(
        "--base-url", target.base_url, "--compare-url", reference.base_url, *ONLY, *extra
    )
    return code, check(report, "compare")


def test_two_healthy_servers_agree(fake, verify):
    code, result = _compare(verify, fake(), fake())
    assert code == 0 and result["verdict"] == "pass", result
    m = result["metrics"]
    assert m["pairs"] == 32 and m["identical_fraction"] == 1.0 and m["token_agreement"] == 1.0
    assert "exact-copy" in m["by_kind"] and "tool-flights" in m["by_kind"]
    assert "identical 32/32" in " ".join(result["evidence"])


def test_healthy_numerics_drift_passes_and_is_reported(fake, verify):
    code, result = _compare(verify, fake("drift"), fake())
    m = result["metrics"]
    assert code == 0, result
    assert m["identical_fraction"] < 1.0
    assert compare.MIN_AGREEMENT < m["token_agreement"] < 1.0
    first = m["first_divergence"]
    assert first["reference"] != first["speculative"] and first["min_char"] > 0
    assert first["kind"] in ("chat-code", "chat-table", "chat-list", "chat-think")
    assert "first divergence at char" in " ".join(result["evidence"])


def test_word_substitutions_under_load_fail(fake, verify):
    code, result = _compare(verify, fake("substitute"), fake())
    m = result["metrics"]
    assert code == 1 and result["verdict"] == "fail", result
    assert "right without speculative decoding and wrong with it" in result["problem"]
    assert m["token_agreement"] < compare.MIN_AGREEMENT < 0.95
    assert m["first_divergence"]["min_token"] >= 0


def test_agreement_floor_alone_fails_a_drifting_server(fake, verify):
    code, result = _compare(verify, fake("drift"), fake(), "--compare-min-agreement", "0.999")
    assert code == 1 and "token agreement" in result["problem"]
    assert "below 1.00" in result["problem"]


def test_compare_is_off_unless_asked(fake, verify):
    server = fake()
    code, report = verify("--base-url", server.base_url, "--only", "health,models,compare")
    assert code == 0 and "compare" not in verdicts(report)
    assert check(report, "compare")["problem"] == "not asked for (--compare-url)"


@pytest.mark.parametrize(
    "args, text",
    [
        (["--compare-url", "nonsense"], "--compare-url"),
        (
            ["--compare-min-agreement", "1.5", "--compare-url", "http://127.0.0.1:9"],
            "between 0 and 1",
        ),
    ],
)
def test_bad_compare_options(args, text, fake, verify, capsys):
    server = fake()
    code, _ = verify("--base-url", server.base_url, *args)
    assert code == 2 and text in capsys.readouterr().err


def test_unreachable_or_same_reference(fake, verify, capsys):
    server = fake()
    code, _ = verify("--base-url", server.base_url, "--compare-url", server.base_url + "/v1")
    assert code == 2 and "--no-spec" in capsys.readouterr().err
    code, _ = verify("--base-url", server.base_url, "--compare-url", "http://127.0.0.1:9")
    out = capsys.readouterr().out
    assert code == 2 and "cannot reach http://127.0.0.1:9" in out
