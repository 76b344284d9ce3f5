from roofline.bench.calibrate import Case, run_calibration, table_rows
from roofline.bench.schedule import Schedule


def test_calibration_reports_small_errors_against_the_truth(tmp_path):
    cases = [
        Case("2 streams, 2-token chunks", Schedule(0.03, 0.004, 12, 2), concurrency=2, requests=6)
    ]
    [r] = run_calibration(cases, out_dir=tmp_path)
    errors = {row["key"]: row["error_pct"] for row in r.rows}
    assert set(errors) == {
        "ttft_s",
        "tpot_s",
        "itl_s",
        "chunk_gap_s",
        "e2e_s",
        "output_speed_tok_per_s",
    }
    # Against the schedule only a lower bound holds (nothing arrives early: a busy host makes the
    # null server late). The client's own error is against what the server sent (its stamps, on
    # the same clock): never negative at the first token (nothing is read before it is sent), and
    # held to the schedule, not to this host's speed: the client keeps up with the stream, less
    # than one chunk interval (2 tokens x 4 ms) behind the server at the median and in TTFT's
    # mean, and its first and last chunks' delays differ by less than that interval, which
    # bounds TPOT's error.
    schedule = cases[0].schedule
    chunk_interval_s = schedule.tokens_per_chunk * schedule.gap_s
    by_key = {row["key"]: row for row in r.rows}
    ttft = by_key["ttft_s"]
    assert errors["ttft_s"] > -1
    assert ttft["client_error_pct"] > -1
    assert ttft["reported"] - ttft["server_sent"] < chunk_interval_s
    assert 0 < r.facts["client_delay_p50_ms"] < 1e3 * chunk_interval_s
    tpot, most = by_key["tpot_s"], chunk_interval_s / (schedule.tokens - 1)
    assert abs(tpot["reported"] - tpot["server_sent"]) < most
    # Output Speed = 1 / TPOT: the same bound as a rate
    speed_error_pct = by_key["output_speed_tok_per_s"]["client_error_pct"]
    assert abs(speed_error_pct) < 100 * most / (tpot["server_sent"] - most)
    assert r.facts["requests_ok"] == 6 and r.facts["client_cpu_us_per_token"] > 0
    _, rows, notes = table_rows([r])
    assert len(rows) == 6 and "µs/token" in notes[0]
