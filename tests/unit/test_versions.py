"""versions.env is the one place pins live; its parser is strict; each track's pins are
written once and resolve to the plain names the rest of sm12x reads."""

from __future__ import annotations

import re
import subprocess
import zipfile

import pytest

from sm12x.mock import wheels
from sm12x.versions import (
    TRACK_KEYS,
    UnknownTrackError,
    VersionsFileError,
    check_tracks,
    default_track,
    load_versions,
    parse_versions,
    read_versions,
    track_key,
    track_of_sglang,
    tracks,
)
from tests.support.cli import ROOT


@pytest.mark.parametrize("track", tracks())
def test_every_pin_the_project_needs_is_there(track):
    pins = load_versions(track)
    for key in (
        "SM12X_VERSION",
        "SGLANG_VERSION",
        "FLASHINFER_VERSION",
        "FLASHINFER_CUBIN_VERSION",
        "FLASHINFER_JIT_CACHE_VERSION",
        "TORCH_VERSION",
        "CUDA_VERSION",
        "BASE_IMAGE",
        "SGLANG_ROUTER_VERSION",
        "FLASHINFER_CANARY_VERSION",
        "TEST_TORCH_VERSION",
        "TEST_TRITON_VERSION",
        "SM12X_TRACK",
        "SM12X_IMAGE",
    ):
        assert key in pins, key
    assert (
        pins["FLASHINFER_VERSION"]
        == pins["FLASHINFER_CUBIN_VERSION"]
        == pins["FLASHINFER_JIT_CACHE_VERSION"]
    ), "flashinfer python, cubin and jit-cache must be one version"


def test_bash_and_python_read_the_same_values():
    keys = sorted(read_versions())
    script = ". ./versions.env && " + " && ".join(f'printf "%s\\n" "${k}"' for k in keys)
    out = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert dict(zip(keys, out)) == read_versions()


def test_two_tracks_the_pinned_one_the_default():
    assert tracks() == ("pinned", "current")
    assert default_track() == "pinned"
    assert load_versions() == load_versions("pinned")
    assert load_versions("current")["SGLANG_VERSION"] == "0.5.23"
    assert load_versions("current")["FLASHINFER_VERSION"] == "0.7.2"
    assert load_versions("current")["TORCH_VERSION"] == "2.14.1"


def test_a_track_resolves_to_the_plain_names_and_nothing_is_written_twice():
    raw = read_versions()
    for track in tracks():
        view = load_versions(track)
        for key in TRACK_KEYS:
            assert key not in raw, f"{key} is written outside a track"
            assert view[key] == raw[track_key(track, key)]
        assert view["SM12X_TRACK"] == track
        assert view["SM12X_IMAGE"] == f"{raw['SM12X_IMAGE_REPO']}:{raw['SM12X_VERSION']}-{track}"
        assert not any(k.startswith(("PINNED_", "CURRENT_")) for k in view), (
            "a track's view holds no other track's pins"
        )
        assert track_of_sglang(view["SGLANG_VERSION"]) == track
    values = [raw[track_key(t, k)] for t in tracks() for k in ("SGLANG_VERSION", "BASE_IMAGE")]
    assert len(set(values)) == len(values), "two tracks pin the same sglang or base"
    view = load_versions("current")
    view["SGLANG_VERSION"] = "changed"
    assert load_versions("current")["SGLANG_VERSION"] == "0.5.23", "callers get a copy"


def test_an_unknown_track_names_the_known_ones():
    with pytest.raises(
        UnknownTrackError, match="unknown track 'nightly': versions.env has pinned, current"
    ):
        load_versions("nightly")


def minimal(**changes: str | None) -> dict[str, str]:
    pins = {"SM12X_TRACKS": "a,b", "SM12X_DEFAULT_TRACK": "a"}
    pins |= {track_key(t, k): "1" for t in "ab" for k in TRACK_KEYS}
    for key, value in changes.items():
        if value is None:
            pins.pop(key)
        else:
            pins[key] = value
    return pins


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"SM12X_TRACKS": None}, "SM12X_TRACKS is missing or empty"),
        ({"SM12X_TRACKS": "a,B"}, "track name 'B' is not lower-case"),
        ({"SM12X_TRACKS": "a,a"}, "names a track twice"),
        ({"SM12X_DEFAULT_TRACK": "c"}, "SM12X_DEFAULT_TRACK=c is not one of SM12X_TRACKS (a, b)"),
        ({"B_SGLANG_VERSION": None}, "track b has no B_SGLANG_VERSION"),
        (
            {"SGLANG_VERSION": "1"},
            "SGLANG_VERSION is a track's pin: write it as A_SGLANG_VERSION, B_SGLANG_VERSION",
        ),
    ],
)
def test_a_malformed_track_layout_is_one_clear_error(changes, message):
    assert check_tracks(minimal()) == ("a", "b")
    with pytest.raises(VersionsFileError, match=re.escape(message)):
        check_tracks(minimal(**changes))


def test_pyproject_takes_its_version_from_versions_env():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text
    assert re.search(r'path = "versions.env"', text)


@pytest.mark.parametrize(
    "bad, message",
    [
        ("SGLANG_VERSION = 0.5.16", "expected KEY=value"),
        ('SGLANG_VERSION="0.5.16"', "expected KEY=value"),
        ("A=1\nA=2", "A is set twice"),
    ],
)
def test_malformed_lines_are_named(bad, message):
    with pytest.raises(VersionsFileError, match=message):
        parse_versions(bad, "versions.env")


def _requires(dist: str, version: str) -> dict[str, str]:
    """name -> exact pinned version, from a cached wheel's METADATA (markers skipped)."""
    with zipfile.ZipFile(wheels.wheel(dist, version)) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(meta).decode().splitlines()
    pins = {}
    for line in lines:
        if line.startswith("Requires-Dist:") and ";" not in line and "==" in line:
            name, _, pinned = line.split(":", 1)[1].strip().partition("==")
            pins[re.sub(r"\[.*\]", "", name).strip().replace("_", "-").lower()] = pinned.strip()
    return pins


@pytest.mark.parametrize("track", tracks())
def test_the_image_stack_is_the_track_s_sglang_s_own(track):
    """No override of sglang's stack: flashinfer and torch are the versions the
    track's sglang itself requires, and the base is that sglang's runtime image."""
    pins = load_versions(track)
    required = _requires("sglang", pins["SGLANG_VERSION"])
    assert required["flashinfer-python"] == pins["FLASHINFER_VERSION"], (
        f"sglang {pins['SGLANG_VERSION']} pins flashinfer {required['flashinfer-python']}, "
        f"versions.env {pins['FLASHINFER_VERSION']}"
    )
    assert required["torch"] == pins["TORCH_VERSION"]
    cuda = pins["CUDA_VERSION"].replace(".", "")
    assert pins["BASE_IMAGE"] == f"lmsysorg/sglang:v{pins['SGLANG_VERSION']}-cu{cuda}-runtime"
