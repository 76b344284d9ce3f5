"""Time per token, one bar per configuration: the weight-read floor (bytes per token / bandwidth) in
red, everything else the step spent in grey, and the share of the ceiling reached written on the
bar. Where the model's file is known, a mark on each bar shows the file's floor (the bytes the file
stores / bandwidth): an engine that expands a 4-bit file to fp32 has its red floor far to the right
of that mark."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from roofline.report.charts import FLOOR, OTHER, ROOF, Chart, pyplot, render
from roofline.tune.slots import TUNED, TrialStatus


@dataclass(frozen=True)
class TimeBar:
    label: str
    floor_s_per_token: float  # the weight-read floor: bytes per token / bandwidth
    measured_s_per_token: float  # 1 / median Output Speed
    # speculation: tokens per weight pass (the % is then passes/s)
    tokens_per_pass: float | None = None
    passes_percent: float | None = None  # speculation: weight passes/s as a % of the ceiling
    # the file's floor: the bytes the file stores / bandwidth
    file_floor_s_per_token: float | None = None
    # the measured rate (tokens or passes) against the file's ceiling
    file_percent: float | None = None

    @property
    def other_s_per_token(self) -> float:
        return max(self.measured_s_per_token - self.floor_s_per_token, 0.0)

    @property
    def percent_of_ceiling(self) -> float:
        """The floor's share of the measured time; with speculation, passes/s against the ceiling
        (each pass still reads all the weights, so tokens/s alone could pass 100%)."""
        if self.passes_percent is not None:
            return self.passes_percent
        return 100.0 * self.floor_s_per_token / self.measured_s_per_token

    @property
    def text(self) -> str:
        file = "" if self.file_percent is None else f", {self.file_percent:.0f}% of the file's"
        if self.passes_percent is not None:
            return (
                f"{self.passes_percent:.0f}% of ceiling{file} (passes/s; "
                f"{self.tokens_per_pass:.2f} tok/pass)"
            )
        return f"{self.percent_of_ceiling:.0f}% of ceiling{file}"


def bars_of_bench(run: Any, prefix: str | None = None) -> list[TimeBar]:
    out = []
    for s in run.summary.scenarios:
        v = s.vs_ceiling
        if v is None or not v.measured_tok_per_s or not v.ceiling_tok_per_s:
            continue
        label = f"{prefix}: {s.name}" if prefix else s.name
        spec = v.basis == "passes"
        out.append(
            TimeBar(
                label,
                1.0 / v.ceiling_tok_per_s,
                1.0 / v.measured_tok_per_s,
                v.tokens_per_pass if spec else None,
                v.percent_of_ceiling if spec else None,
                1.0 / v.file_ceiling_tok_per_s if v.file_ceiling_tok_per_s else None,
                v.percent_of_file_ceiling,
            )
        )
    return out


def config_label(config: dict, baseline: dict) -> str:
    """What a trial changed from the baseline, e.g. 'dtype=bf16 threads=2' ('baseline' when
    nothing)."""
    diff = [f"{k}={v}" for k, v in config.items() if baseline.get(k) != v]
    return " ".join(diff) or "baseline"


def bars_of_tune(run: Any) -> list[TimeBar]:
    tune = run.tune
    base = dict(tune.baseline.config) if tune.baseline else {}
    out = []
    for t in tune.trials:
        m = t.metrics
        speed, ceiling = m.output_speed_median_tok_per_s, m.ceiling_tok_per_s
        if t.status not in TUNED or not speed or not ceiling:
            continue
        mark = " (inexact)" if t.status == TrialStatus.INEXACT else ""
        tpp = m.tokens_per_pass
        spec = bool(tpp and tpp > 1.0 and m.percent_of_ceiling is not None)
        out.append(
            TimeBar(
                f"#{t.number} {config_label(dict(t.config), base)}{mark}",
                1.0 / ceiling,
                1.0 / speed,
                tpp if spec else None,
                m.percent_of_ceiling if spec else None,
                1.0 / t.file_ceiling_tok_per_s if t.file_ceiling_tok_per_s else None,
                t.percent_of_file_ceiling,
            )
        )
    return out


def draw_time_bars(bars: Sequence[TimeBar], *, key: str = "time_per_token") -> Chart:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.42 * len(bars)))
    ys = list(range(len(bars)))[::-1]
    floor_ms = [1e3 * b.floor_s_per_token for b in bars]
    other_ms = [1e3 * b.other_s_per_token for b in bars]
    floor = ax.barh(ys, floor_ms, color=FLOOR, label="weight-read floor (bytes / bandwidth)")
    other = ax.barh(ys, other_ms, left=floor_ms, color=OTHER, label="everything else")
    for i, (pf, po) in enumerate(zip(floor.patches, other.patches)):
        pf.set_gid(f"floor-{i}")
        po.set_gid(f"other-{i}")
    marked = [
        (i, y, 1e3 * b.file_floor_s_per_token)
        for i, (y, b) in enumerate(zip(ys, bars))
        if b.file_floor_s_per_token
    ]
    # the file's floor: what the weights as stored take to stream
    for n, (i, y, x) in enumerate(marked):
        line = ax.vlines(
            x,
            y - 0.42,
            y + 0.42,
            colors=ROOF,
            linewidths=2.2,
            label="the file's floor (its stored bytes / bandwidth)" if n == 0 else None,
        )
        line.set_gid(f"file-floor-{i}")
    for y, b, f, o in zip(ys, bars, floor_ms, other_ms):
        ax.text(f + o, y, f"  {b.text}", va="center", fontsize=8)
    ax.set_yticks(ys, [b.label for b in bars], fontsize=8)
    ax.set_xlabel("ms per token (median request)")
    ax.set_xlim(0, max(f + o for f, o in zip(floor_ms, other_ms)) * 1.6)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.5 / max(len(bars), 1) - 0.25),
        ncol=3 if marked else 2,
        fontsize=8,
        frameon=False,
    )
    ax.set_title("time per token: the weight-read floor and everything else")
    caption = (
        "Red: the time the weights take to stream from memory once (the ceiling). Grey: the rest "
        "of the measured time per token. The % is the ceiling's share of the measured time; with "
        "speculation (several tokens per weight pass) it is weight passes/s against the ceiling, "
        "since each pass still reads all the weights."
        + (
            " The dark mark is the file's floor: the time the weights take to stream as the "
            "model's file stores them, the bytes the model needs; an engine that reads a wider "
            "format than the file has its red floor to the right of the mark, and the second % is "
            "the measured rate against it."
            if marked
            else ""
        )
    )
    return render(fig, key, "Time per token", caption, list(bars))
