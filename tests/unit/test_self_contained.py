"""The tests read nothing outside the repository (and what scripts/test puts
under SM12X_CACHE): a fresh clone on a new machine runs them as they ran here.
A path of a developer's machine in a test is a test that passes only there."""

from __future__ import annotations

import re

from tests.support.cli import ROOT

# Folders of the machines this project was written on, and ways out of the checkout.
FOREIGN = re.compile(r"/work/|/root/|/home/\w|\.\./shared\b|\bshared/reference\b|~/\.cache\b")
# A cache mount's target is a path inside the image (the Dockerfile's pip cache,
# quoted from a BuildKit log), not one of the machine running the tests.
IN_IMAGE = re.compile(r"--mount=type=cache,[^ ]*target=/root/\S*")


def test_no_test_reads_a_path_outside_the_repository():
    offenders = []
    for path in sorted(
        [
            *ROOT.glob("tests/**/*.py"),
            *ROOT.glob("tests/**/*.sh"),
            ROOT / "scripts" / "test",
            ROOT / ".ci" / "run",
            ROOT / "pyproject.toml",
        ]
    ):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if (
                FOREIGN.search(IN_IMAGE.sub("", line))
                and path != ROOT / "tests/unit/test_self_contained.py"
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_modules_run_first_exist():
    """tests/conftest.py starts the longest modules first when the suite runs in
    several processes; a renamed one would silently start last."""
    import importlib.util

    # By path: every test folder's conftest is a module named `conftest`.
    spec = importlib.util.spec_from_file_location("tests_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert conftest.FIRST
    for path in conftest.FIRST:
        assert (ROOT / path).is_file(), path
