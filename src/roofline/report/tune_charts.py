"""Charts of a `roofline tune` run: the ladder (each step's result, its gain and the spread it had
to beat) and the sweeps (per knob: the objective at each value, every repetition a point)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from roofline.report.charts import FLOOR, MEASURED, OTHER, SERIES, Chart, pyplot, render
from roofline.tune.slots import TrialStatus


@dataclass(frozen=True)
class LadderBar:
    label: str  # 'baseline', 'dtype=bf16', ...
    objective: float
    spread: float | None  # max - min across repetitions of the trial behind it
    gain_pct: float | None  # over the step's start
    kept: bool


@dataclass(frozen=True)
class SweepDot:
    value: Any
    objective: float  # the median over repetitions
    reps: tuple[float, ...]  # each repetition's value
    status: str


@dataclass(frozen=True)
class Sweep:
    knob: str
    points: tuple[SweepDot, ...]


def ladder_bars(tune: Any) -> list[LadderBar]:
    """The baseline, then one bar per ladder step: the best value tried, kept or not."""
    rows = tune.ladder
    if not rows:
        return []
    first = rows[0].before
    out = []
    if first is not None and first.objective is not None:
        out.append(LadderBar("baseline", float(first.objective), first.spread, None, True))
    for r in rows:
        tried = [p for p in r.tried if p.objective is not None]
        if r.best_objective is not None:
            best = next((p for p in tried if p.value == r.best_value), None)
            out.append(
                LadderBar(
                    f"{r.knob}={r.best_value}",
                    float(r.best_objective),
                    best.spread if best else None,
                    r.gain_pct,
                    r.kept,
                )
            )
        elif tried:  # nothing eligible (inexact or failed): the fastest tried, in grey, marked
            fastest = max(tried, key=lambda p: p.objective)
            out.append(
                LadderBar(
                    f"{r.knob}={fastest.value} ({fastest.status})",
                    float(fastest.objective),
                    fastest.spread,
                    None,
                    False,
                )
            )
    return out


def sweeps_of(tune: Any) -> list[Sweep]:
    out = []
    for knob, points in tune.sweeps.items():
        pts = []
        for p in points:
            if p.objective is None:
                continue
            t = tune.trial(p.trial)
            reps = tuple(t.rep_values) if t is not None and t.rep_values else (p.objective,)
            pts.append(SweepDot(p.value, float(p.objective), reps, p.status))
        if pts:
            out.append(Sweep(knob, tuple(pts)))
    return out


def draw_ladder(steps: Sequence[LadderBar], unit: str, *, key: str = "ladder") -> Chart:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    xs = range(len(steps))
    colours = [MEASURED if s.kept else OTHER for s in steps]
    bars = ax.bar(
        xs,
        [s.objective for s in steps],
        color=colours,
        yerr=[[(s.spread or 0.0) / 2 for s in steps], [(s.spread or 0.0) / 2 for s in steps]],
        capsize=4,
    )
    for i, (b, s) in enumerate(zip(bars.patches, steps)):
        b.set_gid(f"step-{i}")
        text = f"{s.objective:.1f}" + ("" if s.gain_pct is None else f"\n{s.gain_pct:+.1f}%")
        ax.text(
            b.get_x() + b.get_width() * 0.92,
            b.get_height() + (s.spread or 0.0) / 2,
            text,
            ha="right",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(list(xs), [s.label for s in steps], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title("ladder: one knob at a time (blue kept, grey not kept)")
    caption = (
        "Each bar is the best value a step tried, with its gain over the step's start; the "
        "whisker is the spread across repetitions that a gain had to beat to be kept."
    )
    return render(fig, key, "Ladder", caption, list(steps))


def draw_sweeps(sweeps: Sequence[Sweep], unit: str, *, key: str = "sweeps") -> Chart:
    plt = pyplot()
    n = len(sweeps)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols + 1.0, 2.9 * rows), squeeze=False)
    for k, (ax, sw) in enumerate(zip(axes.flat, sweeps)):
        labels = [str(p.value) for p in sw.points]
        xs = list(range(len(sw.points)))
        ax.plot(xs, [p.objective for p in sw.points], "-", color=SERIES[k % len(SERIES)], lw=1.5)
        rep_x = [x for x, p in zip(xs, sw.points) for _ in p.reps]
        rep_y = [r for p in sw.points for r in p.reps]
        (dots,) = ax.plot(
            rep_x, rep_y, "o", color=SERIES[k % len(SERIES)], ms=4, alpha=0.7, ls="none"
        )
        dots.set_gid(f"sweep-{sw.knob}")
        bad = [(x, p.objective) for x, p in zip(xs, sw.points) if p.status == TrialStatus.INEXACT]
        if bad:
            ax.plot(*zip(*bad), "x", color=FLOOR, ms=8, ls="none")
        ax.set_xticks(xs, labels, fontsize=8)
        ax.set_title(sw.knob, fontsize=9)
        ax.set_ylabel(unit, fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle(
        "sweeps: the objective at each value of a knob (dots: repetitions; x: inexact)", fontsize=10
    )
    fig.tight_layout()
    caption = (
        "Per knob, the best measured trial at each value (exact ones first); each dot is one "
        "repetition, the line joins the medians."
    )
    return render(fig, key, "Sweeps", caption, list(sweeps))
