"""The report of a bench run: each chart drawn from the right numbers (checked against summary.json
and requests.jsonl, computed here independently), and what the SVG and the files hold."""

from __future__ import annotations

import json
import re
import statistics
import xml.etree.ElementTree as ET

import pytest
from report_helpers import BYTES_PER_TOKEN, FILE_BYTES_PER_TOKEN

from roofline.report.build import write_report

SVG = "{http://www.w3.org/2000/svg}"


def markers_in(svg: str, gid: str) -> int:
    """How many point markers the group with this id draws (matplotlib writes one <use> per
    point)."""
    root = ET.fromstring(svg)
    group = next(e for e in root.iter() if e.get("id") == gid)
    return sum(1 for e in group.iter(f"{SVG}use"))


def texts_in(svg: str) -> list[str]:
    return [e.text or "" for e in ET.fromstring(svg).iter(f"{SVG}text")]


def measured_ok(folder) -> list[dict]:
    lines = [
        json.loads(x) for x in (folder / "requests.jsonl").read_text().splitlines() if x.strip()
    ]
    return [ln for ln in lines if ln["ok"] and ln["phase"] == "measured"]


@pytest.fixture(scope="module")
def report(bench_run):
    folder, _ = bench_run
    return folder, json.loads((folder / "summary.json").read_text()), write_report([folder])


def test_bench_writes_the_report_and_says_where(bench_run):
    folder, stderr = bench_run
    assert f"report: {folder / 'report.html'}" in stderr
    for name in ("report.html", "report.md", "summary.md"):
        assert (folder / name).stat().st_size > 0
    for key in ("roofline", "time_per_token", "prompt_spread", "latency_cdf", "load_sweep"):
        assert (folder / "report" / f"{key}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", key
        assert "<svg" in (folder / "report" / f"{key}.svg").read_text()[:300], key


def test_roofline_places_each_scenario_at_its_intensity(report):
    _, summary, written = report
    chart = written.page.chart("roofline")
    data = chart.data
    assert data.bandwidth_bytes_per_s == pytest.approx(100e9)
    # the null server names no catalogue model but says fp32: 2 FLOPs per 4-byte weight -> 5e7 FLOPs
    # per token
    flops = 2 * BYTES_PER_TOKEN / 4
    measured = {p.label: p for p in data.of_kind("measured")}
    assert set(measured) == {"concurrency=1", "concurrency=2"}
    for s in summary["scenarios"]:
        streams = s["scenario"]["concurrency"]
        p = measured[s["scenario"]["name"]]
        assert p.intensity_flop_per_byte == pytest.approx(streams * flops / BYTES_PER_TOKEN)
        assert p.flop_per_s == pytest.approx(
            streams * s["metrics"]["output_speed_tok_per_s"]["p50"] * flops
        )
    decode = {p.label: p for p in data.of_kind("decode")}
    assert decode["decode b=8"].intensity_flop_per_byte == pytest.approx(4.0)
    assert decode["decode b=8"].flop_per_s == pytest.approx(
        min(100e9 * 4.0, data.peak_flop_per_s or 1e30)
    )
    assert len(data.of_kind("prefill")) == 1
    assert (
        markers_in(chart.svg, "points-measured") == 2
        and markers_in(chart.svg, "points-decode") == 3
    )
    assert {"concurrency=1", "concurrency=2", "decode b=1"} <= set(texts_in(chart.svg))


def test_time_per_token_splits_the_floor_from_the_rest(report):
    _, summary, written = report
    chart = written.page.chart("time_per_token")
    bars = {b.label: b for b in chart.data}
    for s in summary["scenarios"]:
        v = s["vs_ceiling"]
        b = bars[s["scenario"]["name"]]
        assert b.floor_s_per_token == pytest.approx(BYTES_PER_TOKEN / 100e9)  # 1 ms
        assert b.measured_s_per_token == pytest.approx(1 / v["measured_tok_per_s"])
        assert b.percent_of_ceiling == pytest.approx(v["percent_of_ceiling"])
        assert f"{b.percent_of_ceiling:.0f}% of ceiling" in " ".join(texts_in(chart.svg))
        # the file's floor is marked on each bar: the model's file stores a quarter of what the
        # server reads
        assert b.file_floor_s_per_token == pytest.approx(FILE_BYTES_PER_TOKEN / 100e9)  # 0.25 ms
        assert (
            b.file_percent
            == pytest.approx(v["percent_of_file_ceiling"])
            == pytest.approx(b.percent_of_ceiling / 4)
        )
        assert f"{b.file_percent:.0f}% of the file's" in " ".join(texts_in(chart.svg))
    assert chart.svg.count('id="floor-') == 2 and chart.svg.count('id="other-') == 2
    assert chart.svg.count('id="file-floor-') == 2 and "file's floor" in chart.caption
    html = written.html.read_text()
    assert "% of file&#x27;s ceiling" in html or "% of file's ceiling" in html
    assert "file bytes per token" in html and "the engine reads 4.00x" in html
    assert "4.00x the file&#x27;s 25.0 MB" in html or "4.00x the file's 25.0 MB" in html


def test_per_prompt_spread_and_cdfs_hold_every_request(report):
    folder, summary, written = report
    ok = measured_ok(folder)
    spread = written.page.chart("prompt_spread")
    assert len(spread.data) == len(ok) == sum(s["requests"]["ok"] for s in summary["scenarios"])
    assert sorted((p.scenario, p.prompt, p.rep) for p in spread.data) == sorted(
        (ln["scenario"], ln["prompt"], ln["rep"]) for ln in ok
    )
    assert sum(markers_in(spread.svg, f"prompt-points-{k}") for k in range(2)) == len(ok)
    cdf = written.page.chart("latency_cdf")
    for s in summary["scenarios"]:
        name = s["scenario"]["name"]
        for metric in ("ttft_s", "tpot_s"):
            (curve,) = [c for c in cdf.data if c.scenario == name and c.metric == metric]
            assert len(curve.values_s) == s["requests"]["ok"]
            assert list(curve.values_s) == sorted(curve.values_s)
            assert statistics.median(curve.values_s) == pytest.approx(s["metrics"][metric]["p50"])


def test_load_sweep_is_per_user_speed_against_throughput(report):
    _, summary, written = report
    points = written.page.chart("load_sweep").data
    assert [p.streams_or_rate for p in points] == ["1 stream", "2 streams"]
    for p, s in zip(points, summary["scenarios"]):
        assert p.output_tok_per_s == pytest.approx(s["output_tok_per_s"])
        assert p.per_user_tok_per_s == pytest.approx(s["metrics"]["output_speed_tok_per_s"]["p50"])


def test_html_is_self_contained_and_markdown_links_the_charts(report):
    _, _, written = report
    html = written.html.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html, re.IGNORECASE)
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r"url\(\s*['\"]?(?!#)", html)  # only references inside the page
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))  # several SVGs on one page, no id twice
    assert html.count("<svg") == len(written.page.charts) == 5
    assert "the ceiling this run was held against" in html and "provenance" in html
    md = written.markdown.read_text()
    assert "![Roofline](report/roofline.svg)" in md and "| figure" not in md


def test_summary_md_says_what_it_knows_in_words(bench_run):
    folder, _ = bench_run
    md = (folder / "summary.md").read_text()
    assert "None" not in md
    assert (
        "output tokens counted by the server's running usage count in every chunk (8 requests)"
        in md
    )
    assert "(null)" in md.splitlines()[0]  # the served model, as the server named it
