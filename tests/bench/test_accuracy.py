"""The client against the null server: every metric close to the truth.

The machine is shared and noisy: the schedule bounds each metric from below (nothing arrives
early), and from above the truth is the server's own send stamps, so a server that a busy host
made late does not fail the client."""

import itertools
import statistics

import pytest
from bench_helpers import measured, nullserver, run

from roofline.bench.loadgen import Scenario
from roofline.bench.results import read_requests
from roofline.bench.schedule import Schedule

MS = 1e-3
SCHED = Schedule(ttft_s=0.030, gap_s=0.004, tokens=24, tokens_per_chunk=3)


@pytest.fixture(scope="module")
def url3():
    with nullserver(
        "--ttft", "30ms", "--gap", "4ms", "--tokens", "24", "--tokens-per-chunk", "3"
    ) as url:
        yield url


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario("sequential", num_requests=6),
        Scenario("concurrency", concurrency=4, num_requests=16),
    ],
    ids=["sequential", "concurrency4"],
)
def test_every_metric_against_the_schedule(url3, tmp_path, scenario):
    outcome = run(url3, [scenario], tmp_path / "run", usage="per-chunk")
    s = outcome.summary.scenarios[0]
    truth = SCHED.truth()
    assert s.requests.ok == scenario.num_requests and s.requests.failed == 0
    assert s.requests.warmup == 1  # recorded, not measured
    lines = measured(read_requests(tmp_path / "run")[0])
    for ln in lines:  # token counts are exact, chunk by chunk
        assert ln.token_source == "usage_per_chunk"
        assert ln.chunk_tokens == [3] * 8 and ln.output_tokens == 24
    m = s.metrics
    # The schedule bounds a metric from below only (a server or client can be late, never early).
    assert m["ttft_s"].p50 >= truth["ttft_s"] - 0.2 * MS  # less a timer's rounding
    assert m["e2e_s"].p50 >= truth["e2e_s"] - 0.2 * MS
    # From above, the truth is what the server sent: its stamps, on the client's clock. A busy host
    # delays the server's plan; the client must still time what arrived, within its own small delay.
    sent = [ln.server_chunk_offsets_ns for ln in lines]
    sent_ttft_s = [t[0] / 1e9 for t in sent]
    sent_e2e_s = [t[-1] / 1e9 for t in sent]
    sent_tpot_s = [(t[-1] - t[0]) / 1e9 / 23 for t in sent]  # (last - first) / (n - 1)
    sent_gap_s = [(b - a) / 1e9 for t in sent for a, b in itertools.pairwise(t)]
    med = statistics.median
    assert med(sent_ttft_s) <= m["ttft_s"].p50 <= med(sent_ttft_s) + 3 * MS
    assert med(sent_e2e_s) <= m["e2e_s"].p50 <= med(sent_e2e_s) + 3 * MS
    assert m["tpot_s"].mean == pytest.approx(statistics.mean(sent_tpot_s), abs=0.1 * MS)
    assert m["output_speed_tok_per_s"].p50 == pytest.approx(1 / med(sent_tpot_s), rel=0.03)
    assert m["chunk_gap_s"].p50 == pytest.approx(med(sent_gap_s), abs=1 * MS)
    assert m["itl_s"].p50 == pytest.approx(med(sent_gap_s) / 3, abs=0.4 * MS)  # 3 tokens a chunk
    # by definition, same n each
    assert m["itl_s"].mean == pytest.approx(m["tpot_s"].mean, rel=1e-9)
    assert m["tokens_per_chunk"].mean == 3.0
    assert s.output_tokens == 24 * scenario.num_requests


def test_client_delay_against_server_send_stamps(url3, tmp_path):
    """The server stamps each event with its send time on the shared monotonic clock: the client's
    own delay (its timestamp minus the server's) is small and never negative."""
    run(url3, [Scenario("sequential", num_requests=4)], tmp_path / "run", usage="per-chunk")
    lines = measured(read_requests(tmp_path / "run")[0])
    delays = [c - s for ln in lines for c, s in zip(ln.chunk_ns, ln.server_chunk_ns)]
    assert len(delays) == 4 * 8
    assert min(delays) > 0
    assert statistics.median(delays) < 1_000_000  # ns


def test_final_usage_only_on_the_completions_api(url3, tmp_path):
    """Without per-chunk usage the total is shared by characters: exact here, all chunks alike."""
    outcome = run(
        url3,
        [Scenario("sequential", num_requests=3)],
        tmp_path / "run",
        usage="final",
        api="completions",
    )
    s = outcome.summary.scenarios[0]
    assert s.token_sources == {"usage_total+chars": 3}
    lines = measured(read_requests(tmp_path / "run")[0])
    assert all(ln.chunk_tokens == [3] * 8 for ln in lines)
    # The truth is the server's own send stamps: a busy host makes the server late (its plan is on
    # absolute times, so a late first chunk even shortens TPOT), and the client must time what was
    # sent, not what was planned.
    sent_tpot_s = [(ln.server_chunk_ns[-1] - ln.server_chunk_ns[0]) / 1e9 / 23 for ln in lines]
    tpot_s = s.metric("tpot_s").mean
    assert tpot_s == pytest.approx(SCHED.truth()["tpot_s"], rel=0.5)  # the schedule, roughly
    assert tpot_s == pytest.approx(statistics.mean(sent_tpot_s), abs=0.1 * MS)


def test_without_usage_each_chunk_counts_one_and_says_so(url3, tmp_path):
    outcome = run(url3, [Scenario("sequential", num_requests=2)], tmp_path / "run", usage="none")
    s = outcome.summary.scenarios[0]
    assert s.token_sources == {"chunks": 2}
    assert s.output_tokens == 2 * 8  # undercounted, and labelled as such


def test_auto_usage_falls_back_when_a_strict_server_refuses(tmp_path):
    with nullserver("--strict", "--ttft", "5ms", "--gap", "1ms", "--tokens", "4") as url:
        outcome = run(url, [Scenario("sequential", num_requests=2)], tmp_path / "run", usage="auto")
    prov = outcome.summary.provenance
    assert prov["usage_used"] == "final"
    s = outcome.summary.scenarios[0]
    assert s.requests.ok == 2 and s.token_sources == {"usage_total": 2}
    assert s.requests.warmup == 3  # the refused probe, the accepted probe, the warm-up
