import statistics

import pytest
from bench_helpers import measured, run

from roofline.bench.loadgen import Scenario
from roofline.bench.plan import BenchPlan, shares
from roofline.bench.results import read_requests
from roofline.bench.workloads import Prompt

MS = 1_000_000
TTFT_NS = 20 * MS  # null_url's schedule


def test_shares_split_streams_and_requests():
    plan = BenchPlan(url="", prompts=[Prompt("a", "x"), Prompt("b", "y")], scenarios=[], reps=1)
    sc = Scenario("concurrency", concurrency=5, num_requests=11)
    parts = shares(sc, 2, plan)
    assert [p.streams for p in parts] == [3, 2]
    ids = [sorted(i for i, _ in p.closed_jobs(plan, sc, 100)) for p in parts]
    assert sorted(ids[0] + ids[1]) == list(range(100, 111)) and not set(ids[0]) & set(ids[1])
    rate = Scenario("rate", rate_per_s=10, num_requests=7)
    arr = [p.arrivals(plan, rate, 0) for p in shares(rate, 3, plan)]
    assert sorted(i for a in arr for _, i, _ in a) == list(range(7))


def test_two_worker_processes_measure_like_one(null_url, tmp_path):
    outcome = run(
        null_url,
        [Scenario("concurrency", concurrency=4, num_requests=16)],
        tmp_path / "run",
        workers=2,
        usage="per-chunk",
    )
    s = outcome.summary.scenarios[0]
    assert s.requests.ok == 16 and s.requests.failed == 0
    lines = measured(read_requests(tmp_path / "run")[0])
    assert {ln.worker for ln in lines} == {0, 1}
    assert len({ln.id for ln in lines}) == 16
    assert all(ln.chunk_tokens == [2, 2, 2, 2] for ln in lines)
    # Held against the null_url schedule (20 ms to the first token) and the server's own send
    # stamps (one clock for every process), not against this host's speed: nothing is sent before
    # the schedule (less a timer's rounding), no worker sees a chunk before the server sent it,
    # and at the median each worker is less than the schedule's whole TTFT behind the server (a
    # busy host makes the server late too; its lateness is in the stamps).
    ttft_ns = [ln.chunk_offsets_ns[0] for ln in lines]
    sent_ns = [ln.server_chunk_offsets_ns[0] for ln in lines]
    assert min(sent_ns) >= TTFT_NS - 0.2 * MS
    assert all(c >= at for ln in lines for c, at in zip(ln.chunk_ns, ln.server_chunk_ns))
    assert statistics.median(t - at for t, at in zip(ttft_ns, sent_ns)) < TTFT_NS
    assert s.metric("ttft_s").p50 == pytest.approx(statistics.median(ttft_ns) / 1e9)
    assert s.client_cpu_s > 0 and s.client_cpu_us_per_token > 0
