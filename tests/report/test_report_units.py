"""Chart data from hand-made summaries: speculation (several tokens per weight pass) on the time
bars and the roofline, and a ladder step where nothing was eligible."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from roofline.bench.summary import RunSummary
from roofline.report.time_bars import bars_of_bench
from roofline.report.tune_charts import ladder_bars
from roofline.tune.records import LadderStep, TrialMetrics


def speculative_run() -> SimpleNamespace:
    summary = RunSummary.from_json(
        {
            "provenance": {"hardware": "10GB/s", "server": {"roofline": {"dtype": "bf16"}}},
            "ceiling": {
                "bytes_per_token": 1e9,
                "bandwidth_bytes_per_s": 10e9,
                "tok_per_s": 10.0,
                "hardware": "10GB/s",
            },
            "scenarios": [
                {
                    "scenario": {"name": "sequential", "kind": "sequential"},
                    "requests": {"ok": 4},
                    "metrics": {
                        "output_speed_tok_per_s": {
                            "n": 4,
                            "mean": 15,
                            "p50": 15.0,
                            "p90": 15,
                            "p95": 15,
                            "p99": 15,
                            "min": 15,
                            "max": 15,
                        }
                    },
                    "passes": {"requests": 4, "tokens_per_pass": 2.0, "passes_per_s": 7.5},
                    "vs_ceiling": {
                        "ceiling_tok_per_s": 10.0,
                        "bytes_per_token": 1e9,
                        "bandwidth_bytes_per_s": 10e9,
                        "basis": "passes",
                        "measured_tok_per_s": 15.0,
                        "percent_of_ceiling": 75.0,
                        "passes_per_s": 7.5,
                        "tokens_per_pass": 2.0,
                        "tokens_percent_of_one_token_ceiling": 150.0,
                    },
                }
            ],
        }
    )
    return SimpleNamespace(
        kind="bench", summary=summary, provenance=summary.provenance, name="spec"
    )


def test_speculation_is_held_against_the_ceiling_in_passes():
    (bar,) = bars_of_bench(speculative_run())
    assert bar.measured_s_per_token == pytest.approx(
        1 / 15
    ) and bar.floor_s_per_token == pytest.approx(0.1)
    assert bar.percent_of_ceiling == 75.0  # passes/s, not the 150% that tokens/s would claim
    assert "passes/s; 2.00 tok/pass" in bar.text and bar.other_s_per_token == 0.0


def test_speculation_moves_the_point_right_on_the_roofline():
    from roofline.report.run_roofline import roofline_of_run

    data = roofline_of_run(speculative_run())
    (p,) = data.of_kind("measured")
    flops = 2 * 1e9 / 2  # bf16: 2 bytes per weight
    # two tokens per weight pass
    assert p.intensity_flop_per_byte == pytest.approx(2.0 * flops / 1e9)
    assert p.flop_per_s == pytest.approx(15.0 * flops)
    # under the slope, not above
    assert p.flop_per_s <= data.bandwidth_bytes_per_s * p.intensity_flop_per_byte


def test_a_ladder_step_with_nothing_eligible_shows_its_fastest_try():
    rows = [
        {
            "knob": "dtype",
            "before": {"objective": 7.5, "spread": 1.0},
            "best_objective": None,
            "kept": False,
            "tried": [
                {"value": "bf16", "objective": 12.0, "spread": 7.0, "status": "inexact"},
                {"value": "int8", "objective": 23.0, "spread": 4.0, "status": "inexact"},
            ],
        },
        {
            "knob": "spec",
            "before": {"objective": 7.5},
            "best_value": "ngram",
            "best_objective": 15.0,
            "kept": True,
            "gain": 7.5,  # 100% over the step's start
            "tried": [{"value": "ngram", "objective": 15.0, "spread": 3.0, "status": "ok"}],
        },
    ]
    tune = SimpleNamespace(ladder=tuple(LadderStep.from_json(r) for r in rows))
    steps = ladder_bars(tune)
    assert [(s.label, s.objective, s.kept) for s in steps] == [
        ("baseline", 7.5, True),
        ("dtype=int8 (inexact)", 23.0, False),
        ("spec=ngram", 15.0, True),
    ]
    assert steps[2].gain_pct == 100.0 and steps[2].spread == 3.0


def test_the_files_floor_is_marked_on_each_tune_bar():
    from roofline.report.time_bars import bars_of_tune, draw_time_bars
    from roofline.tune.slots import Slot
    from roofline.tune.trial_result import TrialResult

    def trial(number: int, speed: float, file_pct: float | None) -> TrialResult:
        ceiling = {"bytes_per_token": 540e6, "bandwidth_bytes_per_s": 27e9, "tok_per_s": 50.0}
        metrics = {
            "output_speed_median_tok_per_s": speed,
            "percent_of_ceiling": 2 * speed,
            "ceiling": ceiling,
        }
        if file_pct is not None:
            ceiling.update(file_bytes_per_token=96.6e6, file_tok_per_s=280.0)
            metrics["percent_of_file_ceiling"] = file_pct
        return TrialResult(
            number,
            Slot("baseline" if number == 0 else "ladder"),
            {"threads": number + 1},
            "ok",
            value=speed,
            metrics=TrialMetrics.from_json(metrics),
        )

    tune = SimpleNamespace(
        baseline=trial(0, 40.0, 14.3), trials=(trial(0, 40.0, 14.3), trial(1, 42.0, None))
    )
    bars = bars_of_tune(SimpleNamespace(tune=tune))
    assert (
        bars[0].file_floor_s_per_token == pytest.approx(1 / 280.0) and bars[0].file_percent == 14.3
    )
    assert bars[0].text == "80% of ceiling, 14% of the file's"
    # an older trial: no mark
    assert bars[1].file_floor_s_per_token is None and bars[1].text == "84% of ceiling"
    chart = draw_time_bars(bars)
    assert chart.svg.count('id="file-floor-0"') == 1 and 'id="file-floor-1"' not in chart.svg
    assert "file's floor" in chart.caption


def test_the_ceiling_table_names_the_files_figures():
    from roofline.report.sections import ceiling_table

    c = RunSummary.from_json(
        {
            "provenance": {},
            "ceiling": {
                "bytes_per_token": 538.1e6,
                "bandwidth_bytes_per_s": 27e9,
                "tok_per_s": 27e9 / 538.1e6,
                "hardware": "local",
                "file_bytes_per_token": 96.6e6,
                "file_tok_per_s": 27e9 / 96.6e6,
            },
        }
    ).ceiling
    rows = dict(ceiling_table(c).rows)
    assert rows["file bytes per token"] == "96.60 MB (the engine reads 5.57x)"
    assert rows["file's ceiling (batch 1)"] == "279.5 tok/s = 3.578 ms/token"
