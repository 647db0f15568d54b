"""sm12x.selftest.csrc reads tables out of the C++, it does not know them by heart."""

from __future__ import annotations

import pytest

from sm12x.mock import wheels
from sm12x.selftest import csrc

PINNED = wheels.patch_series()["patch"][0]["flashinfer_verified"]


@pytest.fixture(scope="module")
def prefill_cu(tmp_path_factory):
    from sm12x.versions import load_versions

    version = load_versions()["FLASHINFER_VERSION"]
    dest = tmp_path_factory.mktemp("fi")
    wheels.unpack("flashinfer-python", version, dest, ("flashinfer/data/csrc/sparse_mla_sm120",))
    return csrc.csrc_dir(dest / "flashinfer")


def test_a_new_instance_in_the_cpp_shows_up_in_the_parse(prefill_cu, tmp_path):
    source = (prefill_cu / "sparse_mla_sm120_prefill.cu").read_text()
    baseline = csrc.parse_prefill(prefill_cu / "sparse_mla_sm120_prefill.cu")
    assert 384 not in baseline.single_topk
    grown = source.replace(
        "  else if (topk == 1024)",
        "  else if (topk == 384)\n    DISPATCH_BY_NH_CM(BF16, 384);\n  else if (topk == 1024)",
        1,
    )
    assert grown != source
    path = tmp_path / "sparse_mla_sm120_prefill.cu"
    path.write_text(grown)
    assert csrc.parse_prefill(path).single_topk == baseline.single_topk | {384}


def test_decode_pairs_and_guards_come_from_the_cpp(prefill_cu, tmp_path):
    decode = prefill_cu / "sparse_mla_sm120_decode_dsv4.cu"
    pairs = csrc.parse_decode_dsv4(decode)
    assert (64, 512) in pairs and (64, 192) not in pairs
    assert csrc.decode_page_block_size(decode) == 64
    grown = decode.read_text().replace(
        "  DSV4_DISPATCH(64, 512)", "  DSV4_DISPATCH(64, 192)\n  DSV4_DISPATCH(64, 512)", 1
    )
    path = tmp_path / "decode.cu"
    path.write_text(grown)
    assert csrc.parse_decode_dsv4(path) == pairs | {(64, 192)}
    assert csrc.decode_orchestrator_min_tokens(prefill_cu / "sparse_mla_sm120.cu") == 64


@pytest.mark.parametrize(
    "text",
    ["", "int main() { return 0; }", "inline bool dispatch_dsv4_single(int a) { return false; "],
)
def test_unrecognisable_cpp_is_an_error_not_an_empty_table(tmp_path, text):
    path = tmp_path / "x.cu"
    path.write_text(text)
    with pytest.raises(csrc.CsrcFormatError):
        csrc.parse_prefill(path)
