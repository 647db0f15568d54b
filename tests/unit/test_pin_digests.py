"""scripts/pin-digests against fake registry tools on PATH (no registry is reachable).

Each fake (docker buildx imagetools, crane, skopeo) answers the way the real
tool does from a table of manifests: the digest it reports and the raw bytes
it fetched. The script must write the digest back atomically, touch nothing
else, and refuse anything it cannot prove (single-arch images, a missing
arch, a digest that does not hash, a tool that fails).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sm12x.versions import parse_versions, read_versions, track_key, tracks
from tests.support.cli import ROOT

SCRIPT = ROOT / "scripts" / "pin-digests"
REF = "example.org/sglang:v1-runtime"
OTHER = "example.org/other:v2"

FAKE = r'''#!PYTHON
"""Fake TOOL: answers from $FAKE_REGISTRY (ref -> {"raw": file, "digest": reported})."""
import json, os, sys
tool, args = "TOOL", sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(tool + " " + " ".join(args) + "\n")
table = json.load(open(os.environ["FAKE_REGISTRY"]))
if tool == "docker":
    if args[:2] == ["buildx", "version"]:
        if os.environ.get("FAKE_NO_BUILDX"):
            sys.exit("docker: 'buildx' is not a docker command.")
        print("github.com/docker/buildx v0.0.0-fake"); sys.exit(0)
    assert args[:3] == ["buildx", "imagetools", "inspect"], args
    rest = args[3:]
    raw = "--raw" in rest
    ref = [a for a in rest if a not in ("--raw", "--format") and not a.startswith("{{")][0]
elif tool == "crane":
    raw, ref = args[0] == "manifest", args[1]
else:  # skopeo inspect [--raw | --format {{.Digest}}] docker://ref
    raw, ref = "--raw" in args, args[-1].removeprefix("docker://")
if ref not in table:
    sys.exit(f"{tool}: {ref}: MANIFEST_UNKNOWN: manifest unknown")
entry = table[ref]
if entry.get("fail"):
    sys.exit(f"{tool}: {ref}: {entry['fail']}")
if raw:
    sys.stdout.buffer.write(open(entry["raw"], "rb").read())
elif tool == "docker":
    print(json.dumps(entry["digest"]))
else:
    print(entry["digest"])
'''


def index(*platforms: str) -> bytes:
    manifests = [
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": "sha256:" + hashlib.sha256(p.encode()).hexdigest(),
            "size": 1234,
            "platform": {"os": p.split("/")[0], "architecture": p.split("/")[1]},
        }
        for p in platforms
    ]
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": manifests,
        },
        indent=3,
    ).encode()


def digest_of(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


class Registry:
    def __init__(self, tmp: Path):
        self.tmp, self.table = tmp, {}
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.log = tmp / "calls.log"
        self.log.touch()

    def add(self, ref: str, raw: bytes, digest: str | None = None, fail: str | None = None):
        path = self.tmp / f"manifest-{len(self.table)}.json"
        path.write_bytes(raw)
        self.table[ref] = {"raw": str(path), "digest": digest or digest_of(raw), "fail": fail}

    def tool(self, name: str) -> None:
        path = self.bin / name
        path.write_text(FAKE.replace("PYTHON", sys.executable).replace("TOOL", name))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)

    def run(self, versions: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        (self.tmp / "registry.json").write_text(json.dumps(self.table))
        environ = {
            "PATH": str(self.bin),
            "FAKE_REGISTRY": str(self.tmp / "registry.json"),
            "FAKE_LOG": str(self.log),
            **env,
        }
        return subprocess.run(
            [sys.executable, str(SCRIPT), "--file", str(versions), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=environ,
        )


VERSIONS = f"""# A versions file like the real one.
SM12X_VERSION=0.1.0
# The base.
BASE_IMAGE={REF}
# Unresolved until pin-digests runs.
BASE_IMAGE_DIGEST=
SM12X_IMAGE=ghcr.io/x/sm12x:0.1.0
"""


@pytest.fixture
def registry(tmp_path):
    return Registry(tmp_path)


@pytest.fixture
def versions(tmp_path) -> Path:
    path = tmp_path / "versions.env"
    path.write_text(VERSIONS)
    path.chmod(0o640)
    return path


@pytest.mark.parametrize("tool", ["docker", "crane", "skopeo"])
def test_each_tool_resolves_and_writes_only_the_digest(registry, versions, tool):
    raw = index("linux/amd64", "linux/arm64")
    registry.add(REF, raw)
    registry.tool(tool)
    proc = registry.run(versions)
    assert proc.returncode == 0, proc.stderr
    assert f"{REF} -> {digest_of(raw)} (was unresolved; {tool})" in proc.stdout
    expected = VERSIONS.replace("BASE_IMAGE_DIGEST=\n", f"BASE_IMAGE_DIGEST={digest_of(raw)}\n")
    assert versions.read_text() == expected
    assert parse_versions(versions.read_text())["BASE_IMAGE_DIGEST"] == digest_of(raw)
    assert stat.S_IMODE(versions.stat().st_mode) == 0o640
    assert sorted(p.name for p in versions.parent.glob(".versions.env*")) == []


def test_a_tool_that_adds_a_newline_to_the_raw_manifest_is_accepted(registry, versions):
    raw = index("linux/amd64", "linux/arm64")
    registry.add(REF, raw + b"\n", digest=digest_of(raw))
    registry.tool("crane")
    assert registry.run(versions).returncode == 0


def test_picks_docker_only_when_buildx_works(registry, versions):
    registry.add(REF, index("linux/amd64", "linux/arm64"))
    registry.tool("docker")
    registry.tool("skopeo")
    proc = registry.run(versions, "--dry-run", FAKE_NO_BUILDX="1")
    assert proc.returncode == 0, proc.stderr
    assert "; skopeo)" in proc.stdout
    assert versions.read_text() == VERSIONS, "--dry-run wrote the file"


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            json.dumps(
                {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}
            ).encode(),
            "is a single-platform image",
        ),
        (index("linux/amd64"), "has no linux/arm64 image"),
    ],
)
def test_refuses_a_base_that_is_not_one_tag_for_both_arches(registry, versions, raw, message):
    registry.add(REF, raw)
    registry.tool("crane")
    proc = registry.run(versions)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert versions.read_text() == VERSIONS


def test_refuses_a_digest_that_is_not_the_manifest_it_fetched(registry, versions):
    registry.add(REF, index("linux/amd64", "linux/arm64"), digest="sha256:" + "0" * 64)
    registry.tool("skopeo")
    proc = registry.run(versions)
    assert proc.returncode == 1
    assert "does not hash to sha256:000" in proc.stderr
    assert versions.read_text() == VERSIONS


def test_a_failing_lookup_stops_before_any_write(registry, tmp_path):
    # Two images: the second fails, so the first (resolved) is not written either.
    path = tmp_path / "two.env"
    text = f"BASE_IMAGE={REF}\nBASE_IMAGE_DIGEST=\nOTHER_IMAGE={OTHER}\nOTHER_IMAGE_DIGEST=\n"
    path.write_text(text)
    registry.add(REF, index("linux/amd64", "linux/arm64"))
    registry.add(OTHER, b"", fail="unauthorized: authentication required")
    registry.tool("crane")
    proc = registry.run(path)
    assert proc.returncode == 1
    assert "unauthorized: authentication required" in proc.stderr
    assert path.read_text() == text


def test_says_what_to_install_when_no_tool_is_there(registry, versions):
    proc = registry.run(versions)
    assert proc.returncode == 1
    assert "no registry tool found" in proc.stderr and "crane or skopeo" in proc.stderr


def test_refuses_an_image_line_that_already_names_a_digest(registry, tmp_path):
    path = tmp_path / "pinned.env"
    path.write_text(f"BASE_IMAGE={REF}@sha256:{'a' * 64}\nBASE_IMAGE_DIGEST=\n")
    registry.tool("crane")
    proc = registry.run(path)
    assert proc.returncode == 1 and "already names a digest" in proc.stderr


def test_check_lists_unresolved_digests(registry, versions, tmp_path):
    proc = registry.run(versions, "--check")
    assert proc.returncode == 1
    assert f"BASE_IMAGE_DIGEST: unresolved ({REF})" in proc.stdout
    resolved = tmp_path / "resolved.env"
    resolved.write_text(
        VERSIONS.replace("BASE_IMAGE_DIGEST=", f"BASE_IMAGE_DIGEST=sha256:{'b' * 64}")
    )
    assert registry.run(resolved, "--check").returncode == 0
    assert registry.log.read_text() == "", "--check must not ask the registry"


SEEN = "sha256:" + "5" * 64


def with_seen(tmp_path, seen: str) -> Path:
    path = tmp_path / "seen.env"
    path.write_text(
        VERSIONS.replace(
            "BASE_IMAGE_DIGEST=\n",
            f"BASE_IMAGE_DIGEST=\n"
            f"# Seen in a public deployment, not resolved.\n"
            f"BASE_IMAGE_DIGEST_SEEN={seen}\n",
        )
    )
    return path


def test_a_resolved_digest_equal_to_the_seen_one_confirms_it(registry, tmp_path):
    raw = index("linux/amd64", "linux/arm64")
    path = with_seen(tmp_path, digest_of(raw))
    before = path.read_text()
    registry.add(REF, raw)
    registry.tool("crane")
    proc = registry.run(path)
    assert proc.returncode == 0, proc.stderr
    assert "confirms BASE_IMAGE_DIGEST_SEEN" in proc.stdout
    assert path.read_text() == before.replace(
        "BASE_IMAGE_DIGEST=\n", f"BASE_IMAGE_DIGEST={digest_of(raw)}\n"
    )
    # Once resolved, --check passes and says the two agree.
    check = registry.run(path, "--check")
    assert check.returncode == 0 and "confirms BASE_IMAGE_DIGEST_SEEN" in check.stdout


def test_a_resolved_digest_that_differs_from_the_seen_one_is_written_and_named(registry, tmp_path):
    # The deployment may have pinned one platform's manifest: the registry's
    # index (hash-checked, both arches) wins, and the difference is said.
    raw = index("linux/amd64", "linux/arm64")
    path = with_seen(tmp_path, SEEN)
    registry.add(REF, raw)
    registry.tool("skopeo")
    proc = registry.run(path)
    assert proc.returncode == 0, proc.stderr
    assert f"differs from BASE_IMAGE_DIGEST_SEEN={SEEN}" in proc.stdout
    values = parse_versions(path.read_text())
    assert values["BASE_IMAGE_DIGEST"] == digest_of(raw)
    assert values["BASE_IMAGE_DIGEST_SEEN"] == SEEN, "the record of what was seen is kept"


def test_check_shows_a_seen_digest_but_still_reports_it_unresolved(registry, tmp_path):
    proc = registry.run(with_seen(tmp_path, SEEN), "--check")
    assert proc.returncode == 1
    assert f"BASE_IMAGE_DIGEST: unresolved; seen, not resolved: {SEEN} ({REF})" in proc.stdout
    # Only BASE_IMAGE is an image: the _SEEN line is not taken for one.
    assert proc.stdout.count("pin-digests:") == 1
    assert registry.log.read_text() == ""


@pytest.mark.parametrize("track", tracks())
def test_the_repos_versions_file_says_which_digests_are_unresolved(track):
    """An empty digest is documented as unresolved; a filled one is a sha256. A
    digest only seen elsewhere sits in <KEY>_DIGEST_SEEN, never where the build
    reads it, and --check keeps reporting the real one until it is resolved."""
    pins = read_versions()
    text = (ROOT / "versions.env").read_text()
    base, digest_key = track_key(track, "BASE_IMAGE"), track_key(track, "BASE_IMAGE_DIGEST")
    digest = pins[digest_key]
    comment = text.split(f"{digest_key}=")[0].rsplit(f"{base}=", 1)[1]
    if digest:
        assert len(digest) == 71 and digest.startswith("sha256:")
    else:
        assert "UNRESOLVED" in comment and "scripts/pin-digests" in comment
    seen = pins.get(f"{digest_key}_SEEN", "")
    if seen:
        assert len(seen) == 71 and seen.startswith("sha256:")
        seen_comment = text.split(f"{digest_key}_SEEN=")[0].rsplit(f"{digest_key}=", 1)[1]
        assert "SEEN, NOT RESOLVED" in seen_comment and "never uses it" in seen_comment
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
    )
    unresolved = [t for t in tracks() if not pins[track_key(t, "BASE_IMAGE_DIGEST")]]
    assert proc.returncode == (1 if unresolved else 0)
    assert (f"{digest_key}: unresolved" in proc.stdout) == (not digest)
    if seen and not digest:
        assert f"seen, not resolved: {seen}" in proc.stdout
