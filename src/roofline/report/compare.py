"""Runs side by side: the same figures of each run in one table; with two runs, B - A and B / A."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from roofline.report.page import Section, Table
from roofline.report.roofline_chart import PointKind, RooflineData, draw_roofline
from roofline.report.run_folders import RunKind
from roofline.report.run_roofline import roofline_of_run
from roofline.report.time_bars import bars_of_bench, bars_of_tune, draw_time_bars


@dataclass(frozen=True)
class Figure:
    """One comparable number of a run: 'sequential: Output Speed p50 (tok/s)' -> 41.2."""

    name: str
    value: float | None


def figures(run: Any) -> list[Figure]:
    out = []
    if run.kind == RunKind.BENCH:
        for s in run.summary.scenarios:

            def stat(metric: str, scale: float = 1.0) -> float | None:
                d = s.metric(metric)  # noqa: B023 (used at once)
                return None if d is None else scale * d.p50

            out += [
                Figure(f"{s.name}: Output Speed p50 (tok/s)", stat("output_speed_tok_per_s")),
                Figure(f"{s.name}: TTFT p50 (ms)", stat("ttft_s", 1e3)),
                Figure(f"{s.name}: TPOT p50 (ms)", stat("tpot_s", 1e3)),
                Figure(f"{s.name}: output tok/s", s.output_tok_per_s),
                Figure(
                    f"{s.name}: % of ceiling",
                    s.vs_ceiling.percent_of_ceiling if s.vs_ceiling else None,
                ),
            ]
            if s.vs_ceiling and s.vs_ceiling.percent_of_file_ceiling is not None:
                out.append(
                    Figure(
                        f"{s.name}: % of the file's ceiling", s.vs_ceiling.percent_of_file_ceiling
                    )
                )
    else:
        t = run.tune
        unit = t.objective.unit
        out += [
            Figure(f"baseline ({unit})", t.baseline.value if t.baseline else None),
            Figure(f"best ({unit})", t.best.value if t.best else None),
            Figure("gain (x)", t.gain),
        ]
    return out


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def comparison_table(runs: Sequence[Any]) -> Table:
    per_run = [{f.name: f.value for f in figures(r)} for r in runs]
    names = list(dict.fromkeys(n for d in per_run for n in d))
    headers = ["figure"] + [f"{chr(65 + i)}: {r.name}" for i, r in enumerate(runs)]
    two = len(runs) == 2
    if two:
        headers += ["B - A", "B / A"]
    rows = []
    for n in names:
        vals = [d.get(n) for d in per_run]
        row = [n] + [_fmt(v) for v in vals]
        if two:
            a, b = vals
            row += [
                _fmt(b - a) if a is not None and b is not None else "-",
                f"{b / a:.3f}" if a and b is not None else "-",
            ]
        rows.append(tuple(row))
    notes = []
    if len(runs) == 2 and not _same_workload(runs):
        notes.append(
            "the two runs did not run the same workload (prompts, reps, max tokens or scenarios "
            "differ): deltas compare different things"
        )
    return Table("side by side", tuple(headers), tuple(rows), tuple(notes))


def _workload(run: Any) -> Any:
    if run.kind == RunKind.TUNE:
        return ("tune", run.tune.objective.name)
    return run.summary.workload


def _same_workload(runs: Sequence[Any]) -> bool:
    return len({repr(_workload(r)) for r in runs}) == 1


def comparison_section(runs: Sequence[Any]) -> Section:
    charts = []
    data = [
        d
        for d in (roofline_of_run(r, prefix=chr(65 + i)) for i, r in enumerate(runs))
        if d is not None
    ]
    if data:
        first = data[0]
        merged = RooflineData(
            first.bandwidth_bytes_per_s,
            first.peak_flop_per_s,
            first.hardware_label,
            first.model_label,
            tuple(p for p in first.points if p.kind != PointKind.MEASURED)
            + tuple(p for d in data for p in d.points if p.kind == PointKind.MEASURED),
            (*first.notes, "Slope and model points: run A's ceiling."),
        )
        charts.append(draw_roofline(merged, key="compare_roofline"))
    bars = []
    for i, r in enumerate(runs):
        if r.kind == RunKind.BENCH:
            bars += bars_of_bench(r, prefix=chr(65 + i))
        else:
            bars += [replace(b, label=f"{chr(65 + i)}: {b.label}") for b in bars_of_tune(r)]
    if bars:
        charts.append(draw_time_bars(bars, key="compare_time_per_token"))
    return Section("comparison", tuple(charts), (comparison_table(runs),))
