"""Charts of a bench run's requests: per-prompt spread, latency CDFs, and load sweeps.

The spread has a point per prompt and repetition; TTFT and TPOT are CDFs; a load sweep plots the
speed each user sees against aggregate throughput."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from roofline.bench.loadgen import ScenarioKind
from roofline.bench.metrics import request_metrics
from roofline.bench.records import RequestRecord
from roofline.bench.tables import plural
from roofline.report.charts import SERIES, Chart, pyplot, render

LOADS = (ScenarioKind.CONCURRENCY, ScenarioKind.RATE)  # the kinds a load sweep is made of


@dataclass(frozen=True)
class PromptRep:
    scenario: str
    prompt: str
    rep: int
    output_speed_tok_per_s: float


@dataclass(frozen=True)
class Cdf:
    scenario: str
    metric: str  # ttft_s | tpot_s
    values_s: tuple[float, ...]  # sorted


@dataclass(frozen=True)
class LoadPoint:
    scenario: str
    streams_or_rate: str
    output_tok_per_s: float  # aggregate over the run's window
    per_user_tok_per_s: float  # median Output Speed of one request


def _measured_ok(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.ok and not r.warmup]


def prompt_reps(records: Sequence[RequestRecord]) -> list[PromptRep]:
    out = []
    for r in _measured_ok(records):
        speed = request_metrics(r).output_speed_tok_per_s
        if speed is not None:
            out.append(PromptRep(r.scenario, r.prompt, r.rep, speed))
    return out


def cdfs(records: Sequence[RequestRecord]) -> list[Cdf]:
    by: dict[tuple[str, str], list[float]] = {}
    for r in _measured_ok(records):
        m = request_metrics(r)
        for metric in ("ttft_s", "tpot_s"):
            value = m.value(metric)
            if value is not None:
                by.setdefault((r.scenario, metric), []).append(value)
    return [Cdf(s, metric, tuple(sorted(v))) for (s, metric), v in by.items()]


def load_points(summary: Any) -> list[LoadPoint]:
    """One point per scenario of a load sweep (two or more closed- or open-loop scenarios)."""
    loads = [s for s in summary.scenarios if s.scenario.kind in LOADS]
    if len(loads) < 2:
        return []
    out = []
    for s in loads:
        speed = s.metric("output_speed_tok_per_s")
        if speed is None or s.output_tok_per_s is None:
            continue
        what = (
            plural(s.scenario.streams, "stream")
            if s.scenario.kind == ScenarioKind.CONCURRENCY
            else f"{s.scenario.rate_per_s:g}/s"
        )
        out.append(LoadPoint(s.name, what, s.output_tok_per_s, speed.p50))
    return out


def draw_prompt_spread(reps: Sequence[PromptRep], *, key: str = "prompt_spread") -> Chart:
    plt = pyplot()
    prompts = list(dict.fromkeys(r.prompt for r in reps))
    scenarios = list(dict.fromkeys(r.scenario for r in reps))
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    width = 0.7 / max(len(scenarios), 1)
    for k, sc in enumerate(scenarios):
        pts = [r for r in reps if r.scenario == sc]
        xs = [prompts.index(r.prompt) + (k - (len(scenarios) - 1) / 2) * width for r in pts]
        (dots,) = ax.plot(
            xs,
            [r.output_speed_tok_per_s for r in pts],
            "o",
            ls="none",
            ms=5,
            alpha=0.8,
            color=SERIES[k % len(SERIES)],
            label=sc,
        )
        dots.set_gid(f"prompt-points-{k}")
    ax.set_xticks(range(len(prompts)), prompts, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("Output Speed (tok/s)")
    ax.set_title("per prompt: every prompt x repetition")
    if len(scenarios) > 1:
        ax.legend(fontsize=8)
    caption = (
        "Each point is one request (a prompt and one repetition): how much speed depends on the "
        "prompt."
    )
    return render(fig, key, "Per-prompt spread", caption, list(reps))


def draw_cdfs(curves: Sequence[Cdf], *, key: str = "latency_cdf") -> Chart:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.4))
    scenarios = list(dict.fromkeys(c.scenario for c in curves))
    for ax, metric, label in zip(axes, ("ttft_s", "tpot_s"), ("TTFT (ms)", "TPOT (ms)")):
        for c in (c for c in curves if c.metric == metric):
            k = scenarios.index(c.scenario)
            n = len(c.values_s)
            (line,) = ax.step(
                [1e3 * v for v in c.values_s],
                [(i + 1) / n for i in range(n)],
                where="post",
                color=SERIES[k % len(SERIES)],
                label=c.scenario,
            )
            line.set_gid(f"cdf-{metric}-{k}")
        ax.set_xlabel(label)
        ax.set_ylabel("share of requests")
        ax.set_ylim(0, 1.02)
    if len(scenarios) > 1:
        axes[1].legend(fontsize=8)
    fig.suptitle("latency distributions (CDF)", fontsize=10)
    fig.tight_layout()
    return render(
        fig,
        key,
        "Latency distributions",
        "The share of requests at or below each TTFT and TPOT.",
        list(curves),
    )


def draw_load(points: Sequence[LoadPoint], *, key: str = "load_sweep") -> Chart:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    (line,) = ax.plot(
        [p.output_tok_per_s for p in points],
        [p.per_user_tok_per_s for p in points],
        "o-",
        color=SERIES[0],
    )
    line.set_gid("load-points")
    for p in points:
        ax.annotate(
            p.streams_or_rate,
            (p.output_tok_per_s, p.per_user_tok_per_s),
            textcoords="offset points",
            xytext=(5, 5),
            fontsize=8,
        )
    ax.set_xlabel("aggregate output tok/s")
    ax.set_ylabel("per-user Output Speed p50 (tok/s)")
    ax.set_title("load sweep: what each user sees against what the server delivers")
    return render(fig, key, "Load sweep", "Each point is one scenario of the sweep.", list(points))
