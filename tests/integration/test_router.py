"""A real sglang-router (the pinned wheel, started by `sm12x router` as the
compose service does) in front of fake sglang servers running as processes.

What it shows:
- verify passes through the router, with the speculative-decoding figures
  read from a backend (--metrics-url); without it that check is not-run,
  never passed;
- a backend killed mid-run: the router notices (timed), and every request
  started after that completes on the others; verify still passes;
- the backend comes back on its port: the router takes it back (timed) and
  sends it traffic again;
- the API key is enforced by the router and reaches the backends;
- a rig listed before it is up joins when it comes up, unless that takes
  longer than --worker-startup-timeout-secs (why sm12x sets 2 h).

The health checks run with the production thresholds (3 misses to drop, 2
successes to rejoin; sm12x/deploy/router.py) at a 1 s interval instead of 10 s, so
the measured times scale by 10 in production.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time

import httpx
import pytest

from sm12x.deploy.router import HEALTH_FAILURE_THRESHOLD, HEALTH_SUCCESS_THRESHOLD
from tests.integration.conftest import SMALL_SOAK, check, verdicts
from tests.support import http_client
from tests.support.cli import assert_one_clear_error, run_sm12x
from tests.support.router import FAST_HEALTH, Backend, Router, load, wait_until


@contextlib.contextmanager
def _started():
    """Start processes through what this yields; each is stopped by its pid at the end."""
    started: list[Backend | Router] = []

    def add(thing):
        started.append(thing)
        return thing.start()

    try:
        yield add
    finally:
        for thing in reversed(started):
            thing.stop()


@pytest.fixture
def processes():
    with _started() as add:
        yield add


def backends(
    processes, tmp_path, count: int, *args: str, api_key: str | None = None
) -> list[Backend]:
    started = [
        processes(Backend(args=args, log=tmp_path / f"backend{i}.log", api_key=api_key))
        for i in range(count)
    ]
    return [b.wait_ready() for b in started]


def router_for(processes, tmp_path, urls: list[str], **kw) -> Router:
    router = processes(Router(urls, log=tmp_path / "router.log", **kw))
    router.wait_ready(len(urls))
    return router


@pytest.fixture
def three(processes, tmp_path):
    """Three rigs and a router of the test's own: for a test that kills a rig."""
    rigs = backends(processes, tmp_path, 3)
    return rigs, router_for(processes, tmp_path, [b.url for b in rigs])


@pytest.fixture(scope="module")
def shared_three(tmp_path_factory):
    """Three rigs and a router started once for the module's tests that only
    send them requests (each start is four processes: 3 fake rigs and the real
    router); a test that stops or kills one takes `three`. Every rig is
    checked healthy before each test that shares them."""
    folder = tmp_path_factory.mktemp("shared-three")
    with _started() as add:
        rigs = backends(add, folder, 3)
        yield rigs, router_for(add, folder, [b.url for b in rigs])


@pytest.fixture
def healthy_three(shared_three):
    rigs, router = shared_three
    health = router.workers_health()
    assert health == {rig.url: True for rig in rigs}, f"a shared rig is out: {health}"
    return shared_three


# --- verify through the router ---------------------------------------------------


def test_verify_passes_through_the_router(healthy_three, verify):
    rigs, router = healthy_three
    before = router.successes()
    code, report = verify("--base-url", router.url, "--metrics-url", rigs[0].url, *SMALL_SOAK)
    assert code == 0, {c["name"]: (c["verdict"], c["problem"]) for c in report["checks"]}
    assert set(verdicts(report).values()) == {"pass"}
    assert check(report, "spec")["metrics"]["accept_length"] == pytest.approx(3.4)
    # The router spread this run (the rigs are shared: counted from before it)
    # over more than one rig.
    after = router.successes()
    served = {rig.url: after.get(rig.url, 0) - before.get(rig.url, 0) for rig in rigs}
    assert sum(1 for n in served.values() if n > 0) >= 2, served


def test_without_metrics_url_spec_is_not_run_never_passed(healthy_three, verify):
    _, router = healthy_three
    code, report = verify("--base-url", router.url, *SMALL_SOAK)
    assert code == 1
    results = verdicts(report)
    assert results.pop("spec") == "not-run"
    assert set(results.values()) == {"pass"}
    assert "--metrics-url" in check(report, "spec")["problem"]


def test_the_router_answers_with_its_own_server_info(healthy_three):
    # What verify has to cope with behind sglang-router: no backend figures.
    rigs, router = healthy_three
    info = http_client.get(router.url + "/get_server_info", timeout=5).json()
    assert "workers_count" in info and "internal_states" not in info
    assert http_client.get(router.url + "/server_info", timeout=5).status_code == 404
    assert http_client.get(router.url + "/metrics", timeout=5).status_code == 404
    # Its own metrics are on the Prometheus port, one health gauge per rig.
    metrics = http_client.get(router.metrics_url, timeout=5).text
    for rig in rigs:
        assert f'smg_worker_health{{worker="{rig.url}"}} 1' in metrics


def test_stream_chunks_keep_their_fields_through_the_router(healthy_three):
    # Measured with sglang-router 0.3.2 over HTTP: chunks come through as the rig
    # wrote them, explicit nulls included (sglang writes "reasoning_content":
    # null); verify accepts explicit null fields, "role": null too.
    _, router = healthy_three
    body = {
        "model": "deepseek-ai/DeepSeek-V4-Flash-0731",
        "stream": True,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hello"}],
    }
    with httpx.stream("POST", router.url + "/v1/chat/completions", json=body, timeout=30) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0]["role"] == "assistant"
    assert all("role" not in d for d in deltas[1:])
    assert any("reasoning_content" in d and d["reasoning_content"] is None for d in deltas)
    assert "".join(d.get("content") or "" for d in deltas)


def test_the_compose_healthcheck_runs_through_the_router(healthy_three):
    _, router = healthy_three
    result = run_sm12x(
        "healthcheck",
        "--router",
        env={"SM12X_ROUTER_BIND": "127.0.0.1", "SM12X_ROUTER_PORT": str(router.port)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: deepseek-ai/DeepSeek-V4-Flash-0731 generated 1 token")


# --- a rig dies mid-run, and comes back -------------------------------------------


def test_a_dead_rig_is_routed_around_and_rejoins(three, verify, tmp_path, record_property):
    rigs, router = three
    victim = rigs[1]
    times: dict[str, float] = {}

    def kill_and_watch() -> None:
        time.sleep(2)
        times["killed"] = time.monotonic()
        victim.stop(signal.SIGKILL)  # a crash: no goodbye, connections reset
        wait_until(
            lambda: router.workers_health()[victim.url] is False,
            60,
            "the router to mark the killed rig unhealthy",
        )
        times["noticed"] = time.monotonic()
        time.sleep(3)  # keep the load on, now without the dead rig

    outcomes = load(router.url, concurrency=6, during=kill_and_watch)
    notice_s = times["noticed"] - times["killed"]
    before = [o for o in outcomes if o.start < times["killed"]]
    window = [o for o in outcomes if times["killed"] <= o.start < times["noticed"]]
    after = [o for o in outcomes if o.start >= times["noticed"]]

    # No request is lost once the router has noticed, and there was real load.
    assert len(after) >= 30, len(after)
    assert [o.detail for o in after if not o.ok] == []
    # Before the kill everything passed too (those in flight on the victim when
    # it died are the ones a crash can cut; the router cannot replay a stream).
    in_flight_cut = [o for o in before if not o.ok]
    assert all(o.end >= times["killed"] for o in in_flight_cut)
    # Noticing takes about failure_threshold x interval (1 s here, 10 s in production).
    assert notice_s < HEALTH_FAILURE_THRESHOLD * 1 + 5, notice_s

    # Still a healthy endpoint: verify passes with two rigs.
    code, report = verify("--base-url", router.url, "--metrics-url", rigs[0].url, *SMALL_SOAK)
    assert code == 0, {c["name"]: (c["verdict"], c["problem"]) for c in report["checks"]}

    # The rig comes back on its port: the router takes it back and uses it.
    victim.log = tmp_path / "backend1-again.log"
    back: dict[str, float] = {}

    def restart_and_watch() -> None:
        served_before = router.successes().get(victim.url, 0)
        victim.start().wait_ready()
        back["up"] = time.monotonic()
        wait_until(
            lambda: router.workers_health()[victim.url] is True,
            60,
            "the router to mark the rig healthy again",
        )
        back["healthy"] = time.monotonic()
        wait_until(
            lambda: router.successes().get(victim.url, 0) > served_before,
            60,
            "the returning rig to serve a request",
        )
        back["serving"] = time.monotonic()
        time.sleep(1)

    # New conversations (no cached prefix anywhere) go where the cache is smallest.
    after_rejoin = load(router.url, concurrency=6, during=restart_and_watch, fresh=True)
    assert [o.detail for o in after_rejoin if not o.ok] == []
    healthy_s, serving_s = back["healthy"] - back["up"], back["serving"] - back["up"]
    assert healthy_s < HEALTH_SUCCESS_THRESHOLD * 1 + 5, healthy_s

    figures = {
        "notice_s": round(notice_s, 2),
        "healthy_again_after_up_s": round(healthy_s, 2),
        "serving_again_after_up_s": round(serving_s, 2),
        "requests_before_kill": len(before),
        "cut_in_flight_at_kill": len(in_flight_cut),
        "requests_in_detection_window": len(window),
        "failed_in_detection_window": sum(1 for o in window if not o.ok),
        "requests_after_notice": len(after),
        "failed_after_notice": 0,
        "requests_while_rejoining": len(after_rejoin),
        "router_counted_failures_on_killed_rig": router.outcomes("failure").get(victim.url, 0),
    }
    record_property("failover", json.dumps(figures))
    print("router failover:", json.dumps(figures))

    # And with every rig gone, the router's healthcheck says so in one line.
    for rig in rigs:
        rig.stop()
    wait_until(lambda: not any(router.workers_health().values()), 60, "all rigs to be out")
    result = run_sm12x(
        "healthcheck",
        "--router",
        env={"SM12X_ROUTER_BIND": "127.0.0.1", "SM12X_ROUTER_PORT": str(router.port)},
    )
    assert_one_clear_error(result, str(router.port))


# --- the API key ------------------------------------------------------------------------


def test_api_key_is_enforced_by_the_router_and_reaches_the_rigs(processes, tmp_path, verify):
    rigs = backends(processes, tmp_path, 1, api_key="sk-shared")
    router = router_for(processes, tmp_path, [rigs[0].url], env={"SM12X_API_KEY": "sk-shared"})
    body = {
        "model": "deepseek-ai/DeepSeek-V4-Flash-0731",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hello"}],
    }
    url = router.url + "/v1/chat/completions"
    assert http_client.post(url, json=body, timeout=30).status_code == 401
    wrong = {"Authorization": "Bearer sk-wrong"}
    assert http_client.post(url, json=body, headers=wrong, timeout=30).status_code == 401
    right = {"Authorization": "Bearer sk-shared"}
    assert http_client.post(url, json=body, headers=right, timeout=30).status_code == 200
    # The router checks keys itself: the rejected requests never reached the rig.
    assert router.successes().get(rigs[0].url, 0) == 1
    code, report = verify(
        "--base-url",
        router.url,
        "--api-key",
        "sk-shared",
        "--metrics-url",
        rigs[0].url,
        *SMALL_SOAK,
    )
    assert code == 0, {c["name"]: (c["verdict"], c["problem"]) for c in report["checks"]}
    # The compose healthcheck reads the key from the container's environment.
    env = {"SM12X_ROUTER_BIND": "127.0.0.1", "SM12X_ROUTER_PORT": str(router.port)}
    keyed = run_sm12x("healthcheck", "--router", env={**env, "SM12X_API_KEY": "sk-shared"})
    assert keyed.returncode == 0, keyed.stderr
    assert_one_clear_error(run_sm12x("healthcheck", "--router", env=env), "401")

    # A rig the router learns of at run time without a key of its own, as
    # Kubernetes discovery adds pods, is served with the same key.
    late = processes(Backend(log=tmp_path / "late.log", api_key="sk-shared"))
    late.wait_ready()
    added = http_client.post(
        router.url + "/workers", json={"url": late.url}, headers=right, timeout=10
    )
    assert added.status_code in (200, 202), added.text
    wait_until(lambda: router.workers_health().get(late.url) is True, 60, "the added rig")
    rigs[0].stop()
    wait_until(lambda: router.workers_health()[rigs[0].url] is False, 60, "the first rig out")
    assert http_client.post(url, json=body, headers=right, timeout=30).status_code == 200
    assert router.successes().get(late.url, 0) >= 1


# --- rigs that are not up when the router starts ------------------------------------


def test_a_rig_joins_late_only_within_the_startup_timeout(processes, tmp_path):
    # Why sm12x sets --worker-startup-timeout-secs to 2 h: a rig listed at start
    # and not up within that timeout is dropped and never joins later.
    late = Backend(log=tmp_path / "late.log")
    patient = processes(
        Router(
            [late.url],
            log=tmp_path / "patient.log",
            extra=(*FAST_HEALTH, "--worker-startup-timeout-secs", "120"),
        )
    )
    hasty = processes(
        Router(
            [late.url],
            log=tmp_path / "hasty.log",
            extra=(*FAST_HEALTH, "--worker-startup-timeout-secs", "3"),
        )
    )
    for router in (patient, hasty):
        wait_until(
            lambda r=router: http_client.get(r.url + "/liveness", timeout=1).status_code == 200,
            30,
            "the router to listen",
        )
    # Past the hasty router's startup timeout: it logs that it gave up adding
    # the rig (sglang-router 0.3.x: "Failed job: type=AddWorker, worker=URL").
    gave_up = f"Failed job: type=AddWorker, worker={late.url}"
    wait_until(
        lambda: gave_up in hasty.log.read_text(errors="replace"),
        60,
        "the hasty router to give up on the late rig",
    )
    processes(late).wait_ready()
    joined_s = wait_until(
        lambda: patient.workers_health().get(late.url) is True,
        60,
        "the late rig to join the patient router",
    )
    # A rig that never joins shows only over time: five health-check
    # intervals after the patient router took it, the hasty one still has none.
    time.sleep(5)
    assert hasty.workers_health() == {}  # dropped for good
    assert http_client.get(hasty.url + "/readiness", timeout=5).status_code == 503
    print(f"late rig joined the patient router {joined_s:.1f} s after it was up")
