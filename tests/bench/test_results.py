import json
import os

import pytest

from roofline.bench.records import RequestRecord
from roofline.bench.results import RequestLog, read_requests
from roofline.bench.summarize import summarize
from roofline.bench.summary import Failure, RequestCounts, RunSummary
from roofline.bench.tables import tables
from roofline.bounds.ceiling import Ceiling

MS = 1_000_000


def rec(i, prompt, gap_ms, ok=True):
    r = RequestRecord(id=i, scenario="sequential", prompt=prompt, rep=i)
    r.intended_ns = 10**9 + i * 10**9
    r.sent_ns = r.intended_ns + MS
    r.chunk_ns = [r.intended_ns + 50 * MS + k * gap_ms * MS for k in range(11)]
    r.chunk_tokens = [1] * 11
    r.output_tokens = 11
    r.end_ns = r.chunk_ns[-1]
    if not ok:
        r.error_kind, r.error = "http_500", "HTTP 500: boom"
    return r


def test_log_lines_survive_a_torn_last_line(tmp_path):
    log = RequestLog(tmp_path / "requests.jsonl", origin_ns=0)
    log.write(rec(0, "a", 10))
    log.write(rec(1, "a", 10))
    log.close()
    with open(tmp_path / "requests.jsonl", "ab") as f:
        f.write(b'{"id": 2, "scen')  # a kill in the middle of a write
    lines, bad = read_requests(tmp_path)
    assert [ln.id for ln in lines] == [0, 1] and bad == 1
    # the line holds times relative to the origin (intended) and to intended (the rest) ...
    raw = json.loads((tmp_path / "requests.jsonl").read_text().splitlines()[0])
    assert raw["chunk_ns"][0] == 50 * MS and raw["intended_ns"] == 10**9
    # ... and reads back onto the run's clock, the same line again when written
    assert lines[0].chunk_offsets_ns[0] == 50 * MS and lines[0].intended_ns == 10**9
    assert lines[0].to_json(0) == raw


def test_summary_with_ceiling_prompt_spread_and_failures():
    # prompt a: 10 ms/token (100 tok/s) and 20 ms/token (50 tok/s); prompt b: 5 ms/token (200 tok/s)
    recs = [rec(0, "a", 10), rec(1, "a", 20), rec(2, "b", 5), rec(3, "b", 5, ok=False)]
    lines = [RequestRecord.from_json(json.loads(json.dumps(r.to_json(0)))) for r in recs]
    ceiling = Ceiling(bytes_per_token=1e9, bandwidth_bytes_per_s=400e9, model="m", hardware="h")
    typed = summarize(
        lines,
        provenance={"scenarios": [{"name": "sequential"}]},
        ceiling=ceiling,
        slo_s={"ttft": 0.06, "tpot": 0.015},
    )
    s = typed.scenarios[0]
    assert s.requests == RequestCounts(
        measured=4,
        ok=3,
        failed=1,
        warmup=0,
        failures={"http_500": Failure(count=1, example="HTTP 500: boom")},
    )
    spread = {p.prompt: p for p in s.prompts}
    assert spread["a"].output_speed_median_tok_per_s == pytest.approx(75.0)
    assert spread["a"].spread_pct == pytest.approx(100 * 50 / 75)
    assert spread["b"].reps == 1
    v = s.vs_ceiling
    assert v.ceiling_tok_per_s == pytest.approx(400.0)
    assert v.measured_tok_per_s == pytest.approx(100.0)  # median of 50, 100, 200
    assert v.percent_of_ceiling == pytest.approx(25.0)
    assert v.effective_bandwidth_bytes_per_s == pytest.approx(100e9)
    assert s.goodput.requests_meeting_slo == 2  # the 20 ms/token one misses TPOT
    # one to_json/from_json
    assert RunSummary.from_json(json.loads(json.dumps(typed.to_json()))) == typed
    assert typed.scenarios[0].vs_ceiling.percent_of_ceiling == pytest.approx(25.0)
    names = [t[0] for t in tables(typed)]
    assert names == ["latency", "rates", "per prompt (Output Speed over reps)", "failed requests"]
    notes = " ".join(tables(typed)[1][3])
    assert "25.0% of the ceiling" in notes and "effective bandwidth 100.00 GB/s" in notes


def test_log_is_appended_by_several_writers(tmp_path):
    path = tmp_path / "requests.jsonl"
    logs = [RequestLog(path, 0) for _ in range(3)]
    for i in range(30):
        logs[i % 3].write(rec(i, "a", 1))
    for log in logs:
        log.close()
    lines, bad = read_requests(tmp_path)
    assert bad == 0 and sorted(ln.id for ln in lines) == list(range(30))
    assert os.path.getsize(path) > 0


def test_a_rate_above_the_ceiling_names_the_suspect_figure_beside_the_percentage():
    from roofline.bench.summarize import vs_ceiling
    from roofline.bench.tables import rates_table, result_notes
    from roofline.bounds.ceiling import Ceiling

    def summary(hardware: str, measured: float) -> RunSummary:
        c = Ceiling(
            bytes_per_token=538e6, bandwidth_bytes_per_s=27e9, hardware=hardware, assumptions=()
        )
        return RunSummary.from_json(
            {
                "ceiling": c.to_dict(),
                "scenarios": [
                    {
                        "scenario": {"name": "sequential"},
                        "metrics": {},
                        "token_sources": {},
                        "vs_ceiling": vs_ceiling(c, {"p50": measured}),
                    }
                ],
            }
        )

    def cell(s: RunSummary) -> str:
        return rates_table(s)[2][0][-1]

    near = summary("local", 54.0)  # 107.6% of 50.2 tok/s: within what a probe can miss
    assert cell(near) == "107.6% (bandwidth suspect, see note)"
    assert any(
        "above 100%" in n and "probe's measured bandwidth is the suspect" in n
        for n in result_notes(near)
    )
    far = summary("local", 65.0)  # 129.5%: more than any probe kernel misses by
    assert cell(far).startswith("129.5% (bytes/token suspect")
    assert any(
        "538.0 MB per token counted from the model's config is the suspect" in n
        for n in result_notes(far)
    )
    listed = summary("b200", 54.0)  # above a listed figure: the bytes are suspect
    assert cell(listed).startswith("107.6% (bytes/token suspect")
    below = summary("local", 47.0)
    assert cell(below) == "93.7%" and not any("above 100%" in n for n in result_notes(below))
