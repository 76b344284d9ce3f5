import itertools
import statistics

import pytest
from bench_helpers import measured, nullserver, run

from roofline.bench.loadgen import Scenario, arrival_offsets_s, default_num_requests
from roofline.bench.results import read_requests


def gaps(offsets):
    return [b - a for a, b in itertools.pairwise(offsets)]


def test_poisson_gaps_have_mean_one_over_rate_and_cv_one():
    g = gaps(arrival_offsets_s(4.0, "poisson", 1.0, count=20001, duration_s=None, seed=3))
    assert statistics.mean(g) == pytest.approx(0.25, rel=0.03)
    assert statistics.pstdev(g) / statistics.mean(g) == pytest.approx(1.0, rel=0.05)


def test_gamma_burstiness_sets_the_spread():
    g = gaps(arrival_offsets_s(4.0, "gamma", 0.25, count=20001, duration_s=None, seed=3))
    assert statistics.mean(g) == pytest.approx(0.25, rel=0.05)
    # gamma with shape b has CV 1/sqrt(b): 2 for b = 0.25
    assert statistics.pstdev(g) / statistics.mean(g) == pytest.approx(2.0, rel=0.1)


def test_constant_and_duration_bound_arrivals():
    assert arrival_offsets_s(
        2.0, "constant", 1.0, count=None, duration_s=2.0, seed=0
    ) == pytest.approx([0, 0.5, 1.0, 1.5])
    with pytest.raises(ValueError):
        arrival_offsets_s(2.0, "poisson", 1.0, count=None, duration_s=None, seed=0)


def test_default_request_counts():
    assert default_num_requests(Scenario("sequential"), 4, 3) == 12
    assert default_num_requests(Scenario("concurrency", concurrency=16), 4, 3) == 64
    assert default_num_requests(Scenario("rate", rate_per_s=2.5), 4, 3) == 50


def test_open_loop_counts_queueing_in_ttft(tmp_path):
    """Arrivals every 20 ms, one request in flight at a time, each taking ~60 ms: the queue grows,
    and TTFT (from the intended time) grows with it while the server's own TTFT stays at 10 ms."""
    with nullserver("--ttft", "10ms", "--gap", "10ms", "--tokens", "6") as url:
        outcome = run(
            url,
            [
                Scenario(
                    "rate", rate_per_s=50, arrivals="constant", max_concurrency=1, num_requests=8
                )
            ],
            tmp_path / "run",
            warmup=0,
            usage="per-chunk",
        )
    lines = sorted(measured(read_requests(tmp_path / "run")[0]), key=lambda ln: ln.intended_ns)
    assert [ln.ok for ln in lines] == [True] * 8
    # intended times are the schedule: 20 ms apart exactly
    assert gaps([ln.intended_ns for ln in lines]) == pytest.approx([20_000_000] * 7, abs=1)
    lags = [ln.sent_offset_ns / 1e9 for ln in lines]
    ttfts = [ln.chunk_offsets_ns[0] / 1e9 for ln in lines]
    # request i waits for the i earlier ones (~60 ms each) minus its 20 ms later arrival: ~40 ms
    # more each
    assert lags[-1] > 0.2 and ttfts[-1] > lags[-1] + 0.009
    assert all(b > a for a, b in itertools.pairwise(ttfts))
    s = outcome.summary.scenarios[0]
    assert s.metric("send_lag_s").max == pytest.approx(max(lags))


def test_closed_loop_keeps_n_streams_busy(tmp_path):
    with nullserver("--ttft", "20ms", "--gap", "10ms", "--tokens", "5") as url:
        outcome = run(
            url,
            [Scenario("concurrency", concurrency=3, num_requests=9)],
            tmp_path / "run",
            usage="per-chunk",
        )
    lines = measured(read_requests(tmp_path / "run")[0])
    starts = sorted(ln.intended_ns for ln in lines)
    ends = sorted(ln.end_ns for ln in lines)
    # three streams: the first three start before any request ends, the fourth only after one
    # has ended (each takes at least 20 + 4 x 10 ms, whatever the host's load)
    assert starts[2] < ends[0] <= starts[3] and ends[0] - starts[0] >= 60_000_000
    assert outcome.summary.scenarios[0].requests.ok == 9


def test_duration_bound_scenario(tmp_path):
    with nullserver("--ttft", "5ms", "--gap", "5ms", "--tokens", "4") as url:
        outcome = run(
            url,
            [Scenario("concurrency", concurrency=2, duration_s=0.5)],
            tmp_path / "run",
            usage="per-chunk",
        )
    s = outcome.summary.scenarios[0]
    lines = measured(read_requests(tmp_path / "run")[0])
    starts = [ln.intended_ns for ln in lines]
    # ~20 ms a request, two streams, half a second: at most ~50 requests, none started after the
    # half second, and the window ends when the last one started does
    assert 2 <= s.requests.ok <= 60 and s.requests.failed == 0
    assert max(starts) - min(starts) < 500_000_000
    last_end_ns = max(ln.end_ns for ln in lines)
    assert s.window_s == pytest.approx((last_end_ns - min(starts)) / 1e9, abs=2e-3)
