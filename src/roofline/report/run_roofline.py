"""The roofline of measured runs: each bench scenario or tune trial under the hardware's roofs.

A run knows its bytes per token and bandwidth (its ceiling). FLOPs per token come from the model's
config when the model is in the catalogue (2 x matmul params), else they are estimated from the
bytes and the weight dtype the server reported (2 FLOPs per weight read), and the chart says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from roofline.errors import UserError
from roofline.report.roofline_chart import PointKind, RooflineData, RooflinePoint, model_points
from roofline.report.run_folders import RunKind
from roofline.tune.slots import TUNED, SlotKind

_BYTES_PER_WEIGHT = {
    "fp32": 4.0,
    "float32": 4.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "q8_0": 1.0625,
    "int4": 0.5,
    "q4_0": 0.5625,
}


def flops_per_token(
    models: Sequence[str | None], bytes_per_token: float, dtype: str | None
) -> tuple[float, str]:
    """(FLOPs per decoded token, how it was found)."""
    for m in models:
        spec = _spec(m)
        if spec is not None:
            from roofline.modelspec.components import matmul_params_per_token

            return 2.0 * matmul_params_per_token(spec), f"2 x matmul params of {m}'s config"
    per = _BYTES_PER_WEIGHT.get((dtype or "").lower(), 2.0)
    how = (
        f"estimated: 2 FLOPs per weight, {per:g} bytes per weight "
        f"({dtype or 'dtype unknown, bf16 assumed'})"
    )
    return 2.0 * bytes_per_token / per, how


def _spec(model: str | None) -> Any:
    """The model's spec when it names a catalogue entry or a config on this machine, else None."""
    if not model:
        return None
    from roofline.modelspec.catalogue import load_spec

    try:
        return load_spec(model)
    except (UserError, OSError, ValueError, KeyError, TypeError):
        return None


def _hardware(name: str) -> Any:
    from roofline.hardware.catalogue import get_hardware

    try:
        return get_hardware(name)
    except (UserError, OSError, ValueError, KeyError, TypeError):
        return None  # unknown name, or no probe profile here


def compute_roof(hardware: str | None, dtype: str | None = None) -> tuple[float | None, str]:
    """(dense FLOP/s, label): the hardware's figure for the run's weight dtype if it lists one, else
    a catalogue entry's bf16 (or best listed) figure; for a literal bandwidth or 'local', this
    machine's probe, its fastest measured matmul."""
    names = [hardware] if hardware and "B/s" not in hardware else []
    if "local" not in names:
        names.append("local")
    wanted = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(
        (dtype or "").lower(), (dtype or "").lower()
    )
    for name in names:
        hw = _hardware(name)
        if hw is None or not hw.flops:
            continue
        if wanted in hw.flops:
            pick = wanted
        elif name == "local":
            pick = max(hw.flops, key=hw.flops.get)
        else:
            pick = next(
                (d for d in ("bf16", "fp16", "fp32") if d in hw.flops),
                max(hw.flops, key=hw.flops.get),
            )
        where = "this machine's probe" if name == "local" else hw.label()
        return hw.flops[pick], f"{where}, {pick}"
    return None, "no FLOP/s figure"


def _tokens_per_pass(reported: float | None) -> float:
    """Tokens each weight pass decodes: 1, or more with speculation (a verify pass multiplies
    several rows)."""
    return reported if reported and reported > 1.0 else 1.0


def _bench_points(run: Any, flops: float, prefix: str | None) -> list[RooflinePoint]:
    out = []
    s_ceiling = run.summary.ceiling
    for s in run.summary.scenarios:
        speed = s.metric("output_speed_tok_per_s")
        if speed is None:
            continue
        rows = s.scenario.streams * _tokens_per_pass(s.passes.tokens_per_pass if s.passes else None)
        out.append(
            RooflinePoint(
                f"{prefix}: {s.name}" if prefix else s.name,
                PointKind.MEASURED,
                rows * flops / s_ceiling.bytes_per_token,
                s.scenario.streams * speed.p50 * flops,
            )
        )
    return out


def _trial_points(tune: Any, flops: float, bytes_per_token: float) -> list[RooflinePoint]:
    out = []
    for t in tune.trials:
        speed = t.metrics.output_speed_median_tok_per_s
        if t.status not in TUNED or not speed:
            continue
        b = t.metrics.bytes_per_token or bytes_per_token
        rows = _tokens_per_pass(t.metrics.tokens_per_pass)
        out.append(
            RooflinePoint(f"trial {t.number}", PointKind.MEASURED, rows * flops / b, speed * flops)
        )
    return out


def _baseline_dtype(run: Any) -> str | None:
    """The weight dtype of a tune run's baseline: its knob, else what the server told the trial's
    bench."""
    import json

    base = run.tune.baseline or next(
        (t for t in run.tune.trials if t.slot.kind == SlotKind.BASELINE), None
    )
    if base is None:
        return None
    if base.config.get("dtype"):
        return str(base.config["dtype"])
    from roofline.tune.records import bench_runs

    runs = bench_runs(run.path / str(base.folder))
    try:
        prov = json.loads((runs[0] / "provenance.json").read_text(encoding="utf-8"))
    except (IndexError, OSError, ValueError, TypeError):
        return None
    from roofline.bench.summary import server_stats_of

    stats = server_stats_of(prov) if isinstance(prov, dict) else None
    return stats.dtype if stats else None


def hardware_label(hardware: str | None) -> str:
    """'local' -> 'this machine'; '100GB/s' -> 'given bandwidth'; a catalogue name as it is."""
    if not hardware:
        return "hardware"
    if hardware == "local":
        return "this machine"
    return "given bandwidth" if "B/s" in hardware else hardware


def roofline_of_run(run: Any, prefix: str | None = None) -> RooflineData | None:
    """The chart data of one loaded run (None when it has no ceiling to place it against)."""
    if run.kind == RunKind.BENCH:
        c = run.summary.ceiling if run.summary else None
        if c is None:
            return None
        s = run.summary
        models, bpt, bw, hardware = (
            [s.model, s.served_model],
            c.bytes_per_token,
            c.bandwidth_bytes_per_s,
            s.hardware or c.hardware,
        )
        label = s.model_label or c.model or "model"
        dtype = s.server_stats.dtype if s.server_stats else None
    else:
        ceiling = run.tune.ceiling
        if ceiling is None:
            return None
        bpt, bw = ceiling.bytes_per_token, ceiling.bandwidth_bytes_per_s
        models, hardware, label = (
            [run.tune.model, ceiling.model or None],
            ceiling.hardware or None,
            run.tune.model or ceiling.model or "model",
        )
        dtype = _baseline_dtype(run)
    flops, how = flops_per_token(models, bpt, dtype)
    peak, where = compute_roof(hardware, dtype)
    data = RooflineData(bw, peak, hardware_label(hardware), str(label), ())
    measured = (
        _bench_points(run, flops, prefix)
        if run.kind == RunKind.BENCH
        else _trial_points(run.tune, flops, bpt)
    )
    notes = (
        (
            f"FLOPs per token: {flops / 1e6:.4g} MFLOP ({how}); bytes per token {bpt / 1e6:.4g} "
            f"MB; bandwidth {bw / 1e9:.4g} GB/s (the run's ceiling); compute roof: {where}."
        ),
        (
            "Measured points: median Output Speed x streams x FLOPs per token, at streams (x "
            "tokens per weight pass with speculation) x FLOPs / bytes per token."
        ),
    )
    return RooflineData(
        bw,
        peak,
        data.hardware_label,
        data.model_label,
        tuple(model_points(flops, bpt, data) + measured),
        notes,
    )
