"""Read versions.env, the one file that holds every pin.

The format is the subset both bash (`source`) and this parser agree on:
KEY=value lines, `#` comments, no quoting and no spaces inside values.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from sm12x.paths import data_path

_LINE = re.compile(r"""^(?P<key>[A-Z][A-Z0-9_]*)=(?P<value>[^\s#"']*)\s*(?:#.*)?$""")


class VersionsFileError(ValueError):
    pass


def parse_versions(text: str, source: str = "versions.env") -> dict[str, str]:
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise VersionsFileError(
                f"{source}:{number}: expected KEY=value (no spaces or quotes), got {raw!r}"
            )
        key = match["key"]
        if key in pins:
            raise VersionsFileError(f"{source}:{number}: {key} is set twice")
        pins[key] = match["value"]
    return pins


@functools.cache
def load_versions(path: Path | None = None) -> dict[str, str]:
    path = path or data_path("versions.env")
    return parse_versions(path.read_text(encoding="utf-8"), source=str(path))
