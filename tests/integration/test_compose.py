"""compose.yaml, validated by the real Compose v2 binary and checked against the recipes.

The services carry no sglang flag: each runs `sm12x launch` with SM12X_RECIPE set.
What compose must repeat of a recipe (GPU counts, host networking, devices, the
site variables it takes from .env, the track's image) is written from the recipe
(sm12x/deploy/compose_yaml.py, a regen entry); here the real binary's reading of
the generated file is held to the recipes and the settings.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from sm12x.deploy.compose import profiles as compose_profiles
from sm12x.recipe import load_all
from sm12x.recipe.tracks import home_track, recipe_tracks
from sm12x.settings import Settings, env_name, load, meta
from sm12x.settings.model import DEFAULT_PORT
from sm12x.versions import default_track, load_versions, tracks
from tests.support.compose import ROOT, compose, config, secrets_as_files, with_values

RECIPES = load_all()
COMPOSE_TEXT = (ROOT / "compose.yaml").read_text()
ENV_EXAMPLE = ROOT / ".env.example"


# One profile per node: a multi-node recipe runs one service on each machine.
# The launcher's own list (verify --boot starts the first): proven here against
# compose.yaml itself.
profiles_of = compose_profiles


ALL_PROFILES = ["auto"] + [p for r in RECIPES for p in profiles_of(r)]
# Services that are not a rig (tests/integration/test_compose_router.py).
OTHER_PROFILES = ["router"]
# The monitoring profile's services (tests/integration/test_monitoring_stack.py).
MONITORING = ["prometheus", "grafana"]
# Runs with every profile, before any server (sm12x/deploy/exposure.py).
GATE = "exposure-check"


@pytest.fixture(scope="module")
def env_file(tmp_path_factory) -> Path:
    """.env.example as a user copies it, with a model folder that exists."""
    tmp = tmp_path_factory.mktemp("env")
    (tmp / "model").mkdir()
    text = ENV_EXAMPLE.read_text()
    text = re.sub(r"(?m)^SM12X_MODEL_DIR=.*$", f"SM12X_MODEL_DIR={tmp / 'model'}", text)
    path = tmp / ".env"
    path.write_text(text)
    return path


def gpu_count(service: dict) -> int:
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    return device["count"]


# --- the real binary validates every profile -----------------------------------


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_compose_config_validates_each_profile(profile, env_file):
    services = config(profile, env_file=env_file)["services"]
    assert sorted(services) == sorted([GATE, profile])


def test_all_profiles_together_validate(env_file):
    assert sorted(config("*", env_file=env_file)["services"]) == sorted(
        [GATE, *ALL_PROFILES, *OTHER_PROFILES, *MONITORING]
    )


def test_bare_up_starts_only_the_auto_service(env_file):
    # COMPOSE_PROFILES=auto in .env: `docker compose up` with no --profile.
    assert sorted(config(env_file=env_file)["services"]) == ["auto", GATE]


@pytest.mark.parametrize("profile", [p for p in ALL_PROFILES if p != "auto"])
def test_a_named_profile_replaces_the_default(profile, env_file):
    # The auto service would fight the named one for the GPUs and the port.
    result = compose("--profile", profile, "config", "--services", env_file=env_file)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == sorted([GATE, profile])


def test_compose_profiles_from_the_shell_also_replace_the_default(env_file):
    result = compose(
        "config", "--services", env_file=env_file, env={"COMPOSE_PROFILES": "rtx-pro-6000-tp4"}
    )
    assert sorted(result.stdout.split()) == [GATE, "rtx-pro-6000-tp4"]


def test_without_env_the_model_dir_is_asked_for(tmp_path):
    # A project folder with no .env: nothing sets SM12X_MODEL_DIR.
    result = compose("config", env_file=None, project_dir=tmp_path)
    assert result.returncode != 0
    assert "SM12X_MODEL_DIR" in result.stderr and ".env" in result.stderr


def test_a_bad_compose_file_fails(env_file, tmp_path):
    # The binary really validates (its console-script wrapper would exit 0).
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE_TEXT.replace("restart: on-failure", "restarts: on-failure"))
    result = compose("--profile", "*", "config", env_file=env_file, file=broken)
    assert result.returncode != 0
    assert "restarts" in result.stderr


# --- services match the recipes -------------------------------------------------


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_each_recipe_has_its_profiles_and_gpu_counts(recipe, env_file):
    for rank, profile in enumerate(profiles_of(recipe)):
        service = config(profile, env_file=env_file)["services"][profile]
        assert service["profiles"] == [profile]
        env = service["environment"]
        assert env["SM12X_RECIPE"] == recipe.name
        assert gpu_count(service) == recipe.gpu_count_per_node
        if recipe.is_multinode:
            assert env["SM12X_NODE_RANK"] == str(rank)
        else:
            assert "SM12X_NODE_RANK" not in env


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_container_needs_match_the_recipe(recipe, env_file):
    for profile in profiles_of(recipe):
        service = config(profile, env_file=env_file)["services"][profile]
        want = recipe.container
        assert (service.get("network_mode") == "host") == want.host_network
        assert [d["source"] for d in service.get("devices", [])] == want.devices
        assert service.get("cap_add", []) == want.cap_add
        if want.host_network:
            # sglang binds the host's address (SM12X_BIND) and port itself.
            assert "ports" not in service
            assert "SM12X_HOST" not in service["environment"]
            assert service["environment"]["SM12X_BIND"] == "127.0.0.1"
            assert service["environment"]["SM12X_PORT"] == str(recipe.serve.port)
        else:
            # sglang listens on the recipe's port inside; compose publishes that port.
            assert service["environment"]["SM12X_HOST"] == "0.0.0.0"
            assert "SM12X_PORT" not in service["environment"]
            (port,) = service["ports"]
            assert port["target"] == recipe.serve.port


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_site_variables_reach_the_container(recipe, env_file):
    site = {name for name, var in recipe.env.items() if var.from_host}
    for profile in profiles_of(recipe):
        environment = config(profile, env_file=env_file)["services"][profile]["environment"]
        assert site <= set(environment), f"{profile} does not pass {site - set(environment)}"
        if recipe.is_multinode:
            assert "SM12X_HEAD_ADDR" in environment


def test_site_values_come_from_env(env_file, tmp_path):
    text = env_file.read_text().replace("NCCL_IB_HCA=\n", "NCCL_IB_HCA=roceP2p1s0f1\n")
    text = text.replace("SM12X_HEAD_ADDR=\n", "SM12X_HEAD_ADDR=192.168.100.1\n")
    custom = tmp_path / ".env"
    custom.write_text(text)
    env = config("dgx-spark-tp2-node1", env_file=custom)["services"]["dgx-spark-tp2-node1"][
        "environment"
    ]
    assert env["NCCL_IB_HCA"] == "roceP2p1s0f1"
    assert env["SM12X_HEAD_ADDR"] == "192.168.100.1"


def test_auto_takes_every_gpu(env_file):
    assert gpu_count(config("auto", env_file=env_file)["services"]["auto"]) == -1  # count: all


def test_no_sglang_flag_is_written_in_compose():
    # Flags come only from recipes, through `sm12x launch`; the one other
    # command line is Prometheus's own (the monitoring profile).
    prometheus = r"(?!config\.file=|storage\.tsdb\.|web\.listen-address=)"
    assert not re.search(rf"(?m)^[^#]*\s--{prometheus}[a-z]", COMPOSE_TEXT)
    for recipe in RECIPES:
        for name in recipe.flags:
            assert name not in COMPOSE_TEXT


# --- shared settings --------------------------------------------------------------


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_shared_settings(profile, env_file):
    service = config(profile, env_file=env_file)["services"][profile]
    assert service["image"] == load_versions(profile_track(profile))["SM12X_IMAGE"]
    assert service["entrypoint"] == ["sm12x", "launch"]
    assert service["ipc"] == "host"
    assert service["init"] is True
    assert service["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert service["restart"] == "on-failure"
    assert service["stop_grace_period"] == "2m0s"
    model, cache = service["volumes"]
    assert (model["type"], model["target"], model["read_only"]) == ("bind", "/model", True)
    assert model["bind"].get("create_host_path") in (None, False)
    assert (cache["type"], cache["source"], cache["target"]) == ("volume", "cache", "/cache")
    env = service["environment"]
    assert env["SM12X_MODEL_DIR"] == "/model" and env["SM12X_CACHE_DIR"] == "/cache"
    assert env["HF_HUB_OFFLINE"] == "1" and env["SM12X_INSECURE_NO_API_KEY"] == ""
    # No key in .env: no key file named, and the placeholder secret nobody reads.
    assert env["SM12X_API_KEY_FILE"] == "" and "SM12X_API_KEY" not in env
    assert service["secrets"] == [{"source": "api-key", "target": KEY_FILE}]
    health = service["healthcheck"]
    if profile.endswith(tuple(f"-node{r}" for r in range(1, 8))):
        assert health == {"disable": True}  # no HTTP server on the other nodes
    else:
        assert health["test"] == ["CMD", "sm12x", "healthcheck"]
        assert health["start_period"] == "2h0m0s"


@pytest.mark.parametrize("profile", [p for p in ALL_PROFILES if "-node" not in p])
def test_port_is_local_unless_env_says_otherwise(profile, env_file, tmp_path):
    (port,) = config(profile, env_file=env_file)["services"][profile]["ports"]
    assert (port["host_ip"], port["published"], port["target"]) == ("127.0.0.1", "30000", 30000)
    custom = tmp_path / ".env"
    custom.write_text(
        env_file.read_text()
        .replace("SM12X_BIND=127.0.0.1", "SM12X_BIND=0.0.0.0")
        .replace("SM12X_PORT=30000", "SM12X_PORT=8000")
    )
    (port,) = config(profile, env_file=custom)["services"][profile]["ports"]
    assert (port["host_ip"], port["published"]) == ("0.0.0.0", "8000")


KEY_FILE = "/run/secrets/sm12x-api-key"


def test_the_key_and_grafana_s_password_never_show_in_compose_config(env_file, tmp_path):
    """Both set in .env: the real Compose binary's whole `config` output, every
    profile at once, holds neither (issue 45); they reach the containers as
    secret files, which hold them."""
    key, password = "sk-test-5f1c9e", "grafana-pw-8d27a4"
    custom = with_values(
        env_file, tmp_path, SM12X_API_KEY=key, SM12X_GRAFANA_ADMIN_PASSWORD=password
    )
    for fmt in ("json", "yaml"):
        result = compose("--profile", "*", "config", "--format", fmt, env_file=custom)
        assert result.returncode == 0, result.stderr
        assert key not in result.stdout and password not in result.stdout
        assert "SM12X_API_KEY" in result.stdout  # the variable is named, not its value
    project = config("*", env_file=custom)
    for name, service in project["services"].items():
        env = service.get("environment") or {}
        if name == GATE:
            # The exposure check only needs to know they are set.
            assert env["SM12X_API_KEY_SET"] == env["SM12X_GRAFANA_ADMIN_PASSWORD_SET"] == "1"
            assert "secrets" not in service
        elif name == "grafana":
            inside = secrets_as_files(project, name, custom, tmp_path / name)
            assert Path(inside["GF_SECURITY_ADMIN_PASSWORD__FILE"]).read_text() == password
        elif name == "prometheus":
            assert "secrets" not in service
        else:
            assert env["SM12X_API_KEY_FILE"] == KEY_FILE, name
            inside = secrets_as_files(project, name, custom, tmp_path / name)
            assert load(env_file=os.devnull, environ=inside).settings.key() == key, name


def test_without_a_key_every_secret_still_has_a_set_variable(env_file, tmp_path):
    """Compose refuses to start a service whose secret's variable is unset; with no
    key or password in .env (or their lines removed) each service gets the
    placeholder, whose variable Compose always sets, and its *_FILE is empty."""
    text = re.sub(r"(?m)^SM12X_(API_KEY|GRAFANA_ADMIN_PASSWORD)=.*\n", "", env_file.read_text())
    for values in (env_file, tmp_path / "bare.env"):
        if values != env_file:
            values.write_text(text)
        project = config("*", env_file=values)
        for name, service in project["services"].items():
            for secret in service.get("secrets", []):
                assert project["secrets"][secret["source"]] == {
                    "name": f"sm12x_{secret['source']}",
                    "environment": "COMPOSE_PROJECT_NAME",
                }, name
            inside = secrets_as_files(project, name, values, tmp_path / "files" / name)
            assert inside.get("SM12X_API_KEY_FILE", "") == "", name
            assert inside.get("GF_SECURITY_ADMIN_PASSWORD__FILE", "") == "", name
            assert load(env_file=os.devnull, environ=inside).settings.key() is None


def profile_track(profile: str, chosen: str | None = None) -> str:
    """The track a profile runs: a recipe limited to other tracks than the chosen
    one (SM12X_TRACK, else the default) runs its own (home_track), whatever .env says."""
    recipe = next((r for r in RECIPES if profile in profiles_of(r)), None)
    track = chosen or default_track()
    if recipe is None or track in recipe_tracks(recipe):
        return track
    return home_track(recipe)


def test_the_track_picks_the_image_and_reaches_every_server(env_file, tmp_path):
    """One setting: SM12X_TRACK in .env picks the image (versions.env's name for the
    track) and reaches the launcher, which refuses an image of another track; a
    profile whose recipe runs only on another track runs that track's image."""
    for track in tracks():
        custom = tmp_path / f"{track}.env"
        custom.write_text(env_file.read_text().replace("SM12X_TRACK=\n", f"SM12X_TRACK={track}\n"))
        services = config("*", env_file=custom)["services"]
        for name in ALL_PROFILES:
            want = profile_track(name, track)
            assert services[name]["image"] == load_versions(want)["SM12X_IMAGE"], name
            assert services[name]["environment"]["SM12X_TRACK"] == want, name
    # Unset: the default track, but for the recipes that cannot run on it.
    services = config("*", env_file=env_file)["services"]
    for name in ALL_PROFILES:
        assert services[name]["environment"]["SM12X_TRACK"] == profile_track(name), name


def test_image_can_be_overridden(env_file, tmp_path):
    custom = tmp_path / ".env"
    custom.write_text(
        env_file.read_text().replace("SM12X_IMAGE=\n", "SM12X_IMAGE=registry.local/sm12x:dev\n")
    )
    assert (
        config("auto", env_file=custom)["services"]["auto"]["image"] == "registry.local/sm12x:dev"
    )


# --- compose and the settings agree (sm12x.settings) ---------------------------------


def interpolated() -> dict[str, set[str]]:
    """Each variable compose reads from .env, with the defaults it writes for it (a
    default that holds another variable is written as compose renders it unset)."""
    found: dict[str, set[str]] = {}
    text = COMPOSE_TEXT
    nested = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::-([^${}]*))?\}")
    while True:  # innermost first: ${A:-x-${B:-y}} -> B's default y, then A's x-y
        match = nested.search(text)
        if match is None:
            break
        name, default = match.groups()
        found.setdefault(name, set()).update({default} if default else set())
        text = text[: match.start()] + (default or "") + text[match.end() :]
    return found


@pytest.mark.parametrize("profile", [GATE, *ALL_PROFILES, *OTHER_PROFILES])
def test_containers_get_settings_under_their_one_name(profile, env_file):
    # What compose passes into a container is read by sm12x there under that name.
    environment = config(profile, env_file=env_file)["services"][profile]["environment"]
    names = {env_name(n) for n in Settings.model_fields}
    old = {o for n in Settings.model_fields for o in meta(n).old}
    for name in environment:
        assert name not in old, f"{profile} passes {name}, an old name"
        if name.startswith("SM12X_"):
            assert name in names, f"{profile} passes {name}, which no setting reads"


def test_compose_defaults_are_the_settings_defaults():
    for name, defaults in interpolated().items():
        field = next((n for n in Settings.model_fields if env_name(n) == name), None)
        if field is None or not defaults:
            continue
        default = Settings.model_fields[field].default
        if default is None:  # derived: the recipe's port, the default track and its image
            want = {
                "port": str(DEFAULT_PORT),
                "image": load_versions()["SM12X_IMAGE"],
                "track": default_track(),
            }[field]
        else:
            want = str(default)
        if field == "image":
            # The current-only profiles' image default is the current track's
            # (test_a_current_only_profile_is_written_as_its_recipe_says).
            defaults = defaults - {load_versions("current")["SM12X_IMAGE"]}
        assert defaults == {want}, f"compose's default for {name}: {defaults}, settings' {want}"


def test_the_host_reads_the_same_dotenv_as_the_containers(env_file, tmp_path):
    # `sm12x <command>` on the host and the service in its container see one value.
    custom = with_values(
        env_file,
        tmp_path,
        SM12X_BIND="192.168.1.20",
        SM12X_PORT="31000",
        SM12X_API_KEY="sk-one",
        SM12X_HEAD_ADDR="192.168.100.1",
    )
    on_host = load(env_file=custom, environ={}).settings
    for profile in ("auto", "dgx-spark-tp2-node1"):
        env = secrets_as_files(config(profile, env_file=custom), profile, custom, tmp_path)
        inside = load(env_file=os.devnull, environ=env).settings
        assert inside.key() == on_host.key() == "sk-one"
        assert inside.bind == on_host.bind == "192.168.1.20"
        if profile == "auto":
            # Bridged: 0.0.0.0:30000 inside, published at SM12X_BIND:SM12X_PORT.
            (port,) = config(profile, env_file=custom)["services"][profile]["ports"]
            assert (port["host_ip"], port["published"]) == (on_host.bind, str(on_host.port))
        else:
            assert inside.port == on_host.port == 31000
            assert inside.head_addr == on_host.head_addr == "192.168.100.1"
            assert inside.listen_host == "192.168.1.20"


def test_compose_file_parses_as_plain_yaml():
    # YAML merge keys and anchors only; no compose-specific syntax the tests skip.
    data = yaml.safe_load(COMPOSE_TEXT)
    assert set(data["services"]) == {GATE, *ALL_PROFILES, *OTHER_PROFILES, *MONITORING}


# --- closed by default ------------------------------------------------------------------

SERVERS = [p for p in ALL_PROFILES + OTHER_PROFILES]


@pytest.mark.parametrize("profile", SERVERS)
def test_every_server_waits_for_the_exposure_check(profile, env_file):
    service = config(profile, env_file=env_file)["services"][profile]
    assert service["depends_on"] == {
        GATE: {"condition": "service_completed_successfully", "required": True}
    }


@pytest.mark.parametrize("profile", [GATE, *SERVERS])
def test_no_privileges_beyond_what_the_recipe_asks(profile, env_file):
    service = config(profile, env_file=env_file)["services"][profile]
    assert service["cap_drop"] == ["ALL"]
    assert service["security_opt"] == ["no-new-privileges:true"]
    assert "privileged" not in service
    recipe = next((r for r in RECIPES if profile in profiles_of(r)), None)
    assert service.get("cap_add", []) == (recipe.container.cap_add if recipe else [])


def exposure_check_env(env_file: Path) -> dict[str, str]:
    service = config(GATE, env_file=env_file)["services"][GATE]
    assert service["entrypoint"] == ["sm12x", "exposure-check"]
    assert service["network_mode"] == "none" and service["read_only"] is True
    return {k: v for k, v in service["environment"].items() if v}


# (.env values, refused?) : the exposure check run on the environment compose gives it.
GATE_CASES = [
    ({}, False),
    ({"SM12X_BIND": "127.0.0.1"}, False),
    ({"SM12X_BIND": "::1"}, False),
    ({"SM12X_BIND": "0.0.0.0"}, True),
    ({"SM12X_BIND": "192.168.1.20"}, True),
    ({"SM12X_BIND": "0.0.0.0", "SM12X_API_KEY": "sk-gate"}, False),
    ({"SM12X_BIND": "0.0.0.0", "SM12X_INSECURE_NO_API_KEY": "1"}, False),
    ({"SM12X_ROUTER_BIND": "0.0.0.0"}, True),
    ({"SM12X_ROUTER_BIND": "0.0.0.0", "SM12X_API_KEY": "sk-gate"}, False),
    ({"SM12X_ROUTER_BIND": "-oProxyCommand=x"}, True),
    # Grafana (the monitoring profile) beyond loopback needs its password; the
    # API's opt-out does not cover it.
    ({"SM12X_GRAFANA_BIND": "0.0.0.0"}, True),
    ({"SM12X_GRAFANA_BIND": "192.168.1.20", "SM12X_INSECURE_NO_API_KEY": "1"}, True),
    ({"SM12X_GRAFANA_BIND": "0.0.0.0", "SM12X_GRAFANA_ADMIN_PASSWORD": "pw"}, False),
    ({"SM12X_GRAFANA_BIND": "::1"}, False),
]


@pytest.mark.parametrize(("values", "refused"), GATE_CASES, ids=[str(v) for v, _ in GATE_CASES])
def test_the_exposure_check_refuses_an_open_api_beyond_loopback(
    values, refused, env_file, tmp_path
):
    from tests.support.cli import assert_one_clear_error, run_sm12x

    env = exposure_check_env(with_values(env_file, tmp_path, **values))
    result = run_sm12x("exposure-check", env=env)
    if refused:
        grafana = "SM12X_GRAFANA_BIND" in values
        assert_one_clear_error(
            result,
            "sm12x exposure-check: error:",
            *(["Grafana", "SM12X_GRAFANA_ADMIN_PASSWORD"] if grafana else []),
        )
    else:
        assert result.returncode == 0, result.stderr


def test_the_launcher_refuses_it_again_inside_the_container(env_file, tmp_path):
    """Without compose's exposure check (a service started by hand), `sm12x launch` itself refuses."""
    from tests.support.cli import assert_one_clear_error, run_sm12x

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    custom = with_values(env_file, tmp_path, SM12X_BIND="0.0.0.0")
    env = config("rtx-pro-6000-tp4", env_file=custom)["services"]["rtx-pro-6000-tp4"]["environment"]
    env = {**{k: v for k, v in env.items() if v}, "SM12X_MODEL_DIR": str(tmp_path / "model")}
    assert_one_clear_error(
        run_sm12x("launch", env=env), "would listen on 0.0.0.0 with no API key", "SM12X_API_KEY"
    )


def test_compose_itself_refuses_a_bind_that_is_not_an_address(env_file, tmp_path):
    custom = with_values(env_file, tmp_path, SM12X_BIND="-oProxyCommand=x")
    result = compose("--profile", "auto", "config", env_file=custom)
    assert result.returncode != 0 and "invalid IP address" in result.stderr


# --- configurations: a rig's plain profile and its throughput profile ------------


def test_each_rig_s_throughput_configuration_is_a_profile_beside_its_baseline(env_file):
    """The plain profile names the rig (its baseline recipe, which SM12X_CONFIGURATION
    may turn into the throughput one at launch); `<rig>-throughput` (per node on a
    pair) names the throughput recipe itself."""
    throughput = [r for r in RECIPES if r.configuration_kind == "throughput"]
    assert throughput, "no throughput configuration"
    for recipe in throughput:
        base = next(r for r in RECIPES if r.name == recipe.rig)
        for plain, named in zip(profiles_of(base), profiles_of(recipe), strict=True):
            assert named == plain.replace(base.name, f"{base.name}-throughput", 1)
            services = config(named, env_file=env_file)["services"]
            assert services[named]["environment"]["SM12X_RECIPE"] == recipe.name
            plain_env = config(plain, env_file=env_file)["services"][plain]["environment"]
            assert plain_env["SM12X_RECIPE"] == base.name
