"""pip's resolution, as requirement lines uv installs without resolving again.

scripts/test sets up its virtualenvs in two steps: pip resolves (`pip install
--dry-run --report`, with this machine's pip configuration: its local wheel
folders, extra indexes and constraints, which uv does not read), then uv installs
exactly what pip chose, by URL and sha256, in parallel and byte-compiled. pip's
own install of the main virtualenv took 104 s of a cold setup's ~110 s critical
path on this 2-core kind (single-threaded download, unpack and compile); pip's
dry run plus uv's install of the same 174 distributions took about 45 s. uv's own
resolver picks differently here (pytablewriter 0.38 and python-dateutil 4 where
pip picks 1.2.1 and 2.9), so uv never resolves: the choice stays pip's.

Standard library only: it runs before the virtualenv has anything installed.

    python3 -m tests.support.pip_report REPORT.json > requirements.txt

Each distribution pip would download becomes `name @ URL --hash=sha256:...`; an
editable (a local project) becomes `-e PATH`. A report entry of another kind
(a VCS checkout, a non-editable local folder, a URL without a sha256) is one
error naming it: nothing here guesses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse


class ReportError(ValueError):
    pass


def lines(report: dict) -> list[str]:
    if report.get("version") != "1":
        raise ReportError(
            f"pip's report has version {report.get('version')!r}; this reads version 1"
        )
    out = []
    for item in report.get("install", []):
        name = item["metadata"]["name"]
        info = item.get("download_info") or {}
        url = info.get("url", "")
        if "dir_info" in info:
            if not info["dir_info"].get("editable"):
                raise ReportError(
                    f"{name}: a local folder that is not editable ({url}); install it with pip"
                )
            parsed = urlparse(url)
            if parsed.scheme != "file":
                raise ReportError(f"{name}: an editable that is not a local folder ({url})")
            out.append(f"-e {unquote(parsed.path)}")
            continue
        digest = (info.get("archive_info") or {}).get("hashes", {}).get("sha256")
        if not digest:
            raise ReportError(
                f"{name}: pip's report has no sha256 for {url or 'it'}; install it with pip"
            )
        out.append(f"{name} @ {url} --hash=sha256:{digest}")
    if not out:
        raise ReportError("pip's report installs nothing")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 -m tests.support.pip_report REPORT.json", file=sys.stderr)
        return 2
    try:
        report = json.loads(Path(argv[0]).read_text())
        print("\n".join(lines(report)))
    except (OSError, json.JSONDecodeError, KeyError, ReportError) as exc:
        print(f"pip_report: {argv[0]}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
