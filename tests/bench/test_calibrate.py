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
    # null server late). The client's own error is against what the server sent (its stamps): a
    # late client inflates TTFT a little; the token rate stays within a few percent.
    client = {row["key"]: row["client_error_pct"] for row in r.rows}
    assert errors["ttft_s"] > -1
    assert -1 < client["ttft_s"] < 15
    assert abs(client["tpot_s"]) < 5 and abs(client["output_speed_tok_per_s"]) < 5
    assert r.facts["requests_ok"] == 6 and r.facts["client_cpu_us_per_token"] > 0
    assert 0 < r.facts["client_delay_p50_ms"] < 2
    _, rows, notes = table_rows([r])
    assert len(rows) == 6 and "µs/token" in notes[0]
