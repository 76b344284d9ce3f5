import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline.bench import metrics
from roofline.bench.metrics import RequestMetrics
from roofline.bench.records import RequestRecord
from roofline.bench.schedule import Schedule
from roofline.errors import UserError

MS = 1_000_000


def test_multi_token_chunks_by_hand():
    # chunks at 100, 120, 150 ms carrying 1, 3, 2 tokens: n = 6
    # as requests.jsonl holds it: times after the intended send, which is 1 s into the run
    line = RequestRecord.from_json(
        {
            "id": 0,
            "intended_ns": 10**9,
            "chunk_ns": [100 * MS, 120 * MS, 150 * MS],
            "chunk_tokens": [1, 3, 2],
            "output_tokens": 6,
            "sent_ns": 2 * MS,
        }
    )
    m = metrics.request_metrics(line)
    assert m.ttft_s == pytest.approx(0.100)
    assert m.e2e_s == pytest.approx(0.150)
    assert m.tpot_s == pytest.approx(0.050 / 5)
    assert m.output_speed_tok_per_s == pytest.approx(100.0)
    assert m.send_lag_s == pytest.approx(0.002)
    assert m.tokens_per_chunk == pytest.approx(2.0)
    assert metrics.chunk_gaps_seconds(line.chunk_offsets_ns) == pytest.approx([0.020, 0.030])
    # the 3 tokens of the 2nd chunk share its 20 ms gap; the 2 of the 3rd share 30 ms
    times = line.chunk_offsets_ns
    assert metrics.itl_per_token_seconds(times, line.chunk_tokens) == pytest.approx(
        [0.020 / 3] * 3 + [0.015] * 2
    )
    assert m.itl_max_s == pytest.approx(0.015)


def test_first_chunk_with_several_tokens_gives_zero_gaps():
    itl = metrics.itl_per_token_seconds([10 * MS, 30 * MS], [3, 1])
    assert itl == pytest.approx([0.0, 0.0, 0.020])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50_000_000), st.integers(1, 5)), min_size=1, max_size=30))
def test_mean_itl_equals_tpot(chunks):
    t, times, tokens = 5 * MS, [], []
    for gap, k in chunks:
        t += gap
        times.append(t)
        tokens.append(k)
    n = sum(tokens)
    itl = metrics.itl_per_token_seconds(times, tokens)
    assert len(itl) == n - 1
    tpot = metrics.tpot_seconds(metrics.ttft_seconds(times), metrics.e2e_seconds(times), n)
    if n >= 2:
        assert sum(itl) / len(itl) == pytest.approx(tpot, rel=1e-9, abs=1e-15)
    else:
        assert tpot is None


def test_single_token_has_no_tpot():
    m = metrics.request_metrics(
        RequestRecord(0, "", chunk_ns=[MS], chunk_tokens=[1], output_tokens=1)
    )
    assert (
        m.tpot_s is None and m.output_speed_tok_per_s is None and m.ttft_s == pytest.approx(0.001)
    )


def test_distribution_matches_numpy():
    rng = np.random.default_rng(1)
    v = rng.exponential(1.0, 1001)
    d = metrics.distribution([*v, None])
    assert d["n"] == 1001
    assert d["mean"] == pytest.approx(v.mean())
    assert d["std"] == pytest.approx(v.std())
    for q in (50, 90, 95, 99):
        assert d[f"p{q}"] == pytest.approx(np.percentile(v, q))
    assert d["max"] == v.max() and d["min"] == v.min()
    assert metrics.distribution([None]) is None


def test_window_and_rates():
    lines = [
        RequestRecord.from_json({"id": 0, "intended_ns": 0, "end_ns": 2 * 10**9}),
        RequestRecord.from_json({"id": 1, "intended_ns": 10**9, "end_ns": 3 * 10**9}),
    ]
    assert metrics.window_seconds(lines) == pytest.approx(4.0)
    assert metrics.rate_per_s(8, 4.0) == 2.0
    assert metrics.rate_per_s(8, 0.0) is None


def test_goodput_counts_only_requests_meeting_every_slo():
    per = [
        RequestMetrics(ttft_s=0.1, tpot_s=0.01, e2e_s=1.0, output_tokens=10),
        RequestMetrics(ttft_s=0.5, tpot_s=0.01, e2e_s=1.0, output_tokens=20),  # TTFT too slow
        RequestMetrics(ttft_s=0.1, tpot_s=0.05, e2e_s=1.0, output_tokens=30),  # TPOT too slow
        RequestMetrics(ttft_s=0.2, tpot_s=0.04, e2e_s=1.0, output_tokens=40),
    ]
    g = metrics.goodput(per, {"ttft": 0.45, "tpot": 0.04}, window_s=2.0)
    assert g.requests_meeting_slo == 2
    assert g.requests_per_s == pytest.approx(1.0)
    assert g.output_tok_per_s == pytest.approx(25.0)
    assert g.fraction == pytest.approx(0.5)


def test_parse_slo():
    assert metrics.parse_slo("ttft=450ms, tpot=40ms") == {
        "ttft": pytest.approx(0.45),
        "tpot": pytest.approx(0.04),
    }
    for bad in ("latency=3s", "ttft", "ttft=fast", "ttft=0ms", ""):
        with pytest.raises(UserError):
            metrics.parse_slo(bad)


def test_schedule_truth_by_hand():
    # 100 tokens in 2-token chunks 5 ms apart per token: 50 chunks, 10 ms between chunks
    s = Schedule(ttft_s=0.020, gap_s=0.005, tokens=100, tokens_per_chunk=2)
    t = s.truth()
    assert t["ttft_s"] == pytest.approx(0.020)
    assert t["e2e_s"] == pytest.approx(0.020 + 49 * 0.010)
    assert t["tpot_s"] == pytest.approx(49 * 0.010 / 99)
    assert t["chunk_gap_mean_s"] == pytest.approx(0.010)
    assert t["itl_mean_s"] == pytest.approx(t["tpot_s"])
    assert math.isclose(t["output_speed_tok_per_s"], 99 / 0.49)
    assert s.chunk_tokens(7) == [2, 2, 2, 1]


def test_speculation_holds_weight_passes_not_tokens_against_the_ceiling():
    """100 MB/token at 10 GB/s: ceiling 100 tok/s. A speculating server at 150 tok/s with 2.5 tokens
    per pass ran 60 passes/s: 60% of the ceiling (not 150%); without speculation tokens are the
    basis."""
    from roofline.bench.summarize import vs_ceiling
    from roofline.bench.summary import Passes
    from roofline.bounds.ceiling import Ceiling

    c = Ceiling(bytes_per_token=100e6, bandwidth_bytes_per_s=10e9)
    spec = vs_ceiling(c, {"p50": 150.0}, Passes(requests=3, tokens_per_pass=2.5, passes_per_s=60.0))
    assert spec["basis"] == "passes" and spec["percent_of_ceiling"] == pytest.approx(60.0)
    assert spec["tokens_percent_of_one_token_ceiling"] == pytest.approx(150.0)
    assert spec["effective_bandwidth_bytes_per_s"] == pytest.approx(6e9)
    plain = vs_ceiling(c, {"p50": 80.0}, Passes(requests=3, tokens_per_pass=1.0, passes_per_s=80.0))
    assert plain["basis"] == "tokens" and plain["percent_of_ceiling"] == pytest.approx(80.0)
