"""Apply sm12x's patch series to an installed or unpacked sglang package.

The one mechanism: the image build runs it (scripts/apply-patches, a thin
wrapper), the tests run it on unpacked wheels, and the mock calls `run` in
process for the tree it serves. For the sglang version it finds, it applies,
in name order, every patch of patches/sglang/patches.toml whose `sglang` list
holds that version, from patches/sglang/<version>/, with `patch -p1
--fuzz=0` in site-packages (`unified`: without `patch` on PATH, its own
exact-context applier does the same). Then it checks each patch's `present`
line is in its target and records what it applied in
sglang/.sm12x-patches.json.

A release with no series needs nothing when patches.toml's retirement rule
retires every patch for it (`rules`: its version against each patch's
retire_sglang, and the flashinfer beside it, or else the one it pins, against
retire_flashinfer): it says so, patch by patch, records an empty series and
exits 0. Patches retired for a release that has a series are named too.

Safe to run twice: patches already in are left alone (the longest run of the
series, from the first, whose reverse applies cleanly, in reverse order, to a
scratch copy: several patches may change one file). An unknown sglang version
(no series, and a patch not retired for it), a patch that does not apply or a
missing `present` line stops it with a message naming the version and the
file, and a non-zero exit. All or nothing, even under a kill or an I/O error:
`swap`. --check changes nothing (and refuses a tree a stopped run left).

Standard library only, and nothing of sm12x outside this package: the image
copies these files (with `rules`) before sm12x is installed, and
scripts/apply-patches loads them from beside itself.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from sm12x.patches import rules
from sm12x.patches.swap import STOPPING, Interrupted, PatchError, Say, apply_series

try:
    import tomllib
except ImportError:  # Python 3.10 base images: pip vendors the same parser
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["PatchError", "main", "run"]


def find_site_packages(explicit: str | None) -> Path:
    if explicit:
        site = Path(explicit).resolve()
        if not (site / "sglang" / "__init__.py").is_file():
            raise PatchError(
                f"no sglang package in {site}: point --site-packages at the "
                "folder that holds sglang/ and its .dist-info"
            )
        return site
    # find_spec locates the package without running sglang/__init__.py.
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.origin:
        raise PatchError(
            f"sglang is not installed for {sys.executable}: install it first, "
            "or pass --site-packages DIR"
        )
    return Path(spec.origin).resolve().parent.parent


def sglang_version(site: Path, found: bool) -> str:
    """found: the site came from this Python's own sglang (no --site-packages)."""
    dists = list(importlib.metadata.distributions(name="sglang", path=[str(site)]))
    if dists:
        return dists[0].version
    if found:
        # An editable install (`pip install -e`, as in images built from a
        # sglang checkout) keeps its .dist-info in site-packages while the
        # code lives in the checkout: ask this Python, whose sglang it is.
        try:
            return importlib.metadata.version("sglang")
        except importlib.metadata.PackageNotFoundError:
            pass
    raise PatchError(
        f"sglang in {site} has no .dist-info metadata: cannot tell its version; reinstall it with pip"
    )


def flashinfer_beside(site: Path, version: str, found: bool = False) -> tuple[str | None, str]:
    """The flashinfer the retirement rule judges: the one installed in `site` (or, for
    this Python's own sglang, in this Python: an editable sglang's site is its
    checkout), else the one this sglang pins (what pip installs with it), else unknown."""
    dists = list(importlib.metadata.distributions(name="flashinfer-python", path=[str(site)]))
    if not dists and found:
        dists = list(importlib.metadata.distributions(name="flashinfer-python"))
    if dists:
        return dists[0].version, "installed"
    for dist in importlib.metadata.distributions(name="sglang", path=[str(site)]):
        for req in dist.requires or []:
            name, _, rest = req.partition("==")
            pinned = name.split("[")[0].strip().replace("_", "-").lower()
            if rest and ";" not in rest and pinned == "flashinfer-python":
                return rest.strip(), f"sglang {version}'s pin"
    return None, "unknown"


def load_plan(patches: Path, version: str, flashinfer: str | None) -> rules.Plan:
    """The rule's verdict for `version`: its series (checked on disk) and retirements."""
    meta_path = patches / "patches.toml"
    try:
        meta = tomllib.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise PatchError(f"cannot read {meta_path}: {err}") from err
    try:
        plan = rules.plan(meta.get("patch", []), version, flashinfer)
    except rules.RuleError as err:
        raise PatchError(f"{meta_path}: {err}") from err
    if not plan.known:
        known = sorted(
            {v for p in meta.get("patch", []) for v in p["sglang"]}, key=rules.version_key
        )
        blocking = "; ".join(f"{v.file}: {v.reason}" for v in plan.unretired)
        raise PatchError(
            f"sglang {version} has no patch series (known: {', '.join(known)}) "
            f"and patches.toml does not retire every patch for it ({blocking}): "
            "pin a supported sglang in versions.env, or port the patches "
            f"to {version} under {patches}/{version}/"
        )
    for p in plan.series:
        p["path"] = patches / version / p["file"]
        if not p["path"].is_file():
            raise PatchError(f"sglang {version}: {p['path']} is listed in {meta_path} but missing")
    return plan


def run(site_packages: str | None, patches: Path, check: bool = False, say: Say = print) -> None:
    """Apply (or, with check, only check) the series to the sglang in
    site_packages (None: this Python's own), saying each step; PatchError with
    the one line a user reads when it cannot."""
    site = find_site_packages(site_packages)
    version = sglang_version(site, found=not site_packages)
    flashinfer, whose = flashinfer_beside(site, version, found=not site_packages)
    plan = load_plan(Path(patches).resolve(), version, flashinfer)
    apply_series(site, version, plan.series, check, say)
    if plan.retired:
        say(
            f"apply-patches: sglang {version} (flashinfer {flashinfer or 'unknown'}, {whose}): "
            + (
                "nothing to apply, every patch is retired for it:"
                if not plan.series
                else "retired for it:"
            )
        )
        for verdict in plan.retired:
            say(f"apply-patches:   {verdict.file}: {verdict.reason}")
    for verdict in plan.predates:
        say(f"apply-patches: sglang {version}: not for it: {verdict.file}: {verdict.reason}")


def _raise(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: Sequence[str] | None, patches: Path, doc: str | None = None) -> int:
    """The command line: `patches` is the default --patches folder (the wrapper's
    own patches/sglang), `doc` the wrapper's docstring for --help."""
    parser = argparse.ArgumentParser(
        description=(doc or __doc__ or "").split("\n\n")[0], allow_abbrev=False
    )
    parser.add_argument(
        "--site-packages",
        help="folder holding sglang/ (default: the site-packages of this Python's sglang)",
    )
    parser.add_argument(
        "--patches",
        default=str(patches),
        help="the patches/sglang folder (default: beside this script)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="apply nothing; fail unless every patch is already in",
    )
    args = parser.parse_args(argv)
    for signum in STOPPING:
        signal.signal(signum, _raise)
    try:
        run(args.site_packages, Path(args.patches), args.check, _say)
    except PatchError as err:
        print(f"apply-patches: error: {err}", file=sys.stderr)
        return 1
    except Interrupted as stop:
        print(
            f"apply-patches: stopped by {stop.name}: "
            + (
                "it came during the swap, which finished: the series is fully in"
                if stop.after_swap
                else "nothing was changed, the tree is as it was before this run"
            ),
            file=sys.stderr,
        )
        return stop.status
    return 0
