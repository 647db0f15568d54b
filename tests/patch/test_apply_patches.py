"""scripts/apply-patches on the real sglang wheels: applies, is idempotent, refuses clearly."""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import signal
import subprocess
import sys

import pytest

from tests.support import trees

TARGET = "sglang/kernels/ops/attention/flash_mla_sm120.py"


def _series_versions(series) -> list[str]:
    return sorted({v for patch in series for v in patch["sglang"]})


@pytest.fixture
def fresh(tmp_path):
    """fresh(version) -> a pristine, minimal sglang tree of its own."""
    return lambda version: trees.unpack_sglang(version, tmp_path / version, full=False)


def test_series_covers_the_image_pin_and_the_versions_the_issue_names(series, pins):
    versions = _series_versions(series)
    assert pins["SGLANG_VERSION"] in versions
    assert {"0.5.16", "0.5.17", "0.5.18"} <= set(versions)
    for patch in series:
        for key in ("upstream", "sglang", "retire_when", "present", "target"):
            assert patch[key], f"{patch['file']} has no {key}"
        # The dispatch patch retires with flashinfer and has a runtime switch; the
        # CUDA-source patches (0020-) are compiled in and retire with sglang alone.
        if "flashinfer_verified" in patch:
            for key in ("retire_flashinfer", "retire_sglang", "disable_env"):
                assert patch[key], f"{patch['file']} has no {key}"


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17", "0.5.18"])
def test_applies_once_then_recognises_itself(fresh, series, version):
    site = fresh(version)
    first = trees.apply_patches(site)
    assert first.returncode == 0, first.stderr
    expected = sorted(p["file"] for p in series if version in p["sglang"])
    for name in expected:
        assert f"sglang {version}: {name}: applied" in first.stdout
    patched = (site / TARGET).read_bytes()

    second = trees.apply_patches(site)
    assert second.returncode == 0, second.stderr
    assert "already applied" in second.stdout
    assert (site / TARGET).read_bytes() == patched, "a second run changed the file"

    assert b"def _sm12x_route(" in patched
    py_compile.compile(str(site / TARGET), doraise=True)
    record = json.loads((site / "sglang" / ".sm12x-patches.json").read_text())
    assert record["sglang"] == version
    assert [p["file"] for p in record["patches"]] == expected
    assert not list(site.rglob("*.orig")) and not list(site.rglob("*.rej"))


def test_check_mode_fails_on_pristine_and_passes_on_patched(fresh):
    site = fresh("0.5.16")
    pristine = trees.apply_patches(site, "--check")
    assert pristine.returncode == 1
    assert "is not applied" in pristine.stderr and "sglang 0.5.16" in pristine.stderr
    assert trees.apply_patches(site).returncode == 0
    assert trees.apply_patches(site, "--check").returncode == 0


def test_refuses_an_unknown_sglang_version_naming_it(fresh):
    site = fresh("0.5.16")
    info = next(site.glob("sglang-0.5.16.dist-info"))
    meta = info / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.5.16", "Version: 0.5.19", 1))
    proc = trees.apply_patches(site)
    assert proc.returncode == 1
    assert "sglang 0.5.19 has no patch series" in proc.stderr
    assert "0.5.16, 0.5.17, 0.5.18" in proc.stderr
    assert "def _sm12x_route(" not in (site / TARGET).read_text()


def test_refuses_a_patch_that_does_not_apply_and_leaves_the_file_alone(fresh):
    # sglang 0.5.17's file claimed as 0.5.16: the 0.5.16 patch must not apply.
    site = fresh("0.5.17")
    info = next(site.glob("sglang-0.5.17.dist-info"))
    meta = info / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.5.17", "Version: 0.5.16", 1))
    before = (site / TARGET).read_bytes()
    proc = trees.apply_patches(site)
    assert proc.returncode == 1
    assert "sglang 0.5.16: 0001-sm120-sparse-mla-topk-dispatch.patch does not apply" in proc.stderr
    assert TARGET.split("/")[-1] in proc.stderr
    assert (site / TARGET).read_bytes() == before
    assert not (site / "sglang" / ".sm12x-patches.json").exists()


def test_refuses_an_edited_target(fresh):
    site = fresh("0.5.16")
    target = site / TARGET
    target.write_text(target.read_text().replace("import math\n", "import math  # local edit\n", 1))
    proc = trees.apply_patches(site)
    assert proc.returncode == 1 and "does not apply" in proc.stderr


def test_without_the_patch_program_the_series_applies_the_same(fresh, tmp_path):
    # A base without `patch` (the real sglang images may lack it, and the build installs
    # nothing from apt): apply-patches applies the series itself, to the same bytes.
    with_patch, without = fresh("0.5.16"), fresh("0.5.16")
    assert trees.apply_patches(with_patch).returncode == 0
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(shutil.which("python3") or "/usr/bin/python3", bindir / "python3")
    proc = trees.apply_patches(without, env={**os.environ, "PATH": str(bindir)})
    assert proc.returncode == 0, proc.stderr
    assert (without / TARGET).read_bytes() == (with_patch / TARGET).read_bytes()


def test_refuses_a_folder_without_sglang(tmp_path):
    proc = trees.apply_patches(tmp_path)
    assert proc.returncode == 1
    assert f"no sglang package in {tmp_path}" in proc.stderr


def test_0_5_18_uses_the_0_5_17_patch_because_the_file_is_identical(fresh):
    assert (fresh("0.5.17") / TARGET).read_bytes() == (fresh("0.5.18") / TARGET).read_bytes()


def test_finds_the_version_of_an_editable_install(tmp_path):
    # `pip install -e` of a sglang checkout (the layout of images built from
    # source): the code lives in the checkout, the .dist-info in site-packages.
    checkout = trees.unpack_sglang("0.5.16", tmp_path / "checkout", full=False)
    site = tmp_path / "site-packages"
    site.mkdir()
    for info in checkout.glob("sglang-*.dist-info"):
        shutil.move(str(info), site / info.name)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), str(site)])}
    proc = subprocess.run(
        [sys.executable, str(trees.APPLY)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "sglang 0.5.16: 0001-sm120-sparse-mla-topk-dispatch.patch: applied" in proc.stdout
    assert "def _sm12x_route(" in (checkout / TARGET).read_text()
    assert (
        json.loads((checkout / "sglang" / ".sm12x-patches.json").read_text())["sglang"] == "0.5.16"
    )
    # Named explicitly, the checkout alone cannot say its version: still refused.
    explicit = trees.apply_patches(checkout)
    assert explicit.returncode == 1 and "no .dist-info metadata" in explicit.stderr


# --- The retirement rule (sm12x/patches/rules.py) ----------------------------------------


def test_the_current_track_applies_its_series_and_names_every_retired_patch(fresh, series):
    """sglang 0.5.23: its own series (what no release has fixed), and for every
    other patch the rule that retires it, with the flashinfer it was judged beside."""
    from sm12x.versions import load_versions

    version = load_versions("current")["SGLANG_VERSION"]
    site = fresh(version)
    proc = trees.apply_patches(site)
    assert proc.returncode == 0, proc.stderr
    own = sorted(p["file"] for p in series if version in p["sglang"])
    for name in own:
        assert f"sglang {version}: {name}: applied" in proc.stdout
    assert (
        f"sglang {version} (flashinfer {load_versions('current')['FLASHINFER_VERSION']}, "
        f"sglang {version}'s pin): retired for it:"
    ) in proc.stdout
    retired = {p["file"] for p in series} - set(own)
    for name in retired:
        line = next(line for line in proc.stdout.splitlines() if f"  {name}: " in line)
        assert f"sglang {version} >= " in line, line
    assert (
        "0001-sm120-sparse-mla-topk-dispatch.patch: sglang 0.5.23 >= 0.5.19 and flashinfer "
        "0.7.2 >= 0.6.18" in proc.stdout
    )
    record = json.loads((site / "sglang" / ".sm12x-patches.json").read_text())
    assert [p["file"] for p in record["patches"]] == own
    assert trees.apply_patches(site, "--check").returncode == 0


RULES = """
[[patch]]
file = "0001-a.patch"
title = "a dispatch fix"
upstream = "x"
target = "sglang/__init__.py"
sglang = ["0.5.17"]
present = "x"
retire_when = "flashinfer >= 0.6.18; sglang >= 0.5.19 pins it"
retire_sglang = "0.5.19"
retire_flashinfer = "0.6.18"

[[patch]]
file = "0010-b.patch"
title = "a serving fix"
upstream = "x"
target = "sglang/__init__.py"
sglang = ["0.5.17"]
present = "x"
retire_when = "sglang >= 0.5.23"
retire_sglang = "{retire}"
"""


def rule_site(tmp_path, sglang: str, flashinfer: str | None, retire: str = "0.5.23"):
    """A site with only dist-info metadata, and a patches folder with RULES."""
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    info = site / f"sglang-{sglang}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: sglang\nVersion: {sglang}\n"
        "Requires-Dist: flashinfer_python[cu13]==0.7.2\n"
    )
    if flashinfer:
        fi = site / f"flashinfer_python-{flashinfer}.dist-info"
        fi.mkdir()
        (fi / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {flashinfer}\n"
        )
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "patches.toml").write_text(RULES.format(retire=retire))
    return site, patches


def test_a_release_every_patch_retires_gets_nothing_says_why_and_exits_0(tmp_path):
    site, patches = rule_site(tmp_path, "0.5.23", "0.7.2")
    proc = trees.apply_patches(site, "--patches", str(patches))
    assert proc.returncode == 0, proc.stderr
    assert (
        "sglang 0.5.23 (flashinfer 0.7.2, installed): nothing to apply, every patch is "
        "retired for it:"
    ) in proc.stdout
    assert (
        "0001-a.patch: sglang 0.5.23 >= 0.5.19 and flashinfer 0.7.2 >= 0.6.18: "
        "flashinfer >= 0.6.18; sglang >= 0.5.19 pins it"
    ) in proc.stdout
    assert "0010-b.patch: sglang 0.5.23 >= 0.5.23: sglang >= 0.5.23" in proc.stdout
    record = json.loads((site / "sglang" / ".sm12x-patches.json").read_text())
    assert record == {"sglang": "0.5.23", "patches": []}
    assert trees.apply_patches(site, "--patches", str(patches), "--check").returncode == 0


def test_without_an_installed_flashinfer_the_rule_reads_sglang_s_own_pin(tmp_path):
    site, patches = rule_site(tmp_path, "0.5.23", None)
    proc = trees.apply_patches(site, "--patches", str(patches))
    assert proc.returncode == 0, proc.stderr
    assert "(flashinfer 0.7.2, sglang 0.5.23's pin): nothing to apply" in proc.stdout


@pytest.mark.parametrize(
    "sglang, flashinfer, retire, reason",
    [
        # The flashinfer beside it still lacks the widths the dispatch patch pads.
        (
            "0.5.23",
            "0.6.15.post1",
            "0.5.23",
            "0001-a.patch: needs flashinfer >= 0.6.18; 0.6.15.post1 is installed",
        ),
        # A release between: the serving fix is not retired before 0.5.23.
        ("0.5.20", "0.7.2", "0.5.23", "0010-b.patch: retired from sglang 0.5.23; this is 0.5.20"),
        # A patch no release retires yet.
        ("0.5.23", "0.7.2", "none yet", "0010-b.patch: no release retires it yet"),
    ],
)
def test_an_unretired_patch_without_a_series_is_refused_naming_it(
    tmp_path, sglang, flashinfer, retire, reason
):
    site, patches = rule_site(tmp_path, sglang, flashinfer, retire)
    proc = trees.apply_patches(site, "--patches", str(patches))
    assert proc.returncode == 1
    assert f"sglang {sglang} has no patch series (known: 0.5.17)" in proc.stderr
    assert "does not retire every patch for it" in proc.stderr and reason in proc.stderr
    assert not (site / "sglang" / ".sm12x-patches.json").exists()


def test_a_patch_for_code_a_release_lacks_is_not_for_it():
    """`since_sglang`: 0023 changes deepseek-recipe's output parser, which 0.5.17 does
    not have; 0.5.17's series stays complete without it. From `since_sglang` on the
    patch counts like any other: a release between with no series is refused."""
    from sm12x.patches import rules as patch_rules

    patches = [
        {
            "file": "0010-b.patch",
            "title": "a serving fix",
            "sglang": ["0.5.17"],
            "retire_when": "sglang >= 0.5.23",
            "retire_sglang": "0.5.23",
        },
        {
            "file": "0023-c.patch",
            "title": "a fix of newer code",
            "sglang": ["0.5.23"],
            "retire_when": "not yet",
            "since_sglang": "0.5.19",
        },
    ]
    old = patch_rules.plan(patches, "0.5.17", "0.6.15.post1")
    assert old.complete and [v.file for v in old.predates] == ["0023-c.patch"]
    assert old.predates[0].reason == "sglang 0.5.17 predates the code it changes (from 0.5.19)"
    assert "0023-c.patch: not for it (sglang 0.5.17 predates" in "\n".join(
        patch_rules.describe(old)
    )
    between = patch_rules.plan(patches, "0.5.20", "0.7.2")
    assert not between.known
    assert {v.file for v in between.unretired} == {"0010-b.patch", "0023-c.patch"}
    current = patch_rules.plan(patches, "0.5.23", "0.7.2")
    assert current.complete and [p["file"] for p in current.series] == ["0023-c.patch"]


def test_the_pinned_release_names_the_patch_that_is_not_for_it(fresh):
    from sm12x.versions import load_versions

    version = load_versions("pinned")["SGLANG_VERSION"]
    proc = trees.apply_patches(fresh(version))
    assert proc.returncode == 0, proc.stderr
    assert (
        f"sglang {version}: not for it: 0023-dsv4-recipe-block-newlines.patch: sglang "
        f"{version} predates the code it changes (from 0.5.19)"
    ) in proc.stdout


def _touched(patch_file) -> list[str]:
    return [
        line[len("+++ b/") :].split("\t")[0].strip()
        for line in patch_file.read_text().splitlines()
        if line.startswith("+++ b/")
    ]


def test_a_series_whose_last_patch_fails_leaves_the_tree_as_it_was(fresh, series):
    """All or nothing (issue 21): with one context line of the last patch's file
    changed, the patches before it apply, the last fails, and every file is put
    back; no record is written, and a rerun fails the same way."""
    version = "0.5.17"
    site = fresh(version)
    mine = sorted((p for p in series if version in p["sglang"]), key=lambda p: p["file"])
    folder = trees.REPO / "patches" / "sglang" / version
    last = folder / mine[-1]["file"]
    name = _touched(last)[0]
    target = site / name
    text = target.read_text()
    # A context line of the last patch's hunks that no earlier patch's diff names
    # (0025 shares its file with 0024) and the file holds once: edited, that hunk
    # cannot find its place while every earlier patch still applies.
    earlier = {
        line[1:]
        for p in mine[:-1]
        for line in (folder / p["file"]).read_text().splitlines()
        if line[:1] in (" ", "+", "-")
    }
    context = next(
        line[1:]
        for line in last.read_text().splitlines()
        if line.startswith(" ")
        and line.strip()
        and line[1:] not in earlier
        and text.count(line[1:]) == 1
    )
    target.write_text(text.replace(context, context + " /* edited */"))
    files = sorted({f for p in mine for f in _touched(folder / p["file"])})
    before = {f: (site / f).read_bytes() for f in files if (site / f).is_file()}

    for _ in range(2):
        proc = trees.apply_patches(site)
        assert proc.returncode == 1, proc.stdout
        assert f"{mine[-1]['file']} does not apply" in proc.stderr
        assert "the tree is as it was before this run" in proc.stderr
        assert f"{mine[0]['file']}: applied" in proc.stdout  # the first one did, then was undone
        assert {f: (site / f).read_bytes() for f in before} == before
        assert all((site / f).is_file() == (f in before) for f in files)
        assert not (site / "sglang" / ".sm12x-patches.json").exists()


def test_check_changes_nothing_on_a_half_patched_tree(fresh, series):
    version = "0.5.17"
    site = fresh(version)
    first = sorted((p for p in series if version in p["sglang"]), key=lambda p: p["file"])[0]
    proc = subprocess.run(
        [
            "patch",
            "-p1",
            "--fuzz=0",
            "-d",
            str(site),
            "-i",
            str(trees.REPO / "patches" / "sglang" / version / first["file"]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout
    snapshot = {p: p.read_bytes() for p in (site / "sglang").rglob("*") if p.is_file()}
    check = trees.apply_patches(site, "--check")
    assert check.returncode == 1 and "is not applied" in check.stderr
    assert {p: p.read_bytes() for p in (site / "sglang").rglob("*") if p.is_file()} == snapshot


def _boundaries(site, mine, folder) -> list[str]:
    files = {f for p in mine for f in _touched(folder / p["file"])}
    return [
        *(f"patch:{n}" for n in range(1, len(mine) + 1)),
        "staged",
        *(f"swap:{n}" for n in range(1, len(files) + 2)),  # the record is swapped last
    ]


def test_a_kill_at_every_boundary_leaves_the_tree_untouched_or_finished_next_run(
    fresh, series, tmp_path
):
    """Issue 30: SIGKILL after each staged patch leaves the tree byte for byte as it
    was (the next run says so and applies the series); SIGKILL once the swap is
    journaled, or after any file of it, is finished by the next run (it says so),
    and the tree is then exactly what an uninterrupted run makes."""
    version = "0.5.17"
    mine = sorted((p for p in series if version in p["sglang"]), key=lambda p: p["file"])
    folder = trees.REPO / "patches" / "sglang" / version
    files = sorted({f for p in mine for f in _touched(folder / p["file"])})
    reference = fresh(version)
    assert trees.apply_patches(reference).returncode == 0
    patched = {f: (reference / f).read_bytes() for f in [*files, "sglang/.sm12x-patches.json"]}
    boundaries = _boundaries(reference, mine, folder)
    assert len(boundaries) >= 4
    for at in boundaries:
        site = trees.unpack_sglang(version, tmp_path / at.replace(":", "-"), full=False)
        before = {f: (site / f).read_bytes() for f in files if (site / f).is_file()}
        killed = trees.apply_patches(site, env={**os.environ, "SM12X_TEST_KILL_AT": at})
        assert killed.returncode == -9, (at, killed.stdout, killed.stderr)
        if at.startswith("patch:"):
            assert {f: (site / f).read_bytes() for f in before} == before, at
            assert not (site / "sglang" / ".sm12x-patches.json").exists(), at
        again = trees.apply_patches(site)
        assert again.returncode == 0, (at, again.stderr)
        said = "tree was untouched" if at.startswith("patch:") else "finished it"
        assert said in again.stdout, (at, again.stdout)
        assert {f: (site / f).read_bytes() for f in patched} == patched, at
        assert not (site / ".sm12x-staging").exists(), at


@pytest.mark.parametrize(("at", "signame"), [("patch:1", "INT"), ("patch:2", "TERM")])
def test_a_signal_before_the_swap_is_one_line_and_changes_nothing(fresh, series, at, signame):
    version = "0.5.17"
    site = fresh(version)
    snapshot = {p: p.read_bytes() for p in (site / "sglang").rglob("*") if p.is_file()}
    proc = trees.apply_patches(site, env={**os.environ, "SM12X_TEST_KILL_AT": f"{at}:{signame}"})
    assert proc.returncode == 128 + getattr(signal, f"SIG{signame}"), proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "nothing was changed" in proc.stderr
    assert {p: p.read_bytes() for p in (site / "sglang").rglob("*") if p.is_file()} == snapshot
    assert not (site / ".sm12x-staging").exists()


def test_a_signal_during_the_swap_waits_for_it_to_finish(fresh, series):
    version = "0.5.17"
    site = fresh(version)
    proc = trees.apply_patches(site, env={**os.environ, "SM12X_TEST_KILL_AT": "swap:1:TERM"})
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert "the series is fully in" in proc.stderr
    assert trees.apply_patches(site, "--check").returncode == 0


def test_an_io_error_at_each_rename_of_the_swap_leaves_the_tree_pristine(fresh, series):
    """Issue 45: an I/O error mid-swap left 1 of 9 files patched until the next run.
    Now each rename of the swap failing in turn (EIO, injected) puts every file
    back: the tree is byte for byte pristine, no record, no stage, one line; the
    next run then patches it fully."""
    version = "0.5.17"
    mine = sorted((p for p in series if version in p["sglang"]), key=lambda p: p["file"])
    folder = trees.REPO / "patches" / "sglang" / version
    swaps = [b for b in _boundaries(None, mine, folder) if b.startswith("swap:")]
    reference = fresh(version)
    assert trees.apply_patches(reference).returncode == 0
    record = "sglang/.sm12x-patches.json"
    for at in swaps:
        site = fresh(version).parent / f"io-{at.replace(':', '-')}"
        site = trees.unpack_sglang(version, site, full=False)
        pristine = {p: p.read_bytes() for p in (site / "sglang").rglob("*") if p.is_file()}
        failed = trees.apply_patches(site, env={**os.environ, "SM12X_TEST_FAIL_AT": at})
        assert failed.returncode != 0, at
        assert failed.stderr.strip().count("\n") == 0 and "Traceback" not in failed.stderr
        assert "every file is back as it was" in failed.stderr, (at, failed.stderr)
        now = {p: p.read_bytes() for p in (site / "sglang").rglob("*") if p.is_file()}
        assert now == pristine, at
        assert not (site / record).exists() and not (site / ".sm12x-staging").exists(), at
        again = trees.apply_patches(site)
        assert again.returncode == 0, (at, again.stderr)
        assert (site / record).read_bytes() == (reference / record).read_bytes(), at


def test_a_full_disk_while_staging_is_one_line(fresh):
    site = fresh("0.5.17")
    pristine = {p: p.read_bytes() for p in (site / "sglang").rglob("*") if p.is_file()}
    proc = trees.apply_patches(site, env={**os.environ, "SM12X_TEST_FAIL_AT": "stage"})
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "No space left on device" in proc.stderr and "nothing was changed" in proc.stderr
    assert {p: p.read_bytes() for p in (site / "sglang").rglob("*") if p.is_file()} == pristine
    assert not (site / ".sm12x-staging").exists()
