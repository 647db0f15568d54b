"""The validation zygote (tests/support/server_args_zygote.py) answers exactly as a
one-shot probe, and is reused only where nothing its import read differs.

The matching rules and the recording environment are checked on their own (fast);
the rest runs the tracks' real sglang: a zygote's verdict, full or base, equals a
one-shot probe's, and changing one input the import read (a variable, the tree)
starts another zygote.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.support import server_args_zygote as zygote_side
from tests.support.server_args_zygotes import Zygote, Zygotes

GPU = {"name": "NVIDIA GeForce RTX 5090", "capability": [12, 0]}


def _zygote(reads, prefixes=(), unknown=(), asked=(), env=None) -> Zygote:
    z = Zygote.__new__(Zygote)
    z.reads, z.prefixes, z.unknown_scans = dict(reads), tuple(prefixes), list(unknown)
    z.device_asked, z.gpu = list(asked), (GPU, 2)
    z.started_env = dict(env or {})
    return z


REQUEST = {"gpu": GPU, "gpus": 2}


def test_a_variable_the_import_read_must_match():
    z = _zygote({"SGLANG_RAGGED_VERIFY_MODE": "static", "SGLANG_UNSET": None})
    assert z.fits({"SGLANG_RAGGED_VERIFY_MODE": "static", "OTHER": "x"}, REQUEST)
    assert not z.fits({"SGLANG_RAGGED_VERIFY_MODE": "compact"}, REQUEST)
    assert not z.fits({"SGLANG_RAGGED_VERIFY_MODE": "static", "SGLANG_UNSET": "1"}, REQUEST)
    # the sandbox (each call's own HOME and PATH) is never part of the match
    z = _zygote({"HOME": "/tmp/a", "PATH": "/tmp/a:/usr/bin"})
    assert z.fits({"HOME": "/tmp/b", "PATH": "/tmp/b:/usr/bin"}, REQUEST)


def test_a_scanned_prefix_makes_every_variable_with_it_an_input():
    z = _zygote({}, prefixes=["SGL_"], env={"SGL_OLD": "1", "KEEP": "a"})
    assert z.fits({"SGL_OLD": "1", "KEEP": "b"}, REQUEST)
    assert not z.fits({"SGL_OLD": "2"}, REQUEST)
    assert not z.fits({"SGL_OLD": "1", "SGL_NEW": "1"}, REQUEST)


def test_an_unknown_scan_makes_the_whole_environment_the_key():
    z = _zygote({}, unknown=["somewhere.py:f"], env={"A": "1"})
    assert z.fits({"A": "1", "HOME": "/other"}, REQUEST)
    assert not z.fits({"A": "1", "B": "2"}, REQUEST)


def test_the_gpu_is_an_input_only_where_the_import_asked_torch_cuda():
    other = {"gpu": {**GPU, "name": "NVIDIA GB10"}, "gpus": 2}
    assert _zygote({}).fits({}, other)
    assert not _zygote({}, asked=["get_device_capability"]).fits({}, other)
    assert not _zygote({}, asked=["device_count"]).fits({}, {"gpu": GPU, "gpus": 4})


def test_the_key_holds_the_interpreter_and_the_trees():
    env = {"PYTHONPATH": "/c/sglang-serving/0.5.23-patched-fb00b4867d68:/c/flashinfer-0.6"}
    key = Zygotes.key(env, REQUEST)
    assert sys.executable in key
    # another patch series hash (a patch byte changed) is another tree, another key
    moved = {"PYTHONPATH": env["PYTHONPATH"].replace("fb00b4867d68", "0d57f54175be")}
    assert Zygotes.key(moved, REQUEST) != key


def test_the_recording_environment_tells_reads_from_scans(monkeypatch):
    recorder = zygote_side.RecordingEnviron({"SGL_A": "1", "B": "2", "NETWORKX_X": "3"})
    recorder.get("B")
    _ = "MISSING" in recorder
    _ = recorder["SGL_A"]
    list(recorder.items())  # a scan from here (this test) is not a known one
    assert recorder.reads == {"B", "MISSING", "SGL_A"}  # items() added no names
    here = "test_the_recording_environment_tells_reads_from_scans"
    assert recorder.unknown_scans == [f"{__file__}:{here}"]
    monkeypatch.setitem(zygote_side.KNOWN_SCANS, (Path(__file__).name, here), "SGL_")
    recorder.unknown_scans.clear()
    dict(recorder.items())
    assert recorder.prefixes == {"SGL_"} and not recorder.unknown_scans
    recorder.recording = False
    recorder.get("LATER")
    assert "LATER" not in recorder.reads


# --- against the tracks' real sglang --------------------------------------------


def _scan_filters(source: str, function: str) -> set[str] | None:
    """The prefixes a function's scans of os.environ keep (None: no such function;
    "*" for a scan with no startswith test)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            text = ast.unparse(node)
            scans = text.count("os.environ.items()")
            kept = set(re.findall(r"\.startswith\('([A-Z_]+)'\)", text))
            return kept if scans and len(kept) == 1 else {"*"}
    return None


def test_the_known_networkx_scan_reads_only_its_prefix():
    import networkx.utils.backends as backends

    source = Path(backends.__file__).read_text()
    prefix = zygote_side.KNOWN_SCANS[("networkx/utils/backends.py", "<dictcomp>")]
    assert _scan_filters(source, "_set_configs_from_environment") == {prefix}


@pytest.mark.wheels
@pytest.mark.parametrize("track", ["pinned", "current"])
def test_known_scans_read_only_their_prefix_in_the_tree(track):
    """KNOWN_SCANS' sglang entries are facts about each tree: read, not assumed."""
    from sm12x.mock import serving as sglang_serving
    from sm12x.versions import load_versions

    site = sglang_serving.tree(load_versions(track)["SGLANG_VERSION"], patched=True)
    source = (site / "sglang" / "srt" / "environ.py").read_text()
    found = {
        function: _scan_filters(source, function)
        for (path, function), _prefix in zygote_side.KNOWN_SCANS.items()
        if path == "sglang/srt/environ.py"
    }
    present = {f: kept for f, kept in found.items() if kept is not None}
    assert present, f"neither known scan is in {track}'s environ.py: {sorted(found)}"
    for function, kept in present.items():
        assert kept == {zygote_side.KNOWN_SCANS[("sglang/srt/environ.py", function)]}, function


@pytest.fixture(scope="module")
def check():
    from tests.support import server_args_check

    return server_args_check


@pytest.mark.wheels
@pytest.mark.parametrize(
    ("name", "track"),
    [("rtx-5090-tp8-throughput", "current"), ("dgx-spark-tp2", "pinned")],
)
def test_a_zygote_answers_as_a_one_shot_probe(check, name, track, monkeypatch):
    from sm12x.recipe import load_all

    recipe = next(r for r in load_all() if r.name == name)
    fork = check.validate(recipe, 0, track, check.model_dir(recipe))
    # a base zygote's child imports sglang itself, with the request's environment
    monkeypatch.setattr(check, "ZYGOTES", Zygotes(check.PROBE, full=False))
    try:
        base = check.validate(recipe, 0, track, check.model_dir(recipe))
        assert [z.stage for z in check.ZYGOTES.live] == ["base"]
        assert check.ZYGOTES.last is not None and check.ZYGOTES.last.answered == 1
        assert "sglang.srt.server_args" not in check.ZYGOTES.last.imported
    finally:
        check.ZYGOTES.close()
    monkeypatch.setenv("SM12X_SERVER_ARGS_ZYGOTE", "0")
    alone = check.validate(recipe, 0, track, check.model_dir(recipe))
    for zygote in (fork, base):
        assert zygote.ok and alone.ok, (zygote.error, alone.error)
        assert zygote.resolved == alone.resolved
        # the same warnings; those sglang logs while importing come first from a zygote
        # (it imported before the request), among the resolution's from a one-shot probe
        assert Counter(zygote.warnings) == Counter(alone.warnings)
        assert zygote.env_defaults == alone.env_defaults


@pytest.mark.wheels
def test_an_input_of_the_import_changed_starts_another_zygote(check, monkeypatch):
    from sm12x.recipe import load_all

    recipe = next(r for r in load_all() if r.name == "rtx-5090-tp8")
    monkeypatch.setattr(check, "ZYGOTES", Zygotes(check.PROBE))  # none live yet
    zygotes = check.ZYGOTES
    try:
        _changed_input_starts_another(check, zygotes, recipe)
    finally:
        zygotes.close()


def _changed_input_starts_another(check, zygotes, recipe) -> None:
    base = check.validate(recipe, 0, "current", check.model_dir(recipe))
    started = zygotes.started
    live = next(z for z in zygotes.live if z.answered)
    read = sorted(k for k in live.reads if k.startswith("SGLANG_"))
    assert read, "the import read no SGLANG_ variable: the match has nothing to hold"
    # a variable the import never read: the same zygote answers
    unread = {"SM12X_ZYGOTE_PROBE_UNREAD": "1"}
    same = check.validate(recipe, 0, "current", check.model_dir(recipe), env=unread)
    assert zygotes.started == started and same.resolved == base.resolved
    # one the import read (its value or its presence): another zygote
    name = read[0]
    value = "1" if live.reads[name] != "1" else "0"
    check.validate(recipe, 0, "current", check.model_dir(recipe), env={name: value})
    assert zygotes.started == started + 1, name
    # a base zygote (sglang not imported: its child imports it with this environment)
    answered = zygotes.last
    assert answered is not live and answered.stage == "base", name
    assert answered.reads.get(name, value) == value, name
