"""A predicted ladder from a tune run folder: the baseline trial's greedy streams (greedy.json), the
verify-cost curve, and RUN_DIR/predicted.json (`PredictedLadder`).

Verify costs: the embedded engine's own, measured at start-up and reported in its `/v1/models`
entry (kept in the trial's bench/provenance.json). Another engine reports none: then a model from
the ceiling, a pass over r rows taking

    max(bytes_per_token / bandwidth, r * flops_per_token / peak_flops)

(the weights read once, each row's matmuls; peak FLOP/s from the hardware catalogue), relative to
one row; with no peak known, every pass costs one (memory-bound), and the ladder says so.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from roofline import speculation
from roofline.tune.paired import PairedRatio, paired_ratio
from roofline.tune.predict import (
    FIELD_OF,
    METHOD_KNOB,
    matching,
    model_free_methods,
    predict_ladder,
    predict_one,
    settings,
    spec_options,
    with_baseline,
)
from roofline.tune.predict_records import PassCosts, Prediction, Stream
from roofline.tune.slots import SlotKind, TrialStatus
from roofline.tune.space_records import Space

PREDICTED = "predicted.json"
MEASURED = "measured by the engine at start-up"
MODEL_ROWS = (1, 2, 3, 5, 9, 13, 17, 25, 33, 49, 65)
FAILED = "no prediction: error"  # how a prediction that raised begins


@dataclass(frozen=True)
class TrialPrediction:
    """A trial that ran a predicted setting: its setting replayed on its own engine's verify costs
    (a stored-format pass costs more rows than an fp32 one), the speed-up applied to `plain`, the
    latest trial before it of the same configuration without a proposer. Held against `against`,
    the trial its step measured next to it (the step's incumbent, else `plain`): the predicted
    ratio of the two, and the measured one, paired (None: no pairing units, or `against` ran in
    another step, minutes away)."""

    number: int
    plain: int
    prediction: Prediction
    against: int
    predicted: float | None = None
    measured: PairedRatio | None = None

    def to_json(self) -> dict:
        return {
            "number": self.number,
            "plain": self.plain,
            "prediction": self.prediction.to_json(),
            "against": self.against,
            "predicted": self.predicted,
            "measured": None if self.measured is None else self.measured.to_json(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TrialPrediction:
        return cls(
            int(d["number"]),
            int(d["plain"]),
            Prediction.from_json(d["prediction"]),
            int(d.get("against", d["plain"])),
            d.get("predicted"),
            PairedRatio.from_json(d.get("measured")),
        )


@dataclass(frozen=True)
class PredictedLadder:
    """predicted.json: every model-free proposer setting's prediction, best first, from one
    baseline trial; after a run, each trial that ran one (`trials`)."""

    baseline_trial: int
    baseline_tok_per_s: float | None
    pass_costs: PassCosts
    predictions: tuple[Prediction, ...] = ()
    streams: int = 0  # greedy requests replayed
    trials: tuple[TrialPrediction, ...] = ()

    def to_json(self) -> dict:
        return {
            "baseline_trial": self.baseline_trial,
            "baseline_tok_per_s": self.baseline_tok_per_s,
            "pass_costs": self.pass_costs.to_json(),
            "streams": self.streams,
            "predictions": [p.to_json() for p in self.predictions],
            "trials": [t.to_json() for t in self.trials],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PredictedLadder:
        return cls(
            int(d["baseline_trial"]),
            d.get("baseline_tok_per_s"),
            PassCosts.from_json(d.get("pass_costs") or {}),
            tuple(Prediction.from_json(p) for p in d.get("predictions") or ()),
            int(d.get("streams", 0)),
            tuple(TrialPrediction.from_json(t) for t in d.get("trials") or ()),
        )


def streams_of(outputs: Sequence[Any]) -> list[Stream] | None:
    """The greedy outputs as replayable streams; None when any lacks its token ids (a text-only
    engine) or its prompt's."""
    out = []
    for o in outputs:
        if not o.token_ids or not o.prompt_token_ids:
            return None
        out.append(Stream(o.prompt_id, tuple(o.prompt_token_ids), tuple(o.token_ids)))
    return out


def baseline_streams(folder: Path) -> list[Stream] | None:
    """A trial folder's greedy outputs (greedy.json) as replayable streams: [] when they lack
    token ids, None when the file cannot be read."""
    from roofline.bench.engines.greedy import GreedyOutput

    try:
        raw = json.loads((folder / "greedy.json").read_text(encoding="utf-8"))
        outputs = [GreedyOutput.from_json(o) for o in raw]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return streams_of(outputs) or []


def model_pass_costs(
    bytes_per_token: float | None,
    bandwidth: float | None,
    flops_per_token: float | None,
    peak_flops: float | None,
) -> PassCosts:
    """The ceiling's cost model of a pass over r rows, relative to one row (module docstring)."""
    if not (bytes_per_token and bandwidth and flops_per_token and peak_flops):
        return PassCosts(
            ((1, 1.0), (2, 1.0)),
            "model: memory-bound, every verify pass costs one (no peak FLOP/s known)",
        )
    memory, compute = bytes_per_token / bandwidth, flops_per_token / peak_flops

    def t(r: int) -> float:
        return max(memory, r * compute)

    points = tuple((r, t(r) / t(1)) for r in MODEL_ROWS)
    return PassCosts(
        points, "model: the ceiling's bandwidth and the catalogue's peak FLOP/s (not measured)"
    )


def _compute_bound(model: str | None, hardware: str | None) -> tuple[float | None, float | None]:
    """(flops per token, peak FLOP/s) where the model and the hardware are known; else Nones."""
    if not model or not hardware or hardware == "local":
        return None, None
    try:
        from roofline.hardware.catalogue import get_hardware
        from roofline.modelspec.catalogue import load_spec
        from roofline.modelspec.components import matmul_params_per_token

        flops = 2.0 * matmul_params_per_token(load_spec(model))
        peaks = get_hardware(hardware).flops
    except Exception:  # an unknown model or hardware: no compute bound, said in the source
        return None, None
    return flops, (peaks.get("bf16") or max(peaks.values(), default=None))


def server_stats(folder: Path) -> Any:
    """The trial engine's `"roofline"` figures as its first bench run kept them (`bench_runs`).
    None: none."""
    from roofline.bench.results import PROVENANCE
    from roofline.bench.summary import server_stats_of
    from roofline.tune.records import bench_runs

    for run in bench_runs(folder)[:1]:
        try:
            prov = json.loads((run / PROVENANCE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        return server_stats_of(prov) if isinstance(prov, Mapping) else None
    return None


def measured_costs(stats: Any) -> PassCosts | None:
    """The verify costs a server measured at start-up (its ServerStats); None when it gave none."""
    if stats is None or not stats.pass_costs:
        return None
    return PassCosts(tuple(stats.pass_costs), MEASURED, stats.one_row_pass_s)


def pass_costs_of(stats: Any, baseline: Any, model: str | None, hardware: str | None) -> PassCosts:
    """The baseline trial's verify costs: its engine's own (`stats`, its ServerStats), else the
    ceiling's model."""
    measured = measured_costs(stats)
    if measured is not None:
        return measured
    c = baseline.metrics.ceiling
    return model_pass_costs(
        c.bytes_per_token if c else None,
        c.bandwidth_bytes_per_s if c else None,
        *_compute_bound(model, hardware),
    )


def predict_run(
    run_dir: Path, options: Any, baseline: Any, trials: Sequence[Any] = ()
) -> PredictedLadder | str:
    """The predicted ladder of a run from its baseline trial (a TrialResult), with a prediction
    for each of `trials` that ran a predicted setting; or why there is none, in one line."""
    if baseline is None or baseline.status != TrialStatus.OK or not baseline.folder:
        return "no prediction: the baseline trial did not finish"
    folder = run_dir / baseline.folder
    streams = baseline_streams(folder)
    if streams is None:
        return f"no prediction: cannot read the baseline's {folder / 'greedy.json'}"
    if not streams:
        return (
            f"no prediction: engine {options.engine} returned no token ids for the prompt and "
            "output (a replay needs both)"
        )
    space = Space.from_json(options.space)
    if not settings(space):
        return (
            "no prediction: the space sets no model-free proposer (a knob "
            f"{METHOD_KNOB!r} with one of {', '.join(sorted(model_free_methods()))})"
        )
    stats = server_stats(folder)
    costs = pass_costs_of(stats, baseline, options.model, options.hardware)
    tok_s = baseline.metrics.output_speed_median_tok_per_s
    context = stats.max_seq_len if stats is not None else None
    found = predict_ladder(space, streams, costs, tok_s, options.max_tokens, context)
    ladder = PredictedLadder(baseline.number, tok_s, costs, tuple(found), len(streams))
    replay = functools.partial(
        predict_one, streams=streams, max_tokens=options.max_tokens, max_seq_len=context
    )
    return replace(ladder, trials=predict_trials(run_dir, ladder, trials, replay))


def predict_trials(
    run_dir: Path, ladder: PredictedLadder, trials: Sequence[Any], replay: Any
) -> tuple[TrialPrediction, ...]:
    """Each trial that ran a predicted setting, replayed again on the verify costs its own engine
    measured (`replay(config, pass_cost=, baseline_tok_s=)`); a trial with no earlier trial of
    the same configuration without a proposer has no rate to scale and no prediction."""
    out: dict[int, TrialPrediction] = {}
    for r in sorted(trials, key=lambda r: r.number):
        if r.status == TrialStatus.SKIPPED or matching(ladder.predictions, r.config) is None:
            continue
        q = plain_before(trials, r)
        if q is None:
            continue
        costs = measured_costs(server_stats(run_dir / r.folder) if r.folder else None)
        p = replay(
            dict(r.config),
            pass_cost=costs or ladder.pass_costs,
            baseline_tok_s=q.metrics.output_speed_median_tok_per_s,
        )
        ref = _step_incumbent(trials, r) or q
        if ref is q:
            predicted = p.ratio
        else:
            before = out.get(ref.number)
            base = before.prediction.ratio if before else None
            predicted = p.ratio / base if p.ratio and base else None
        # measured against a trial of the same step only: one minutes away pairs with drift
        same_step = ref.slot.round == r.slot.round
        measured = (
            paired_ratio(r.units, ref.units, seed=r.number)
            if r.units and ref.units and same_step
            else None
        )
        out[r.number] = TrialPrediction(r.number, q.number, p, ref.number, predicted, measured)
    return tuple(out.values())


def plain_before(trials: Sequence[Any], r: Any) -> Any | None:
    """The latest finished trial before r with r's other knobs and no proposer (its rate is what
    r's speculation multiplies); None when none ran."""
    plain = [
        q
        for q in trials
        if q.number < r.number
        and q.status == TrialStatus.OK
        and q.metrics.output_speed_median_tok_per_s
        and drafts(q.config) is False
        and rest_key(q.config) == rest_key(r.config)
    ]
    return max(plain, key=lambda q: q.number) if plain else None


def _step_incumbent(trials: Sequence[Any], r: Any) -> Any | None:
    """The incumbent measured again in r's ladder step, before r, with r's other knobs."""
    found = [
        x
        for x in trials
        if x.slot.kind == SlotKind.INCUMBENT
        and x.slot.round == r.slot.round
        and x.number < r.number
        and x.status == TrialStatus.OK
        and rest_key(x.config) == rest_key(r.config)
    ]
    return max(found, key=lambda x: x.number) if found else None


def predict_and_write(
    run_dir: Path, options: Any, baseline: Any, trials: Sequence[Any] = ()
) -> PredictedLadder | str:
    """`predict_run`, its ladder written to RUN_DIR/predicted.json. A prediction never fails a
    tuning run: an error is returned as its one line ("no prediction: error ...")."""
    try:
        ladder = predict_run(run_dir, options, baseline, trials)
    except Exception as e:
        return f"{FAILED} {type(e).__name__}: {e}"
    if not isinstance(ladder, str):
        write_predicted(run_dir, ladder)
    return ladder


def write_predicted(run_dir: Path, ladder: PredictedLadder) -> None:
    from roofline.bench.results import write_json

    write_json(run_dir / PREDICTED, ladder.to_json())


def read_predicted(run_dir: Path | str) -> PredictedLadder | None:
    """RUN_DIR/predicted.json; None when absent or unreadable."""
    try:
        d = json.loads((Path(run_dir) / PREDICTED).read_text(encoding="utf-8"))
        return PredictedLadder.from_json(d)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def rest_key(config: Mapping[str, Any]) -> tuple:
    """A configuration's knobs other than speculation's, as a key."""
    return tuple(sorted((k, repr(v)) for k, v in config.items() if k not in FIELD_OF))


def drafts(config: Mapping[str, Any]) -> bool | None:
    """Whether the configuration runs a proposer; None when its speculation knobs are invalid."""
    try:
        return spec_options(config).method in speculation.PROPOSERS
    except (ValueError, TypeError):
        return None


def trial_predictions(ladder: PredictedLadder, trials: Sequence[Any]) -> dict[int, Prediction]:
    """Trial number -> its prediction, for the trials that ran a predicted setting: the run's own
    (`ladder.trials`) when it has them, else the ladder's at the measured rate of the same
    configuration without a proposer, where one ran (the formats differ along a ladder)."""
    if ladder.trials:
        return {t.number: t.prediction for t in ladder.trials}
    plain = {
        rest_key(r.config): r.metrics.output_speed_median_tok_per_s
        for r in trials
        if r.status == TrialStatus.OK
        and r.metrics.output_speed_median_tok_per_s
        and drafts(r.config) is False
    }
    out = {}
    for r in trials:
        p = matching(ladder.predictions, r.config) if r.status != TrialStatus.SKIPPED else None
        if p is not None:
            rate = plain.get(rest_key(r.config))
            if rate:  # else no trial ran its other knobs without a proposer: no rate to scale
                out[r.number] = with_baseline(p, rate)
    return out
