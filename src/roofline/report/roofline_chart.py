"""The roofline chart: arithmetic intensity (FLOP per byte read) against FLOP/s, log-log.

    attainable FLOP/s = min(compute roof, bandwidth x intensity)

Decode at batch b reads the weights once for b tokens: intensity = b x FLOPs per token / bytes per
step. Prefill of P tokens reads them once for P tokens, so it sits far to the right. A measured run
sits at its own intensity with the FLOP/s it achieved: tok/s x FLOPs per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from roofline.report.charts import MEASURED, MODEL, ROOF, Chart, pyplot, render


class PointKind(StrEnum):
    """What a point on the roofline is."""

    DECODE = "decode"  # a decode step's bound
    PREFILL = "prefill"  # a prefill's bound
    MEASURED = "measured"  # a run's measured rate


@dataclass(frozen=True)
class RooflinePoint:
    label: str
    kind: PointKind
    intensity_flop_per_byte: float
    flop_per_s: float


@dataclass(frozen=True)
class RooflineData:
    bandwidth_bytes_per_s: float
    peak_flop_per_s: float | None  # None: no compute figure known (the slope only)
    hardware_label: str
    model_label: str
    points: tuple[RooflinePoint, ...]
    notes: tuple[str, ...] = ()

    def attainable_flop_per_s(self, intensity_flop_per_byte: float) -> float:
        slope = self.bandwidth_bytes_per_s * intensity_flop_per_byte
        return slope if self.peak_flop_per_s is None else min(self.peak_flop_per_s, slope)

    @property
    def ridge_flop_per_byte(self) -> float | None:
        """The intensity where the slope meets the roof: below it a step is bandwidth-bound."""
        return (
            None
            if self.peak_flop_per_s is None
            else self.peak_flop_per_s / self.bandwidth_bytes_per_s
        )

    def of_kind(self, kind: PointKind) -> list[RooflinePoint]:
        return [p for p in self.points if p.kind == kind]


def decode_point(
    batch: int, flops_per_token: float, bytes_per_step: float, seconds_per_step: float
) -> RooflinePoint:
    return RooflinePoint(
        f"decode b={batch}",
        PointKind.DECODE,
        batch * flops_per_token / bytes_per_step,
        batch * flops_per_token / seconds_per_step,
    )


def prefill_intensity_flop_per_byte(
    prompt_tokens: int, flops_per_token: float, weight_bytes: float, kv_bytes_per_token: float
) -> float:
    """Prefill reads every weight once for the whole prompt and writes the prompt's KV cache."""
    return prompt_tokens * flops_per_token / (weight_bytes + prompt_tokens * kv_bytes_per_token)


def roofline_from_analysis(a, *, prompt_tokens: int = 1024) -> RooflineData:
    """The chart of `roofline ceiling`: a CeilingAnalysis's decode points (one per --batch) and its
    prefill."""
    f = a.model.flops_per_token
    points = [decode_point(b.batch, f, b.bytes_per_step, b.seconds_per_step) for b in a.batches]
    p_tokens = a.prefill.prompt_tokens if a.prefill else prompt_tokens
    data = RooflineData(a.bandwidth_bytes_per_s, a.peak_flops, a.hardware.label, a.model.name, ())
    i = prefill_intensity_flop_per_byte(p_tokens, f, a.resident_weight_bytes, a.kv.bytes_per_token)
    points.append(
        RooflinePoint(
            f"prefill {p_tokens:,} tok", PointKind.PREFILL, i, data.attainable_flop_per_s(i)
        )
    )
    notes = [
        f"FLOPs per token: 2 x matmul params = {f / 1e9:.3g} GFLOP; bandwidth "
        f"{a.bandwidth_bytes_per_s / 1e9:.4g} GB/s"
        + (
            f", roof {a.peak_flops / 1e12:.4g} TFLOP/s ({a.compute_dtype} dense)"
            if a.peak_flops
            else ""
        )
    ]
    if a.peak_flops is None:
        notes.append(f"{a.hardware.key} lists no FLOP/s figure: the slope only")
    notes.append(
        "prefill point: attainable FLOP/s at its intensity (weights read once per prompt, KV "
        "written)"
    )
    return RooflineData(
        a.bandwidth_bytes_per_s,
        a.peak_flops,
        a.hardware.label,
        a.model.name,
        tuple(points),
        tuple(notes),
    )


def model_points(
    flops_per_token: float,
    bytes_per_token: float,
    data: RooflineData,
    batches: Sequence[int] = (1, 8, 64),
    prompt_tokens: int = 1024,
) -> list[RooflinePoint]:
    """Decode (weights shared by the batch, KV left out) and prefill points of a model seen only
    through its bytes per token: each at the attainable FLOP/s."""
    out = []
    for b in batches:
        i = b * flops_per_token / bytes_per_token
        out.append(
            RooflinePoint(f"decode b={b}", PointKind.DECODE, i, data.attainable_flop_per_s(i))
        )
    i = prompt_tokens * flops_per_token / bytes_per_token
    out.append(
        RooflinePoint(
            f"prefill {prompt_tokens:,} tok", PointKind.PREFILL, i, data.attainable_flop_per_s(i)
        )
    )
    return out


def draw_roofline(data: RooflineData, *, key: str = "roofline") -> Chart:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    xs = [p.intensity_flop_per_byte for p in data.points] or [1.0]
    ridge = data.ridge_flop_per_byte
    lo = min(xs + ([ridge] if ridge else [])) / 4
    hi = max(xs + ([ridge] if ridge else [])) * 4
    grid = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    (roof,) = ax.plot(
        grid,
        [data.attainable_flop_per_s(x) for x in grid],
        color=ROOF,
        lw=2,
        label=f"{data.hardware_label}: {data.bandwidth_bytes_per_s / 1e9:.4g} GB/s"
        + (f", {data.peak_flop_per_s / 1e12:.4g} TFLOP/s" if data.peak_flop_per_s else ""),
    )
    roof.set_gid("roof")
    styles = {
        PointKind.DECODE: ("o", MODEL, "model decode"),
        PointKind.PREFILL: ("s", MODEL, "model prefill"),
        PointKind.MEASURED: ("D", MEASURED, "measured"),
    }
    for kind, (marker, colour, label) in styles.items():
        pts = data.of_kind(kind)
        if not pts:
            continue
        (line,) = ax.plot(
            [p.intensity_flop_per_byte for p in pts],
            [p.flop_per_s for p in pts],
            marker,
            color=colour,
            ms=7 if kind != PointKind.MEASURED else 8,
            ls="none",
            label=label,
            mfc="white" if kind == PointKind.DECODE else colour,
        )
        line.set_gid(f"points-{kind}")
        for p in pts:
            ax.annotate(
                p.label,
                (p.intensity_flop_per_byte, p.flop_per_s),
                textcoords="offset points",
                xytext=(6, -12 if kind == PointKind.MEASURED else 5),
                fontsize=8,
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte read)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(f"roofline: {data.model_label} on {data.hardware_label}")
    ax.legend(loc="lower right", fontsize=8)
    caption = (
        "Below the ridge a step is bound by memory bandwidth (the slope), above it by compute "
        "(the roof). " + " ".join(data.notes)
    )
    return render(fig, key, "Roofline", caption, data)
