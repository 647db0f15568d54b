"""Which of sm12x's sglang patches a release needs: the series and the retirement rules.

patches/sglang/patches.toml lists every patch with the sglang releases it
applies to (`sglang`) and when it may go (`retire_sglang`, and for the
dispatch patch `retire_flashinfer`). For a release the rule is:

- the patches whose `sglang` list holds it are its series, applied in name order;
- a patch whose `since_sglang` is newer than the release is not for it: the
  release predates the code the patch changes (0023 changes deepseek-recipe's
  output parser, which 0.5.17 and 0.5.18 lack);
- every other patch of the file must be retired for it: the release is at
  least the patch's `retire_sglang` and, where the patch names one, the
  flashinfer beside it at least its `retire_flashinfer`. A release with an
  empty series whose patches are all retired needs nothing (apply-patches says
  so and why); one where a patch is neither in its series nor retired is
  unknown (apply-patches refuses it).

Pure standard library and no sm12x imports: sm12x.patches.apply reads it in
the image's build stage, before sm12x is installed (the Dockerfile copies the
package's standard-library files), and sm12x.patches.series imports it, so
both read the rule from one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_VERSION = re.compile(r"(?P<release>\d+(?:\.\d+)*)(?:\.post(?P<post>\d+))?")


class RuleError(ValueError):
    """patches.toml or a version string is not what the rule understands."""


def version_key(text: str) -> tuple[tuple[int, ...], int]:
    """'0.6.15.post1' -> ((0, 6, 15), 1): sortable release and post number."""
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise RuleError(f"{text!r} is not a release version (digits and dots, optionally .postN)")
    release = tuple(int(p) for p in match["release"].split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    return release, int(match["post"] or 0)


def at_least(version: str, floor: str) -> bool:
    return version_key(version) >= version_key(floor)


def series(patches: list[dict], sglang: str) -> list[dict]:
    """The patches applied to `sglang`, in name order."""
    return sorted((p for p in patches if sglang in p["sglang"]), key=lambda p: p["file"])


@dataclass(frozen=True)
class Retirement:
    """Why one patch (by file name) is or is not needed by a release."""

    file: str
    title: str
    retired: bool
    reason: str


def retirement(patch: dict, sglang: str, flashinfer: str | None) -> Retirement:
    """Whether `patch` is retired for sglang `sglang` next to flashinfer `flashinfer`
    (None: not known, so a flashinfer condition is not met)."""
    floor = patch.get("retire_sglang")
    file, title = patch["file"], patch["title"]
    if not floor or not _VERSION.fullmatch(str(floor).strip()):
        return Retirement(
            file, title, False, f"no release retires it yet ({patch.get('retire_when', 'no rule')})"
        )
    if not at_least(sglang, floor):
        return Retirement(file, title, False, f"retired from sglang {floor}; this is {sglang}")
    fi_floor = patch.get("retire_flashinfer")
    if fi_floor:
        if flashinfer is None:
            return Retirement(
                file,
                title,
                False,
                f"needs flashinfer >= {fi_floor} beside it, and which flashinfer is unknown",
            )
        if not at_least(flashinfer, fi_floor):
            return Retirement(
                file, title, False, f"needs flashinfer >= {fi_floor}; {flashinfer} is installed"
            )
        return Retirement(
            file,
            title,
            True,
            f"sglang {sglang} >= {floor} and flashinfer "
            f"{flashinfer} >= {fi_floor}: {patch['retire_when']}",
        )
    return Retirement(file, title, True, f"sglang {sglang} >= {floor}: {patch['retire_when']}")


@dataclass(frozen=True)
class Plan:
    """What a release needs: its series, and the verdict on every other patch."""

    sglang: str
    series: list[dict]
    retired: list[Retirement]
    unretired: list[Retirement]
    predates: list[Retirement] = field(default_factory=list)  # for code it lacks

    @property
    def known(self) -> bool:
        """A series to apply, or nothing needed: every patch retired. (A series may
        lack patches of later releases: 0.5.16's is the dispatch and kernel fixes.)"""
        return bool(self.series) or not self.unretired

    @property
    def complete(self) -> bool:
        """Every patch of the file is in the series or retired: what a track's image
        must be (scripts/image-args), so no fix is silently left behind."""
        return not self.unretired


def plan(patches: list[dict], sglang: str, flashinfer: str | None) -> Plan:
    """The series for `sglang`, and for each other patch file whether it is retired.

    A patch listed once per release folder has several entries of one file name;
    the rule is judged once per file, on the entry for the newest releases (they
    agree on the retirement fields)."""
    version_key(sglang)  # a clear error for a malformed version
    chosen = series(patches, sglang)
    in_series = {p["file"] for p in chosen}
    newest: dict[str, dict] = {}
    for patch in patches:
        if patch["file"] in in_series:
            continue
        top = max(patch["sglang"], key=version_key)
        held = newest.get(patch["file"])
        if held is None or version_key(top) > version_key(max(held["sglang"], key=version_key)):
            newest[patch["file"]] = patch
    predates, verdicts = [], []
    for name in sorted(newest):
        patch = newest[name]
        since = patch.get("since_sglang")
        if since and not at_least(sglang, since):
            predates.append(
                Retirement(
                    name,
                    patch["title"],
                    False,
                    f"sglang {sglang} predates the code it changes (from {since})",
                )
            )
        else:
            verdicts.append(retirement(patch, sglang, flashinfer))
    return Plan(
        sglang,
        chosen,
        [v for v in verdicts if v.retired],
        [v for v in verdicts if not v.retired],
        predates,
    )


def describe(result: Plan) -> list[str]:
    """Lines for people: the retired patches and why, then what still blocks."""
    lines = [f"{v.file}: retired ({v.reason})" for v in result.retired]
    lines += [f"{v.file}: not for it ({v.reason})" for v in result.predates]
    lines += [f"{v.file}: NOT retired ({v.reason})" for v in result.unretired]
    return lines
