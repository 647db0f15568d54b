"""How scripts/test's pytest-xdist run cuts the suite into work units.

A unit is a module (--dist loadfile: a module's wide fixtures are made once),
except the image tests: one unit per track. Each track's stand-in base and
image build are independent (the OS layer they share is made under a lock:
tests/support/standin.py, `locked`), so the two longest chains of the suite
run in two workers side by side instead of one after the other. A test that
names no track (the failing and prebuilt builds on the default track's base)
goes with the default track, whose base it needs. tests/conftest.py hands the
units to xdist.
"""

from __future__ import annotations

SPLIT_BY_TRACK = frozenset({"tests/integration/test_image.py"})


def work_unit(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    if module not in SPLIT_BY_TRACK:
        return module
    from sm12x.versions import default_track, tracks

    words = nodeid.rpartition("[")[2].rstrip("]").split("-") if nodeid.endswith("]") else []
    track = next((t for t in tracks() if t in words), default_track())
    return f"{module}@{track}"
