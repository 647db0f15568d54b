"""The monitoring profile against the real thing: Debian's Prometheus and
promtool (scripts/test installs the `prometheus` package), the stand-in server
as processes under load, the real sglang-router in front of one, and the real
Compose binary.

- `promtool check config` on prometheus.yml with the targets compose writes,
  `promtool check rules` on every rig's rules;
- `promtool test rules` for every alert of every rig: it fires on a bad
  series and stays silent on a healthy one;
- a Prometheus process scraping two stand-ins (one healthy, one with the
  `low-accept` fault) and the router during a short load: every dashboard
  panel's query returns data through the HTTP API, and the acceptance
  collapse rule is pending for the faulty rig only (its `for` is minutes);
- `docker compose --profile monitoring config`: valid, loopback-bound, the
  pinned images, no default password, anonymous access off.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from sm12x.deploy import dashboards, monitoring
from sm12x.mock.app import MODEL_ID
from sm12x.mock.server import free_port
from sm12x.recipe import load_all
from sm12x.versions import read_versions
from tests.support import http_client
from tests.support.compose import config
from tests.support.router import Backend, Router, load, wait_until

ROOT = Path(__file__).resolve().parents[2]
RECIPES = load_all()
RIGS = ["auto", *(r.name for r in RECIPES)]


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: scripts/test installs Debian's `prometheus` package")
    return path


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def env_file(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("env")
    (tmp / "model").mkdir()
    text = (ROOT / ".env.example").read_text()
    path = tmp / ".env"
    path.write_text(
        "\n".join(
            f"SM12X_MODEL_DIR={tmp / 'model'}" if line.startswith("SM12X_MODEL_DIR=") else line
            for line in text.splitlines()
        )
        + "\n"
    )
    return path


def laid_out(tmp: Path, targets: dict[str, str]) -> Path:
    """deploy/monitoring/ as the prometheus container sees it, with these targets files."""
    etc = tmp / "etc"
    shutil.copytree(monitoring.FOLDER / "rules", etc / "rules")
    shutil.copy(monitoring.FOLDER / "prometheus.yml", etc / "prometheus.yml")
    (etc / "targets").mkdir()
    for name, text in targets.items():
        (etc / "targets" / name).write_text(text)
    return etc


# --- promtool ---------------------------------------------------------------------


def test_promtool_checks_the_config_with_the_targets_compose_writes(env_file, tmp_path):
    configs = config("monitoring", env_file=env_file)["configs"]
    targets = {
        "sglang.yml": configs["sm12x-targets-sglang"]["content"],
        "router.yml": configs["sm12x-targets-router"]["content"],
        "dcgm.yml": configs["sm12x-targets-dcgm"]["content"],
    }
    assert yaml.safe_load(targets["sglang.yml"]) == [
        {"targets": ["127.0.0.1:30000"], "labels": {"rig": "auto"}}
    ]
    etc = laid_out(tmp_path, targets)
    checked = run_promtool("check", "config", "prometheus.yml", cwd=etc)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # every rig's rule file was found through rule_files and read
    for rig in RIGS:
        assert f"rules/{rig}.yml" in checked.stdout, checked.stdout


def test_promtool_checks_every_rigs_rules():
    files = sorted(str(p) for p in (monitoring.FOLDER / "rules").glob("*.yml"))
    assert len(files) == len(RIGS)
    checked = run_promtool("check", "rules", *files, cwd=ROOT)
    assert checked.returncode == 0, checked.stdout + checked.stderr


LABELS = 'instance="rig:30000", job="sglang"'


def _series(rig: str, name: str, values: str, extra: str = "") -> dict:
    labels = f'rig="{rig}", {LABELS}' + (f", {extra}" if extra else "")
    return {"series": f"{name}{{{labels}}}", "values": values}


def alert_cases(t: monitoring.Thresholds) -> dict[str, tuple[list, list, str, dict]]:
    """alert -> (bad series, healthy series, eval time, the fired alert's labels)."""
    rig = t.rig
    low, good = t.min_accept_length - 0.5, t.min_accept_length + 1.0
    tokens = _series(rig, "sglang:generation_tokens_total", "0+600x40", 'is_streaming="true"')
    by_rig = {"rig": rig, "instance": "rig:30000"}
    full = t.max_running_requests or 1
    day = 1440  # a day of 1-minute samples, then 30 minutes more
    return {
        "DsparkAcceptanceCollapse": (
            [_series(rig, "sglang:spec_accept_length", f"{low:g}x40"), tokens],
            [_series(rig, "sglang:spec_accept_length", f"{good:g}x40"), tokens],
            "30m",
            {**by_rig, "job": "sglang"},
        ),
        "ThroughputDrop": (
            [
                _series(rig, "sglang:generation_tokens_total", f"0+6000x{day} {day * 6000}+600x30"),
                _series(rig, "sglang:num_running_reqs", f"10x{day + 30}"),
            ],
            [
                _series(rig, "sglang:generation_tokens_total", f"0+6000x{day + 30}"),
                _series(rig, "sglang:num_running_reqs", f"10x{day + 30}"),
            ],
            f"{day + 30}m",
            by_rig,
        ),
        "ServerErrors": (
            [
                _series(rig, "sglang:http_responses_total", "0+60x40", 'status_code="500"'),
                _series(rig, "sglang:http_responses_total", "0+60x40", 'status_code="200"'),
            ],
            [
                _series(rig, "sglang:http_responses_total", "0x40", 'status_code="500"'),
                _series(rig, "sglang:http_responses_total", "0+60x40", 'status_code="200"'),
            ],
            "30m",
            by_rig,
        ),
        "QueueSaturated": (
            [
                _series(rig, "sglang:num_queue_reqs", "5x40"),
                _series(rig, "sglang:num_running_reqs", f"{full}x40"),
            ],
            [
                _series(rig, "sglang:num_queue_reqs", "0x40"),
                _series(rig, "sglang:num_running_reqs", f"{full}x40"),
            ],
            "30m",
            by_rig,
        ),
        "RigDown": (
            [_series(rig, "up", "0x40")],
            [_series(rig, "up", "1x40")],
            "30m",
            {**by_rig, "job": "sglang"},
        ),
    }


def _annotations(rule: dict, labels: dict) -> dict:
    return {
        k: v.replace("{{ $labels.instance }}", labels["instance"])
        for k, v in rule["annotations"].items()
    }


def _rule_tests(rig: str, t: monitoring.Thresholds) -> list[dict]:
    (group,) = yaml.safe_load((monitoring.FOLDER / "rules" / f"{rig}.yml").read_text())["groups"]
    rules = {r["alert"]: r for r in group["rules"] if "alert" in r}
    cases = alert_cases(t)
    assert set(cases) == set(rules), rig  # a new alert needs its case here
    tests = []
    for name, (bad, healthy, at, labels) in cases.items():
        fired = {**labels, **rules[name]["labels"]}
        expected = [{"exp_labels": fired, "exp_annotations": _annotations(rules[name], labels)}]
        for series, alerts in ((bad, expected), (healthy, [])):
            tests.append(
                {
                    "interval": "1m",
                    "input_series": series,
                    "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": alerts}],
                }
            )
    return tests


@pytest.mark.parametrize("rig", RIGS)
def test_promtool_tests_every_alert_of_the_rig(rig, tmp_path):
    """Each alert fires on its bad series and stays silent on a healthy one."""
    t = (
        monitoring.auto_thresholds(RECIPES)
        if rig == "auto"
        else monitoring.thresholds(next(r for r in RECIPES if r.name == rig))
    )
    shutil.copytree(monitoring.FOLDER / "rules", tmp_path / "rules")
    # Rules evaluated every 5 minutes (15 s in production): every `for` here is a
    # whole number of them or less, and a day of history stays quick.
    spec = {
        "rule_files": [f"rules/{rig}.yml"],
        "evaluation_interval": "5m",
        "tests": _rule_tests(rig, t),
    }
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = run_promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "SUCCESS" in result.stdout


def test_promtool_test_fails_when_an_alert_does_not_fire(tmp_path):
    """The rule tests above can fail: a healthy series expected to fire is a failure."""
    t = monitoring.thresholds(RECIPES[0])
    _bad, healthy, at, labels = alert_cases(t)["DsparkAcceptanceCollapse"]
    shutil.copytree(monitoring.FOLDER / "rules", tmp_path / "rules")
    spec = {
        "rule_files": [f"rules/{t.rig}.yml"],
        "tests": [
            {
                "interval": "1m",
                "input_series": healthy,
                "alert_rule_test": [
                    {
                        "eval_time": at,
                        "alertname": "DsparkAcceptanceCollapse",
                        "exp_alerts": [{"exp_labels": {**labels, "severity": "critical"}}],
                    }
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(spec))
    assert run_promtool("test", "rules", "tests.yml", cwd=tmp_path).returncode != 0


# --- a real Prometheus scraping the stand-in ----------------------------------------


@pytest.fixture
def processes():
    started: list = []

    def add(thing):
        started.append(thing)
        return thing.start()

    yield add
    for thing in reversed(started):
        thing.stop()


class Prometheus:
    def __init__(self, etc: Path, data: Path, log: Path) -> None:
        self.port = free_port()
        self.etc, self.data, self.log = etc, data, log
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Prometheus:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus is missing: scripts/test installs Debian's `prometheus`")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={self.etc / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        """Until /-/ready answers 200: before that, queries get a plain-text 503
        while the TSDB opens (seen under load)."""

        def ready() -> bool:
            return http_client.get(self.url + "/-/ready", timeout=2).status_code == 200

        wait_until(ready, timeout, "Prometheus ready")

    def query(self, expr: str) -> list:
        body = http_client.get(
            self.url + "/api/v1/query", params={"query": expr}, timeout=10
        ).json()
        assert body["status"] == "success", (expr, body)
        return body["data"]["result"]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


def _concrete(expr: str, rate_window: str) -> str:
    """A panel's query as Grafana sends it: every rig, a rate window."""
    return expr.replace('rig=~"$rig"', 'rig=~".*"').replace("$__rate_interval", rate_window)


def test_a_real_prometheus_scraping_the_mock_answers_every_panel(processes, tmp_path):
    healthy = processes(Backend(log=tmp_path / "healthy.log"))
    faulty = processes(Backend(args=("--fault", "low-accept"), log=tmp_path / "faulty.log"))
    healthy.wait_ready()
    faulty.wait_ready()
    router = processes(Router([healthy.url], log=tmp_path / "router.log"))
    router.wait_ready(1)
    floor_rig = RECIPES[0].name  # the healthy stand-in stands for this rig, with its rules
    targets = {
        "sglang.yml": yaml.safe_dump(
            [
                {"targets": [f"127.0.0.1:{healthy.port}"], "labels": {"rig": floor_rig}},
                {"targets": [f"127.0.0.1:{faulty.port}"], "labels": {"rig": "auto"}},
            ]
        ),
        "router.yml": yaml.safe_dump([{"targets": [f"127.0.0.1:{router.metrics_port}"]}]),
    }
    etc = laid_out(tmp_path, targets)
    cfg = yaml.safe_load((etc / "prometheus.yml").read_text())
    # Scrape and evaluate every second (15 s in production) so a short load is enough.
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    (etc / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    prom = processes(Prometheus(etc, tmp_path / "data", tmp_path / "prometheus.log"))
    prom.wait_ready()
    # Load through the router (the healthy rig) and on the faulty rig directly.
    load(router.url, concurrency=4, seconds=6, max_tokens=32)
    load(faulty.url, concurrency=4, seconds=4, max_tokens=32)
    missing: list[str] = []

    def every_panel_answers() -> bool:
        missing.clear()
        for uid, title, expr in dashboards.queries():
            if not prom.query(_concrete(expr, "30s")):
                missing.append(f"{uid} / {title}: {expr}")
        return not missing

    try:
        wait_until(every_panel_answers, 30, "every panel's query to return data", interval=1)
    except AssertionError:
        raise AssertionError("no data for:\n" + "\n".join(missing)) from None

    # What the live router exports is in the table read from its binary.
    live = set(
        re.findall(r"(?m)^(smg_[a-z0-9_]+)", http_client.get(router.metrics_url, timeout=5).text)
    )
    allowed = monitoring.series_names()
    assert live and not {n for n in live if n not in allowed}, sorted(live - set(allowed))

    def collapse_pending() -> bool:
        return bool(prom.query('ALERTS{alertname="DsparkAcceptanceCollapse", rig="auto"}'))

    wait_until(collapse_pending, 30, "the acceptance collapse alert on the faulty rig", interval=1)
    (alert,) = prom.query('ALERTS{alertname="DsparkAcceptanceCollapse"}')
    assert alert["metric"]["rig"] == "auto" and alert["metric"]["alertstate"] == "pending"
    value = float(prom.query('sglang:spec_accept_length{rig="auto"}')[0]["value"][1])
    assert value == pytest.approx(1.1)
    healthy_value = float(
        prom.query(f'sglang:spec_accept_length{{rig="{floor_rig}"}}')[0]["value"][1]
    )
    assert healthy_value > RECIPES[0].verify.min_accept_length


def _scraped_after(prom: Prometheus, job_target: str, moment: float) -> bool:
    """Prometheus has scraped this target at a time after `moment` (unix seconds)."""
    found = prom.query(f'timestamp(up{{instance="{job_target}"}})')
    return bool(found) and float(found[0]["value"][1]) > moment


def test_non_streamed_requests_count_at_the_first_scrape_after_they_return(processes, tmp_path):
    """A plain OpenAI client (no stream) moves the counters by the time its
    response is back: the first scrape taken after it returns shows the request,
    and the acceptance collapse goes pending on non-streamed load alone."""
    import openai

    mock = processes(Backend(args=("--fault", "low-accept"), log=tmp_path / "mock.log"))
    mock.wait_ready()
    target = f"127.0.0.1:{mock.port}"
    etc = laid_out(
        tmp_path, {"sglang.yml": yaml.safe_dump([{"targets": [target], "labels": {"rig": "auto"}}])}
    )
    cfg = yaml.safe_load((etc / "prometheus.yml").read_text())
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    (etc / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    prom = processes(Prometheus(etc, tmp_path / "data", tmp_path / "prometheus.log"))
    prom.wait_ready()
    wait_until(lambda: _scraped_after(prom, target, 0), 60, "Prometheus's first scrape")
    client = openai.OpenAI(base_url=mock.url + "/v1", api_key="unused", timeout=60, max_retries=0)
    usage = []
    for _ in range(2):
        reply = client.chat.completions.create(
            model=MODEL_ID,
            messages=[{"role": "user", "content": "Count to a hundred."}],
            max_tokens=64,
            stream=False,
        )
        returned = time.time()
        assert reply.usage is not None
        usage.append(reply.usage)
        # No sleep: whatever Prometheus scrapes from now on must hold the request.
        wait_until(
            lambda r=returned: _scraped_after(prom, target, r), 30, "a scrape after the reply"
        )

        def total(name: str) -> float:
            found = prom.query(f'sum({name}{{is_streaming="false"}})')
            return float(found[0]["value"][1]) if found else 0.0

        # The latest sample is from a scrape taken after the reply came back.
        assert total("sglang:num_requests_total") == len(usage)
        assert total("sglang:generation_tokens_total") == sum(u.completion_tokens for u in usage)
        assert total("sglang:prompt_tokens_total") == sum(u.prompt_tokens for u in usage)
    # The rule sees the rig generating: the collapse is pending (it fires after
    # its `for`, which the promtool test below checks on non-streamed series).
    wait_until(
        lambda: bool(prom.query('ALERTS{alertname="DsparkAcceptanceCollapse", rig="auto"}')),
        30,
        "the acceptance collapse pending under non-streamed load",
        interval=1,
    )


def test_promtool_collapse_fires_after_its_for_on_non_streamed_load(tmp_path):
    """Non-streamed tokens alone keep the collapse pending until its 10 minutes are up."""
    t = monitoring.auto_thresholds(RECIPES)
    low = t.min_accept_length - 0.5
    series = [
        _series("auto", "sglang:spec_accept_length", f"{low:g}x40"),
        _series("auto", "sglang:generation_tokens_total", "0+600x40", 'is_streaming="false"'),
    ]
    labels = {"rig": "auto", "instance": "rig:30000", "job": "sglang"}
    (group,) = yaml.safe_load((monitoring.FOLDER / "rules" / "auto.yml").read_text())["groups"]
    (rule,) = [r for r in group["rules"] if r.get("alert") == "DsparkAcceptanceCollapse"]
    fired = {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": _annotations(rule, labels),
    }
    shutil.copytree(monitoring.FOLDER / "rules", tmp_path / "rules")
    # Generating from minute 1 (the rate needs two samples): pending from then,
    # firing once 10 minutes have passed, not before.
    checks = [("9m", []), ("12m", [fired])]
    spec = {
        "rule_files": ["rules/auto.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": at, "alertname": "DsparkAcceptanceCollapse", "exp_alerts": alerts}
                    for at, alerts in checks
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = run_promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]


# --- compose ----------------------------------------------------------------------


def test_the_monitoring_profile_is_valid_loopback_and_pinned(env_file):
    services = config("monitoring", env_file=env_file)["services"]
    assert sorted(services) == ["exposure-check", "grafana", "prometheus"]
    prom, grafana = services["prometheus"], services["grafana"]
    versions = read_versions()
    for service, key in ((prom, "PROMETHEUS_IMAGE"), (grafana, "GRAFANA_IMAGE")):
        digest = versions[f"{key}_DIGEST"]
        assert service["image"] == versions[key] + (f"@{digest}" if digest else "")
        assert service["network_mode"] == "host"
        assert service["cap_drop"] == ["ALL"]
    assert "--web.listen-address=127.0.0.1:9090" in prom["command"]
    assert "--storage.tsdb.retention.time=30d" in prom["command"]
    assert any(v["type"] == "volume" and v["target"] == "/prometheus" for v in prom["volumes"])
    env = grafana["environment"]
    assert env["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    # None in .env.example: no password file named, and Grafana refuses to start.
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == ""
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env
    # `docker compose config` prints the entrypoint with compose's $$ escapes.
    script = grafana["entrypoint"][2].replace("$$", "$")
    refused = subprocess.run(
        ["sh", "-c", script],
        env={"PATH": "/usr/bin:/bin", "GF_SECURITY_ADMIN_PASSWORD__FILE": ""},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    # One line, and an exit that its restart policy does not restart: it stays stopped.
    assert refused.stderr.splitlines() == [
        "grafana: not started: set SM12X_GRAFANA_ADMIN_PASSWORD in .env"
        " (there is no default password), then docker compose up -d grafana"
    ]
    assert not docker_restarts(grafana["restart"], refused.returncode)
    # With a password it goes on to Grafana's own start (not run here).
    assert "exec /run.sh" in script


def docker_restarts(policy: str, exit_code: int) -> bool:
    """Docker's restart rule for a container that exited by itself (dockerd's
    restartmanager): `no` never, `always`/`unless-stopped` always,
    `on-failure[:N]` only on a non-zero exit."""
    name = policy.split(":")[0]
    if name not in {"no", "always", "unless-stopped", "on-failure"}:
        raise AssertionError(f"unknown restart policy {policy!r}")
    return name in {"always", "unless-stopped"} or (name == "on-failure" and exit_code != 0)


def test_the_restart_rule_restarts_a_failed_container():
    """docker_restarts can say yes: a grafana that exited 2 would loop."""
    assert docker_restarts("on-failure", 2)
    assert not docker_restarts("no", 2)
    assert docker_restarts("unless-stopped", 0)


def test_the_rig_label_follows_the_env(env_file, tmp_path):
    path = tmp_path / "rig.env"
    text = env_file.read_text().replace("\nSM12X_PORT=30000\n", "\nSM12X_PORT=31000\n")
    path.write_text(text + "SM12X_MONITORING_RIG=rtx-pro-6000-tp4\n")
    content = config("monitoring", env_file=path)["configs"]["sm12x-targets-sglang"]["content"]
    assert yaml.safe_load(content) == [
        {"targets": ["127.0.0.1:31000"], "labels": {"rig": "rtx-pro-6000-tp4"}}
    ]
