"""The sections of a report, per kind of run: a bench run (ceiling, time per token, requests,
tables) and a tune run (ladder, sweeps, trials on the roofline, tables)."""

from __future__ import annotations

from typing import Any

from roofline.report.page import Section, Table
from roofline.report.request_charts import (
    cdfs,
    draw_cdfs,
    draw_load,
    draw_prompt_spread,
    load_points,
    prompt_reps,
)
from roofline.report.roofline_chart import draw_roofline
from roofline.report.run_roofline import roofline_of_run
from roofline.report.time_bars import bars_of_bench, bars_of_tune, draw_time_bars
from roofline.report.tune_charts import (
    draw_ladder,
    draw_sweeps,
    ladder_bars,
    sweeps_of,
)


def ceiling_table(c: Any) -> Table:
    rows = [
        ("model", c.model or "-"),
        ("hardware", c.hardware or "-"),
        ("bytes per token", f"{c.bytes_per_token / 1e6:,.2f} MB"),
        ("bandwidth", f"{c.bandwidth_bytes_per_s / 1e9:,.2f} GB/s"),
        (
            "ceiling (batch 1)",
            f"{c.tok_per_s:,.1f} tok/s = {1e3 * c.bytes_per_token / c.bandwidth_bytes_per_s:.3f} "
            "ms/token",
        ),
    ]
    if c.file_bytes_per_token:  # the bytes the model's file stores: what the model needs
        rows += [
            (
                "file bytes per token",
                f"{c.file_bytes_per_token / 1e6:,.2f} MB (the engine reads {c.read_ratio:.2f}x)",
            ),
            (
                "file's ceiling (batch 1)",
                f"{c.file_tok_per_s:,.1f} tok/s = "
                f"{1e3 * c.file_bytes_per_token / c.bandwidth_bytes_per_s:.3f} ms/token",
            ),
        ]
    return Table(
        "the ceiling this run was held against",
        ("", "value"),
        tuple(rows),
        tuple(f"assumption: {a}" for a in c.assumptions),
    )


def breakdown_tables(a: Any) -> tuple[Table, Table]:
    """A CeilingAnalysis's bytes per decoded token by component, and its decode bounds per batch
    size."""
    rows = [
        (c.label, f"{c.params / 1e6:,.1f} M", c.format_label, f"{c.bytes / 1e6:,.2f} MB")
        for c in a.components
        if c.counted
    ]
    if a.context_tokens:
        rows.append(
            (
                f"KV cache ({a.context_tokens:,} tokens)",
                "",
                a.kv.format,
                f"{a.kv.bytes_per_sequence / 1e6:,.2f} MB",
            )
        )
    rows.append(("total", "", "", f"{a.bytes_per_token / 1e6:,.2f} MB"))
    breakdown = Table(
        f"bytes per decoded token: {a.model.name}",
        ("component", "params", "format", "bytes"),
        tuple(rows),
    )
    bounds = Table(
        f"decode bounds on {a.hardware.label}",
        ("batch", "ms per step", "tok/s per user", "tok/s total", "limited by", "fits"),
        tuple(
            (
                str(b.batch),
                f"{1e3 * b.seconds_per_step:.3f}",
                f"{b.tok_per_s_per_user:,.1f}",
                f"{b.tok_per_s_total:,.1f}",
                b.limited_by,
                "yes" if b.fits else "NO",
            )
            for b in a.batches
        ),
    )
    return breakdown, bounds


def analysis_of(model: str | None, hardware: str | None) -> Any:
    """The ceiling analysis of a run's --model on its --hardware, when both name what the catalogue
    knows."""
    if not model or not hardware:
        return None
    from roofline.bounds.analysis import CeilingRequest, analyse
    from roofline.errors import UserError

    try:
        return analyse(CeilingRequest(model=model, hardware=hardware, batches=(1, 8, 64)))[1]
    except (UserError, OSError, ValueError, KeyError, TypeError):
        return None


def bench_sections(run: Any, key_prefix: str = "", title_prefix: str = "") -> list[Section]:
    from roofline.bench.tables import (
        failures_table,
        latency_table,
        prompts_table,
        rates_table,
    )

    s = run.summary
    out = []
    charts, notes = [], []
    rl = roofline_of_run(run)
    if rl is not None:
        charts.append(draw_roofline(rl, key=f"{key_prefix}roofline"))
    else:
        notes.append(
            "no ceiling recorded (give --model and --hardware, or an engine that reports its "
            "bytes per token): no roofline and no time-per-token chart"
        )
    bars = bars_of_bench(run)
    if bars:
        charts.append(draw_time_bars(bars, key=f"{key_prefix}time_per_token"))
    tables = [Table.of(rates_table(s))]
    if s.ceiling is not None:
        tables.append(ceiling_table(s.ceiling))
    a = analysis_of(s.model, s.hardware)
    if a is not None:
        tables += breakdown_tables(a)
    out.append(
        Section(f"{title_prefix}ceiling and speed", tuple(charts), tuple(tables), tuple(notes))
    )

    charts = []
    reps = prompt_reps(run.requests)
    if reps:
        charts.append(draw_prompt_spread(reps, key=f"{key_prefix}prompt_spread"))
    curves = cdfs(run.requests)
    if curves:
        charts.append(draw_cdfs(curves, key=f"{key_prefix}latency_cdf"))
    load = load_points(s)
    if load:
        charts.append(draw_load(load, key=f"{key_prefix}load_sweep"))
    tables = [Table.of(latency_table(s))] + [
        Table.of(t) for t in (prompts_table(s), failures_table(s)) if t
    ]
    out.append(Section(f"{title_prefix}requests", tuple(charts), tuple(tables)))
    return out


def tune_sections(run: Any, key_prefix: str = "", title_prefix: str = "") -> list[Section]:
    from roofline.report.tune_text import best_lines, header_notes
    from roofline.report.tune_text import tables as tune_tables

    t = run.tune
    unit = t.objective.unit
    out = []
    charts = []
    steps = ladder_bars(t)
    if steps:
        charts.append(draw_ladder(steps, unit, key=f"{key_prefix}ladder"))
    sweeps = sweeps_of(t)
    if sweeps:
        charts.append(draw_sweeps(sweeps, unit, key=f"{key_prefix}sweeps"))
    notes = []
    try:
        notes = list(header_notes(t)) + [line for line in best_lines(t)]
    except (
        KeyError,
        AttributeError,
        TypeError,
        ValueError,
    ) as e:  # a partial result (no tune.json)
        notes = [f"summary lines unavailable for this partial run ({e.__class__.__name__})"]
    out.append(Section(f"{title_prefix}tuning", tuple(charts), (), tuple(notes)))

    charts = []
    rl = roofline_of_run(run)
    if rl is not None:
        charts.append(draw_roofline(rl, key=f"{key_prefix}roofline"))
    bars = bars_of_tune(run)
    if bars:
        charts.append(draw_time_bars(bars, key=f"{key_prefix}time_per_token"))
    try:
        tables = tuple(Table.of(x) for x in tune_tables(t, run.path))
    except (KeyError, AttributeError, TypeError, ValueError) as e:
        tables = ()
        notes = [f"tables unavailable for this partial run ({e.__class__.__name__})"]
    a = analysis_of(t.model, t.ceiling.hardware if t.ceiling else None)
    if a is not None:
        tables += breakdown_tables(a)
    out.append(Section(f"{title_prefix}trials against the ceiling", tuple(charts), tables))
    reps = tune_prompt_reps(run)
    if reps:
        out.append(
            Section(
                f"{title_prefix}per prompt: baseline and best",
                (draw_prompt_spread(reps, key=f"{key_prefix}prompt_spread"),),
            )
        )
    return out


def tune_prompt_reps(run: Any) -> list:
    """Every request of the baseline's and the best trial's bench runs (each trial folder keeps its
    own)."""
    from dataclasses import replace

    from roofline.tune.records import bench_lines

    t = run.tune
    picks = [("baseline", t.baseline)] + (
        [("best", t.best)] if t.best and t.baseline and t.best.number != t.baseline.number else []
    )
    out = []
    for name, trial in picks:
        if trial is None or not trial.folder:
            continue
        lines = bench_lines(run.path / trial.folder)
        out += [replace(r, scenario=f"{name} (trial {trial.number})") for r in prompt_reps(lines)]
    return out


def tune_provenance(run: Any) -> list[str]:
    t = run.tune
    out = [
        f"engine: {t.engine}",
        f"model: {t.model or 'the engine default'}",
        f"strategy: {t.strategy}",
        f"objective: {t.objective.label or t.objective.name}",
    ]
    if t.baseline is not None:
        out.append(f"engine version: {t.baseline.engine_version or '?'}")
        if t.baseline.started_utc:
            out.append(f"first trial started: {t.baseline.started_utc}")
        m = t.baseline.machine
        if m.hostname:
            out.append(f"machine: {m.hostname} ({m.cpu or 'cpu not recorded'})")
    if t.wall_s:
        out.append(f"wall time: {t.wall_s:.0f} s")
    if t.best is not None and t.best.argv:
        out.append(f"best command: `{' '.join(t.serve_command)}`")
    return out
