"""sm12x's requirements and the router pin, resolved against each track's full sglang closure.

The image's install-app step installs sm12x and sglang-router into the base
with every package already there as a constraint at its version. The real
base holds sglang's whole pinned closure (hundreds of packages), the stand-in
only part of it, so a conflict between sm12x's requirements and, say,
sglang's openai pin would pass every stand-in build and stop the real one
with a ResolutionImpossible. This resolves the same thing here, for the real
base's Python and both image arches (tests/support/closure.py).
"""

from __future__ import annotations

import pytest

from sm12x.versions import load_versions, tracks
from tests.support import closure

pytestmark = [pytest.mark.slow]

CASES = [pytest.param(t, a, id=f"{t}-{a}") for t in tracks() for a in closure.PLATFORMS]


def app_requirements() -> list[str]:
    return [
        *closure.sm12x_requirements(),
        f"sglang-router=={load_versions()['SGLANG_ROUTER_VERSION']}",
    ]


@pytest.mark.parametrize("track, arch", CASES)
def test_sm12x_and_the_router_resolve_against_the_track_s_closure(track, arch):
    found = closure.closure(track, arch)
    # The closure is the real base's scale, not the stand-in's 30 packages.
    assert len(found.pins) > 150, sorted(found.pins)
    assert found.sglang == load_versions(track)["SGLANG_VERSION"]
    # sglang's own flashinfer pin is in it: the closure is sglang's, at its pins.
    assert found.pins["flashinfer-python"] == load_versions(track)["FLASHINFER_VERSION"]
    if found.lacking:  # what this machine's index lacks is said, not hidden
        print(
            f"sglang {found.sglang} ({arch}): the index lacks "
            + "; ".join(f"{req} ({why})" for req, why in found.lacking.items())
        )
    result = closure.compile_(app_requirements(), found.pins, closure.PLATFORMS[arch])
    assert result.ok, (
        f"sm12x's requirements and sglang-router do not resolve against sglang "
        f"{found.sglang}'s closure ({arch}); packages in the conflict: "
        f"{', '.join(closure.conflict_names(result.log))}\n{result.log[-2000:]}"
    )
    # Nothing of the serving stack moves: every closure package keeps its version.
    moved = {
        n: (v, result.pins.get(n))
        for n, v in found.pins.items()
        if n in result.pins and result.pins[n] != v
    }
    assert not moved, moved


def test_a_conflict_fails_with_the_package_names():
    # sglang 0.5.17 pins openai==2.6.1: an sm12x that wanted openai<2 could not
    # be installed into the real base, and the check says which packages clash.
    found = closure.closure("pinned", "amd64")
    result = closure.compile_(
        [*app_requirements(), "openai<2"], found.pins, closure.PLATFORMS["amd64"]
    )
    assert not result.ok
    assert "openai" in closure.conflict_names(result.log), result.log


def test_a_requirement_the_index_lacks_is_named_not_fatal(monkeypatch, tmp_path):
    # A pin no index has: the closure drops it, says why, and resolves the rest.
    binary = closure.uv()
    monkeypatch.setattr(closure, "uv", lambda: binary)
    monkeypatch.setattr(closure, "cache_dir", lambda: tmp_path)
    real = closure.sglang_requirements
    monkeypatch.setattr(
        closure, "sglang_requirements", lambda v: [*real(v)[:5], "sm12x-no-such-package==9.9.9"]
    )
    found = closure.closure("pinned", "amd64")
    assert list(found.lacking) == ["sm12x-no-such-package==9.9.9"]
    assert "sm12x-no-such-package" in found.lacking["sm12x-no-such-package==9.9.9"]
    assert found.pins
