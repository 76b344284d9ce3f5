"""The report of a tune run (ladder over the fake engine's speed): the ladder, the sweep with every
repetition, the trials on the roofline and their time per token, checked against tune.json."""

from __future__ import annotations

import json

import pytest
from test_report_bench import markers_in, texts_in

from roofline.hardware.catalogue import get_hardware
from roofline.modelspec.catalogue import load_spec
from roofline.modelspec.components import matmul_params_per_token
from roofline.report.build import write_report


@pytest.fixture(scope="module")
def report(tune_run):
    folder, _ = tune_run
    return folder, json.loads((folder / "tune.json").read_text()), write_report([folder])


def test_tune_writes_the_report_and_says_where(tune_run):
    folder, stderr = tune_run
    assert f"report: {folder / 'report.html'}" in stderr
    assert (folder / "report" / "ladder.svg").exists() and (
        folder / "report" / "sweeps.png"
    ).exists()


def test_ladder_shows_each_step_with_its_gain(report):
    _, tune, written = report
    chart = written.page.chart("ladder")
    (row,) = tune["ladder"]
    assert [s.label for s in chart.data] == ["baseline", f"speed={row['best_value']}"]
    base, step = chart.data
    assert base.objective == pytest.approx(row["before"]["objective"])
    assert step.objective == pytest.approx(row["best_objective"]) and step.kept == row["kept"]
    assert step.gain_pct == pytest.approx(row["gain_pct"])
    assert row["best_value"] == 400 and step.objective > 1.5 * base.objective  # 400 vs 200 tok/s
    assert chart.svg.count('id="step-') == 2
    assert f"{step.objective:.1f}" in " ".join(texts_in(chart.svg))


def test_sweep_has_a_point_per_repetition(report):
    _, tune, written = report
    chart = written.page.chart("sweeps")
    (sweep,) = chart.data
    assert sweep.knob == "speed"
    assert (
        [p.value for p in sweep.points]
        == [p["value"] for p in tune["sweeps"]["speed"]]
        == [100, 200, 400]
    )
    trials = {t["number"]: t for t in tune["trials"]}
    for p, raw in zip(sweep.points, tune["sweeps"]["speed"]):
        assert list(p.reps) == trials[raw["trial"]]["rep_values"] and len(p.reps) == 2
        assert p.objective == pytest.approx(raw["objective"])
    assert markers_in(chart.svg, "sweep-speed") == 6
    medians = [p.objective for p in sweep.points]
    assert medians == sorted(medians)  # the fake engine is paced: faster setting, more tok/s


def test_trials_on_the_roofline_and_their_time_per_token(report):
    _, tune, written = report
    ok = [t for t in tune["trials"] if t["status"] == "ok"]
    assert len(ok) == 3
    rl = written.page.chart("roofline").data
    b200 = get_hardware("b200")
    assert rl.peak_flop_per_s == pytest.approx(b200.flops["bf16"])
    assert rl.bandwidth_bytes_per_s == pytest.approx(tune["ceiling"]["bandwidth_bytes_per_s"])
    flops = 2 * matmul_params_per_token(load_spec("smollm2-135m-instruct"))
    points = {p.label: p for p in rl.of_kind("measured")}
    assert set(points) == {f"trial {t['number']}" for t in ok}
    for t in ok:
        p = points[f"trial {t['number']}"]
        assert p.flop_per_s == pytest.approx(t["metrics"]["output_speed_median_tok_per_s"] * flops)
        assert p.intensity_flop_per_byte == pytest.approx(flops / t["metrics"]["bytes_per_token"])
    bars = written.page.chart("time_per_token").data
    assert len(bars) == 3
    for b, t in zip(bars, ok):
        assert b.label.startswith(f"#{t['number']} ")
        assert b.floor_s_per_token == pytest.approx(1 / t["metrics"]["ceiling_tok_per_s"])
        assert b.percent_of_ceiling == pytest.approx(t["metrics"]["percent_of_ceiling"])
    html = written.html.read_text()
    assert "Warning" not in html and f"trial {ok[1]['number']}" in html
    spread = written.page.chart("prompt_spread").data  # baseline and best, each prompt x repetition
    assert {r.scenario for r in spread} == {
        "baseline (trial 0)",
        f"best (trial {tune['best']['number']})",
    }
    assert len(spread) == 2 * 4 * 2  # two trials, four built-in prompts, two reps
    # the ceiling breakdown
    assert "bytes per decoded token: " in html and "decode bounds on " in html
