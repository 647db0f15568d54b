"""A URL with userinfo (a password) on sglang's or the router's argv is refused.

Flags the inventory rules "no listener" still take URLs, and a URL may carry
user:password@; /proc/PID/cmdline shows it to every user of the host.
"""

from __future__ import annotations

import time

import pytest

from tests.support.cli import assert_one_clear_error, run_sm12x

SECRET = "hunter2-0123"

SGLANG = [
    ["--tool-server", f"http://bob:{SECRET}@tools.internal:8000"],
    [f"--tool-server=https://bob:{SECRET}@tools.internal"],
    ["--otlp-traces-endpoint", f"http://svc:{SECRET}@otel:4317"],
    ["--encoder-urls", "http://127.0.0.1:9000", f"HTTP://u:{SECRET}@enc:9001"],
    ["--tool-server", f"grpc+tls://:{SECRET}@tools"],  # no user, a password all the same
]
ROUTER = [
    ["--otlp-traces-endpoint", f"http://svc:{SECRET}@otel:4317"],
    ["--jwt-jwks-uri", f"https://bob:{SECRET}@idp.internal/jwks"],
    [f"--otlp-traces-endpoint=http://:{SECRET}@otel:4317"],
]


@pytest.mark.parametrize("track", ["pinned", "current"])
@pytest.mark.parametrize("extra", SGLANG, ids=lambda e: e[0][:24])
def test_launch_refuses_userinfo_in_any_url(extra, track):
    recipe = "rtx-pro-6000-tp4" if track == "pinned" else "rtx-pro-6000-tp4-v41"
    env = {"SM12X_TRACK": track}
    done = run_sm12x("launch", "--dry-run", "--recipe", recipe, "--", *extra, env=env)
    line = assert_one_clear_error(done, "carries a credential in its URL", "***@")
    assert SECRET not in done.stdout + done.stderr
    assert extra[0].split("=")[0] in line


def test_launch_refuses_userinfo_from_a_recipe_flag(tmp_path):
    from tests.support.cli import raw_recipe, write_recipe

    data = raw_recipe("rtx-pro-6000-tp4")
    data["flags"]["--tool-server"] = {
        "value": f"http://a:{SECRET}@t:1",
        "why": "a bad input to refuse",
    }
    path = write_recipe(tmp_path, data)
    done = run_sm12x("launch", "--dry-run", "--recipe", str(path))
    assert_one_clear_error(done, "recipe", "--tool-server", "carries a credential")
    assert SECRET not in done.stderr


@pytest.mark.parametrize("extra", ROUTER, ids=lambda e: e[0][:24])
def test_router_refuses_userinfo_in_any_url(extra):
    env = {"SM12X_ROUTER_WORKERS": "http://127.0.0.1:30000"}
    done = run_sm12x("router", "--dry-run", "--", *extra, env=env)
    assert_one_clear_error(done, "carries a credential in its URL")
    assert SECRET not in done.stdout + done.stderr


def test_router_refuses_userinfo_in_a_worker_url():
    env = {"SM12X_ROUTER_WORKERS": f"http://bob:{SECRET}@127.0.0.1:30000"}
    done = run_sm12x("router", "--dry-run", env=env)
    assert_one_clear_error(done, "SM12X_ROUTER_WORKERS", "carries a credential")
    assert SECRET not in done.stdout + done.stderr


def test_a_url_without_userinfo_passes():
    done = run_sm12x(
        "launch", "--dry-run", "--recipe", "rtx-pro-6000-tp4", "--",
        "--otlp-traces-endpoint", "http://127.0.0.1:4317",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_free_string_is_bounded():
    done = run_sm12x(
        "launch", "--dry-run", "--recipe", "rtx-pro-6000-tp4", "--", "--log-level", "x" * 100_000
    )
    assert_one_clear_error(done, "--log-level", "100,000 characters", "4,096")


def _best_of(check, value: str, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        check(value)
        times.append(time.perf_counter() - start)
    return min(times)


@pytest.mark.parametrize("which", ["launch", "redact"])
def test_a_long_value_without_a_url_is_scanned_in_linear_time(which):
    """The URL patterns once backtracked from every letter of a long value: a
    100,000-character --log-level took a minute to refuse. Ten times the length
    must take about ten times as long (measured here, against a baseline of the
    same run: quadratic would be a hundred times)."""
    from sm12x.http.redact import Redactor
    from sm12x.recipe.extra import check_userinfo

    def check(value: str) -> None:
        if which == "launch":
            check_userinfo(["--log-level", value], "sglang", "after --")
        else:
            Redactor([]).text(value)

    # letters, and dotted letters (a word boundary before each, for redact's \b)
    for unit in ("x", "a."):
        short = _best_of(check, unit * (10_000 // len(unit)))
        long = _best_of(check, unit * (100_000 // len(unit)))
        # The slack absorbs a preempted run on a loaded machine (load 17 on 2
        # cores once cost 0.05 s); the quadratic pattern took 54 s here.
        assert long < 30 * short + 0.5, (unit, short, long)
