"""README.md says what the repository does: its commands, links, matrix and
patch facts are checked against the files they describe."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml
from support.cli import ROOT
from support.doc_commands import docs

from sm12x import cli
from sm12x.recipe import list_recipes, load_all
from sm12x.recipe.matrix import BEGIN, END, block
from sm12x.versions import load_versions

README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.DOTALL | re.MULTILINE)
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


def test_serve_it_says_to_build_the_image_until_it_is_published():
    text = section("Serve it")
    build = code_blocks(text)[1]
    assert build.split("#")[0].strip() == "docker buildx bake image-amd64 --load"
    assert "image-arm64" in build  # the DGX Spark's arch
    assert "not published" in text and "docker compose pull" in text
    # The name built is the one compose runs (tests/unit/test_doc_commands.py
    # reads the bake file for it).
    image = load_versions()["SM12X_IMAGE"]  # the default track's
    assert f"`{image}`" in text and f"docker save {image}" in text


GLOSSARY_TERMS = ("C16", "TP", "pass^k", "TTFT", "ITL", "SPS", "depth", "block size", "gamma",
                  "DSPARK", "acceptance length", "sm_120", "rig", "recipe", "stand-in", "p99")


def test_glossary_defines_the_jargon():
    rows = [line for line in section("Glossary").splitlines() if line.startswith("| ")][1:]
    terms = {t.strip() for row in rows for t in row.split("|")[1].split(",")}
    defined = " ".join(terms)
    for term in GLOSSARY_TERMS:
        assert term in defined, f"the glossary does not define {term}"
    assert "[glossary](#glossary)" in README.split("## Serve it")[0]


def test_support_matrix_is_generated_from_the_recipes():
    start, end = README.index(BEGIN), README.index(END) + len(END)
    assert README[start:end] == block(load_all()), (
        "README's support matrix is stale: run scripts/regen and commit the diff"
    )
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
    named = {m for snippet in code for m in re.findall(r"(?:^|\s|/)sm12x ([a-z][\w-]*)", snippet,
                                                          re.MULTILINE)}
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
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", README, re.MULTILINE)}
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
    for needle in ("num_tokens, 64", "Unsupported sparse-MLA prefill configuration",
                   "depth 5", "</think>", "Streamed tool calls", "max_tokens", "OOM",
                   "NET/Socket", "ibv_reg_mr", "custom all-reduce"):
        assert needle in joined, needle


def test_image_section_points_at_the_image_doc():
    assert "docs/image.md" in section("The image")
