"""`sm12x watch`'s reading and drawing, without a server: sglang's exposition
as the stand-in writes it (sglang's names, types and labels,
sm12x/mock/metrics.py) read into per-DP-rank figures; the live view within
80 columns with every DP rank of a DP8 rig, alerts and errors on it; the
acceptance bucketed by the batch's mean context where sglang exports the
batch's lengths, and the note saying it cannot be where it does not."""

from __future__ import annotations

import io

from rich.console import Console

from sm12x.deploy import monitoring
from sm12x.mock.metrics import Finished, Metrics
from sm12x.watch import view
from sm12x.watch.main import _url
from sm12x.watch.scrape import parse
from sm12x.watch.state import CONTEXT_NOTE, NO_CONTEXT, Watch

T = monitoring.Thresholds("rtx-pro-6000-tp4", 2.0, 256)


def exposition(
    per_rank: list[int], tokens: int, accept: float = 3.4, status: int = 200, answered: int = 1
) -> str:
    m = Metrics(
        "deepseek-ai/DeepSeek-V4-Flash", dp=len(per_rank), gamma=4, max_running=8, spec=True
    )
    if tokens:
        m.finished(Finished(100, tokens, True, 0.1, 1.0))
    for _ in range(answered):
        m.response("/v1/chat/completions", "POST", status)
    return m.render(in_flight=sum(per_rank), accept_length=accept, per_rank=per_rank).decode()


def test_the_ranks_read_as_the_server_wrote_them():
    point = parse(exposition([3, 1, 0, 2], 50), at=0.0)
    assert {k: (r.running, r.queued) for k, r in point.ranks.items()} == {
        "0": (2, 1),
        "1": (1, 0),
        "2": (0, 0),
        "3": (2, 0),
    }
    assert point.tokens == 50
    assert point.ranks["0"].accept_length == 3.4
    assert point.responses == {"/v1/chat/completions 200": 1}


def test_tokens_per_second_is_the_counters_rate():
    watch = Watch(T)
    watch.add(parse(exposition([1], 100), at=10.0))
    later = parse(exposition([1], 100), at=14.0)
    later.tokens = 500.0
    watch.add(later)
    assert watch.tokens_per_s() == 100.0


def _busy_watch() -> Watch:
    watch = Watch(T)
    for i, accept in enumerate((3.4, 1.2)):
        ranks = [300, 7, 0, 12, 256, 1, 9, 64]
        point = parse(exposition(ranks, 100 * (i + 1), accept, 503, answered=1 + 4 * i), i)
        watch.add(point, f"12:00:0{i}")
    return watch


def test_the_live_view_fits_80_columns():
    watch = _busy_watch()
    snap = watch.snapshot()
    # acceptance under the floor on every rank, every response a 503: both pending
    assert [a["alert"] for a in snap["alerts"]] == ["DsparkAcceptanceCollapse"] * 8 + [
        "ServerErrors"
    ]
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None, force_terminal=False)
    long_url = "http://gpu-box-under-the-desk.lab.example.internal:30000/" + "x" * 60
    console.print(view.render(snap, long_url))
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    text = out.getvalue()
    for shown in (
        "output tok/s",
        "acceptance",
        "PENDING  DsparkAcceptanceCollapse (DP ranks 0-7)",
        "PENDING  ServerErrors",
        "12:00:01 4x HTTP 503 /v1/chat/completions",
        "KV used",
    ):
        assert shown in text, (shown, text)
    # every DP rank has its row
    assert sum(1 for line in lines if line.strip().split(" ")[0] in "01234567") >= 8


def test_acceptance_by_context_where_sglang_exports_the_batch_lengths():
    watch = Watch(T)
    assert watch.snapshot()["accept_by_context_note"] == NO_CONTEXT
    for i, (running, lengths, accept) in enumerate(
        ((1, 4000, 4.5), (1, 100000, 1.8), (2, 20000, 3.0))
    ):
        point = parse(exposition([running], 10 * (i + 1), accept), at=float(i))
        point.ranks["0"].seq_lens = float(lengths)
        watch.add(point)
    snap = watch.snapshot()
    # the first reading has no rate before it: only the later two count
    assert snap["accept_by_context"] == {"32-128K": 1.8, "8-32K": 3.0}
    assert snap["accept_by_context_note"] == CONTEXT_NOTE
    text = exposition([1], 1) + "sglang:decode_sum_seq_lens 9000.0\n"
    assert parse(text, 0.0).ranks["0"].seq_lens == 9000.0


def test_a_url_that_is_not_a_servers_is_refused_in_one_line():
    import pytest

    from sm12x.errors import UserError

    for bad in ("127.0.0.1:30000", "ftp://x", "http://"):
        with pytest.raises(UserError, match="is not a server URL"):
            _url(bad)
    assert _url("http://127.0.0.1:30000/") == "http://127.0.0.1:30000"
