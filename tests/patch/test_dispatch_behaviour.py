"""Behaviour of the patched module beyond routing: the switch, logging, degradation."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support import trees

LOG_PROBE = """
import json, logging, sm12x.selftest.env as e
e.stub_torchvision()
from sm12x.selftest import census
from sm12x.selftest.kernels import Emulator, Rules
from sglang.kernels.ops.attention import flash_mla_sm120 as m
records = []
handler = logging.Handler(); handler.emit = lambda r: records.append(r.getMessage())
logging.getLogger(m.__name__).addHandler(handler); logging.getLogger(m.__name__).setLevel(logging.INFO)
found = census.shapes(gammas=(4, 5), batches=(1, 2, 3, 16, 32), tps=(4,), contexts=(1024, 65536))
with Emulator(Rules.from_flashinfer(e.flashinfer_package())) as em:
    results = census.run(em, found, ["patched"]) + census.run(em, found, ["patched"])
print(json.dumps({"calls": len(results), "logs": [r for r in records if "SM120 sparse-MLA" in r],
                  "switch": m._SM12X_TOPK_PAD}))
"""


@pytest.fixture(scope="module")
def site(sglang_tree, flashinfer_tree, pins):
    return [sglang_tree(pins["SGLANG_VERSION"]), flashinfer_tree(pins["FLASHINFER_VERSION"])]


def _probe(site, env=None) -> dict:
    proc = trees.run_python(site, ["-c", LOG_PROBE], env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probed(site) -> dict:
    """The probe in the default environment, run once for the two tests that read
    it (an sglang import and two censuses: about 11 CPU s)."""
    return _probe(site)


def test_each_shape_to_route_decision_is_logged_once(probed):
    out = probed
    logs = out["logs"]
    assert out["calls"] > 2 * len(logs) > 0, "many calls, few log lines"
    assert len(logs) == len(set(logs)), "a decision was logged twice"
    # draft: decode and prefill paths, both padded; target layers: unchanged.
    assert (
        "SM120 sparse-MLA decode heads=64 topk=192 d_qk=512 d_v=512 extra cache=none -> "
        "flashinfer, indices padded with -1 to topk 512"
    ) in logs
    assert (
        "SM120 sparse-MLA prefill heads=64 topk=192 d_qk=512 d_v=512 extra cache=none -> "
        "flashinfer, indices padded with -1 to topk 512"
    ) in logs
    assert any("extra cache=page block 2 -> flashinfer, unchanged" in line for line in logs)
    # C128 widths follow the context, yet each route is one line.
    assert sum("page block 2" in line and "prefill" in line for line in logs) == 1


def test_the_environment_switch_is_read_at_import(site, probed):
    assert probed["switch"] is True
    assert _probe(site, env={"SGLANG_SM120_FLASHMLA_TOPK_PAD": "0"})["switch"] is False


def test_a_flashinfer_without_the_tables_leaves_calls_unchanged(site, tmp_path):
    """A flashinfer the patch does not understand: it warns once and changes nothing."""
    probe = """
import json, logging, sm12x.selftest.env as e
e.stub_torchvision()
from flashinfer.mla import _sparse_mla_sm120 as fi
del fi._DECODE_DSV4_DISPATCH
from sglang.kernels.ops.attention import flash_mla_sm120 as m
warnings = []
h = logging.Handler(); h.emit = lambda r: warnings.append(r.getMessage())
logging.getLogger(m.__name__).addHandler(h)
print(json.dumps({"route": m._sm12x_route(5, 64, 192, 512, 512, 0, 0), "warnings": warnings}))
"""
    proc = trees.run_python(site, ["-c", probe])
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["route"] == ["flashinfer", 192]
    assert out["warnings"] == [
        "SM120 sparse-MLA topk dispatch inactive: flashinfer 0.6.15.post1 "
        "lacks _DECODE_DSV4_DISPATCH; calls go to flashinfer unchanged"
    ]


# A flashinfer that keeps the names the routing reads but changes a signature,
# made by editing the real flashinfer's Python (its own callers follow the change).
SIGNATURE_CHANGES = {
    "_decode_dsv4_dispatchable": [
        (
            "    d_qk: int,\n    page_block_size: int,\n    extra_topk: int = 0,\n) -> bool:",
            "    d_qk: int,\n    *,\n    page_block_size: int,\n    extra_topk: int = 0,\n) -> bool:",
        ),
        (
            "num_tokens, num_heads, topk, d_qk, kv_pbs, extra_topk\n",
            "num_tokens, num_heads, topk, d_qk, page_block_size=kv_pbs, extra_topk=extra_topk\n",
        ),
    ],
    "_packed_kv_page_block_size": [  # a new required keyword
        ("model_type=model_type, name=", 'layout="paged", model_type=model_type, name='),
        ("    *,\n    model_type: int,\n", "    *,\n    layout: str,\n    model_type: int,\n"),
    ],
}

ROUTING_PROBE = """
import json, logging, sm12x.selftest.env as e
e.stub_torchvision()
from sm12x.selftest import census
from sm12x.selftest.kernels import Emulator, Rules
from sglang.kernels.ops.attention import flash_mla_sm120 as m
warnings = []
h = logging.Handler(); h.emit = lambda r: warnings.append(r.getMessage())
h.setLevel(logging.WARNING); logging.getLogger(m.__name__).addHandler(h)
found = census.shapes(gammas=(4, 5), batches=(1, 2, 16, 32), tps=(4,), contexts=(1024, 65536))
with Emulator(Rules.from_flashinfer(e.flashinfer_package())) as em:
    calls = {s: census.run(em, found, [s]) for s in ("patched", "unpatched")}
print(json.dumps({"warnings": warnings, "calls": {
    s: [[sh.phase, sh.layer, sh.num_tokens, sh.extra_topk, sh.with_topk_length, sh.path,
         o.route, o.width] for sh, o in r] for s, r in calls.items()}}))
"""


@pytest.mark.parametrize("name", sorted(SIGNATURE_CHANGES))
def test_a_flashinfer_that_changed_a_signature_the_routing_calls_falls_back_unchanged(
    name, sglang_tree, flashinfer_tree, pins, tmp_path
):
    changed = tmp_path / "flashinfer-changed"
    shutil.copytree(flashinfer_tree(pins["FLASHINFER_VERSION"]), changed)
    source = changed / "flashinfer" / "mla" / "_sparse_mla_sm120.py"
    text = source.read_text()
    for old, new in SIGNATURE_CHANGES[name]:
        assert old in text, f"flashinfer {pins['FLASHINFER_VERSION']} no longer has {old!r}"
        text = text.replace(old, new)
    source.write_text(text)
    proc = trees.run_python([sglang_tree(pins["SGLANG_VERSION"]), changed], ["-c", ROUTING_PROBE])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # One warning for the process, naming the error, however many shapes hit it.
    assert len(out["warnings"]) == 1, out["warnings"]
    assert out["warnings"][0].startswith(
        f"SM120 sparse-MLA topk dispatch cannot read flashinfer {pins['FLASHINFER_VERSION']}'s "
        "tables (TypeError: "
    )
    assert out["warnings"][0].endswith("calls it cannot route go to flashinfer unchanged")
    patched, upstream = out["calls"]["patched"], out["calls"]["unpatched"]
    assert len(patched) == len(upstream) > 0
    reads_it = 0
    for mine, theirs in zip(patched, upstream):
        phase, layer, tokens, extra_topk, _, path = mine[:6]
        # The shapes whose route needs the changed function land exactly as
        # without the patch; the others keep the patch's route.
        needs = path == "decode" if name == "_decode_dsv4_dispatchable" else extra_topk > 0
        if needs:
            reads_it += 1
            assert mine == theirs, (mine, theirs)
        elif phase == "draft":
            assert mine[6:] == ["cutlass-padded", 512], mine
    assert reads_it > 0
