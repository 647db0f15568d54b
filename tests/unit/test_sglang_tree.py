"""The inventory of each track's whole sglang tree (issue 45): every read of the
environment, every server and every variable-path route is in the committed
files (sm12x/launch/sglang_env.json, sglang_routes.json) and judged
(tests/support/sglang_servers.py); one read of each form injected into a copy
of the tree fails the check alone; and what sglang's server modules read while
they import, under a recording os.environ, is in the static inventory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from sm12x.mock import serving as sglang_serving
from sm12x.mock import wheels
from tests.support import sglang_servers, sglang_tree
from tests.support.sglang_env_reads import reads_of

VERSIONS = sglang_tree.versions()
INJECTED = "sglang/srt/entrypoints/sm12x_injected.py"
RECORDER = sglang_tree.Path(__file__).parents[1] / "support" / "sglang_env_recorder.py"
# One of each form, alone in a new module of the copy, and what the check must name.
FORMS = {
    "environ[]": ('import os\nA = os.environ["SM12X_INJECTED_A"]\n', "SM12X_INJECTED_A"),
    "environ.get": ('import os\nos.environ.get("SM12X_INJECTED_B", "")\n', "SM12X_INJECTED_B"),
    "getenv": ('import os\nos.getenv("SM12X_INJECTED_C")\n', "SM12X_INJECTED_C"),
    "in environ": ('import os\nD = "SM12X_INJECTED_D" in os.environ\n', "SM12X_INJECTED_D"),
    "env helper": (
        'from sglang.srt.utils import get_bool_env_var\nget_bool_env_var("SM12X_INJECTED_E")\n',
        "SM12X_INJECTED_E",
    ),
    "envs.X": (
        "from sglang.srt.environ import envs\nenvs.SM12X_INJECTED_F.get()\n",
        "SM12X_INJECTED_F",
    ),
    "Env declaration": ("SM12X_INJECTED_G = EnvBool(False)\n", "SM12X_INJECTED_G"),
    "env-config dataclass": (
        "class C:\n    @classmethod\n    def _env_prefix(cls):\n"
        '        return "SM12X_INJECTED_H_"\n\n    port: int = 0\n',
        "SM12X_INJECTED_H_PORT",
    ),
    "a constant's name": (
        'import os\nNAME = "SM12X_INJECTED_I"\nos.getenv(NAME)\n',
        "SM12X_INJECTED_I",
    ),
    "computed read": ("import os\ndef f(n):\n    return os.getenv(n)\n", "::f:3 is not judged"),
    "uvicorn": (
        'import uvicorn\ndef serve(app):\n    uvicorn.run(app, host="0.0.0.0", port=1)\n',
        "server sglang/srt/entrypoints/sm12x_injected.py::serve",
    ),
    "aiohttp": (
        "from aiohttp import web\nasync def serve(r):\n"
        '    await web.TCPSite(r, "0.0.0.0", 1).start()\n',
        "::serve (web.TCPSite",
    ),
    "http.server": (
        'from http.server import HTTPServer\ndef serve(h):\n    HTTPServer(("", 1), h)\n',
        "::serve (.HTTPServer",
    ),
    "zmq bind": ('import zmq\ndef serve(sock):\n    sock.bind("tcp://*:1")\n', "::serve (.bind"),
    "socket listen": ("import socket\ndef serve(s):\n    s.listen()\n", "::serve (.listen"),
    "variable route": (
        'import os\n@app.post(os.environ.get("SM12X_INJECTED_ROUTE", "/x"))\n'
        "async def handler():\n    pass\n",
        "from SM12X_INJECTED_ROUTE, not in sm12x/launch/sglang_routes.json",
    ),
    "route path from a name": (
        'import os\nWHERE = os.getenv("SM12X_INJECTED_R2", "/y")\n\n'
        "@router.get(WHERE)\nasync def handler():\n    pass\n",
        "from SM12X_INJECTED_R2, not in",
    ),
    "router prefix": (
        "router = APIRouter(prefix=compute())\n",
        "a value that is no variable",
    ),
}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_committed_inventory_is_each_pinned_tree_s(version):
    assert sglang_servers.stale(version, sglang_tree.of_version(version)) == []


def test_every_server_and_computed_read_is_judged():
    assert sglang_servers.unjudged() == []


def _link_tree(source, dest) -> None:
    """A copy of sglang's tree: hard links where one file system allows (the
    copy's files are never edited in place: the test only adds a module)."""
    try:
        shutil.copytree(source, dest, copy_function=os.link)
    except OSError:
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(source, dest)


@pytest.fixture(scope="module", params=VERSIONS)
def tree_copy(request, tmp_path_factory):
    version = request.param
    site = sglang_serving.tree(version, patched=False)
    copy = tmp_path_factory.mktemp(f"sglang-{version}")
    _link_tree(site / "sglang", copy / "sglang")
    # The copy as it is: the committed inventory holds everything it reads.
    found = sglang_tree.inventory(sglang_tree.modules_of_folder(copy))
    assert reads_of(found) == reads_of(sglang_tree.of_version(version))
    assert sglang_servers.stale(version, found) == []
    return version, copy


@pytest.mark.parametrize("form", FORMS)
def test_one_injected_read_of_each_form_fails_the_check(tree_copy, form):
    version, copy = tree_copy
    source, needle = FORMS[form]
    module = copy / INJECTED
    module.write_text(source, encoding="utf-8")
    try:
        problems = sglang_servers.stale(
            version, sglang_tree.inventory(sglang_tree.modules_of_folder(copy))
        )
    finally:
        module.unlink()
    assert any(needle in p and "sm12x_injected.py" in p for p in problems), (form, problems)


@pytest.mark.parametrize("version", VERSIONS)
def test_what_the_server_modules_read_at_import_is_in_the_static_inventory(version, tmp_path):
    site = sglang_serving.tree(version, patched=False)
    out = tmp_path / "reads.json"
    path = os.pathsep.join([*wheels.pythonpath(version), str(site)])
    modules = [
        "sglang.srt.entrypoints.http_server",
        "sglang.srt.debug_utils.dumper",
        "sglang.srt.utils.auth",
    ]
    proc = subprocess.run(
        [sys.executable, str(RECORDER), str(out), *modules],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": path},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recorded = json.loads(out.read_text())
    # A module may stop at a package this host lacks (stubbed) after its own
    # reads have run: 0.5.17's dumper stops at a stub's version check. The
    # reads recorded up to there still count; 0.5.23's dumper imports whole.
    if version != "0.5.17":
        assert "sglang.srt.debug_utils.dumper" not in recorded["errors"], recorded["errors"]
        assert "DUMPER_SERVER_PORT" in recorded["reads"]
    assert len(recorded["reads"]) > 20, recorded
    static = reads_of(sglang_tree.of_version(version))
    missing = {n: f for n, f in recorded["reads"].items() if n not in static}
    assert missing == {}, f"read at import but not found by the scanner: {missing}"


def edit_the_scanner(monkeypatch) -> None:
    """sglang_scan.py reads as one line longer: the scanner's source, as its cache
    keys hash it, has changed."""
    scanner = sglang_tree.Path(sglang_tree.__file__).parent / "sglang_scan.py"
    real_read = sglang_tree.Path.read_bytes

    def edited(self):
        data = real_read(self)
        return data + b"\n# edited\n" if self == scanner else data

    monkeypatch.setattr(sglang_tree.Path, "read_bytes", edited)


def test_the_inventory_cache_scans_again_when_the_wheel_or_the_scanner_changes(
    tmp_path, monkeypatch
):
    """The scan is kept per wheel (its sha256) and scanner source: the same wheel
    is read from the cache, a wheel rebuilt with the same name and size but one
    byte different is scanned again, and so is the same wheel after a change to
    the scanner."""
    import zipfile

    monkeypatch.setenv("SM12X_CACHE", str(tmp_path / "cache"))
    scans = []
    real = sglang_tree.inventory

    def counted(modules):
        scans.append(1)
        return real(modules)

    monkeypatch.setattr(sglang_tree, "inventory", counted)
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"

    def build(name: str) -> None:
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr("sglang/reads.py", f'import os\nA = os.environ["{name}"]\n')

    build("SM12X_KEY_ONE")
    assert "SM12X_KEY_ONE" in sglang_tree.of_wheel(wheel).reads and len(scans) == 1
    assert "SM12X_KEY_ONE" in sglang_tree.of_wheel(wheel).reads and len(scans) == 1  # cached
    size = wheel.stat().st_size
    build("SM12X_KEY_TWO")  # same length: the same name and size, one byte apart
    assert wheel.stat().st_size == size
    found = sglang_tree.of_wheel(wheel)
    assert len(scans) == 2 and "SM12X_KEY_TWO" in found.reads, found.reads
    assert "SM12X_KEY_ONE" not in found.reads
    # The scanner's own source is in the key too.
    edit_the_scanner(monkeypatch)
    sglang_tree.of_wheel(wheel)
    assert len(scans) == 3


def test_a_module_is_scanned_again_only_when_its_text_or_the_scanner_changes(tmp_path, monkeypatch):
    """Each module's scan is kept by its text's sha256 and the scanner's source, and
    written with the wheel's inventory: another process reading that inventory scans
    none of a copy of the tree, a copy with one byte of one module changed scans that
    module alone, and a change to the scanner scans every module again."""
    import zipfile

    monkeypatch.setenv("SM12X_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sglang_tree, "_SCANS", {})
    scanned: list[str] = []
    real = sglang_tree.scan
    monkeypatch.setattr(sglang_tree, "scan", lambda source: scanned.append(source) or real(source))
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    modules = {
        "sglang/a.py": 'import os\nA = os.environ["SM12X_A"]\n',
        "sglang/b.py": 'import os\nB = os.getenv("SM12X_B")\n',
        "sglang/c.py": "X = 1\n",  # no word the forms need: never parsed
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in modules.items():
            archive.writestr(path, text)
    assert set(sglang_tree.of_wheel(wheel).reads) == {"SM12X_A", "SM12X_B"}
    assert len(scanned) == 2
    # another process: nothing in memory; the module scans come with the inventory file
    monkeypatch.setattr(sglang_tree, "_SCANS", {})
    assert set(sglang_tree.of_wheel(wheel).reads) == {"SM12X_A", "SM12X_B"}
    copy = tmp_path / "copy"
    for path, text in modules.items():
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_text(text)
    scanned.clear()
    found = sglang_tree.inventory(sglang_tree.modules_of_folder(copy))
    assert scanned == [] and set(found.reads) == {"SM12X_A", "SM12X_B"}
    # one byte of one module: that module alone is scanned again
    (copy / "sglang/b.py").write_text('import os\nB = os.getenv("SM12X_C")\n')
    found = sglang_tree.inventory(sglang_tree.modules_of_folder(copy))
    assert scanned == ['import os\nB = os.getenv("SM12X_C")\n']
    assert set(found.reads) == {"SM12X_A", "SM12X_C"}
    # the scanner's source changed: every module the prefilter passes, again
    edit_the_scanner(monkeypatch)
    scanned.clear()
    sglang_tree.inventory(sglang_tree.modules_of_folder(copy))
    assert len(scanned) == 2
