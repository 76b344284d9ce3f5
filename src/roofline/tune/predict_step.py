"""Predictions during a run: which values of a proposer's own knobs the ladder need not measure.

Replay (`tune.predict`) gives a setting's speed-up from the baseline's greedy streams. Two settings
of one proposer on one engine differ only in the passes they replay, so

    predicted(config over the best) = ratio(config) / ratio(best)

both replayed on the verify costs the best's own engine measured (a stored-format pass over k rows
costs more, relative to one row, than an fp32 one), at the rate of the same configuration without
a proposer. A value predicted below 1 + `ladder.PREDICTED_GAIN` is not measured: replay cannot
tell it from the best, and measurement would at best confirm a tie. The proposer itself (the
method knob), other knobs, model-based proposers and engines that measure no verify costs are
always measured: replay predicts a proposer's speed-up over none within about 15%
(docs/measured.md), too loosely to say whether it beats the incumbent, while the knobs of one
proposer move the same replayed passes.

Each measured trial also keeps its own prediction (`speedup`: over the same configuration without
a proposer, on its engine's costs; a block's values keep the one made before the block): where the
measurements cannot tell a step's values apart, the ladder keeps one replay predicts fastest by more
than `ladder.PREDICTED_TIE` (`ladder._simplest_tied`). Replay counts the tokens each pass accepts
exactly, but prices them on measured verify costs, which move from one engine launch to the next;
values it prices within PREDICTED_TIE of each other tie, whatever they measured
(`ladder.replay_ties`).

A draft model is not replayed, but one bound needs no replay (`futile`): the target's own weights
drafting at a precision that reads no fewer bytes than the target's pass (an int8 copy of a 5-bit
file) cannot speed it up (`speculation.draft_speedup_bound`), so that value is not launched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roofline import speculation
from roofline.dtypes import DTYPES
from roofline.errors import UserError
from roofline.tune.predict import model_free, predict_one, spec_options
from roofline.tune.predict_run import (
    baseline_streams,
    drafts,
    measured_costs,
    plain_before,
    rest_key,
    server_stats,
)
from roofline.tune.slots import TUNED, SlotKind, TrialStatus


@dataclass
class StepPredictor:
    """`View.predict` for a run folder: (configuration, current best, results) -> predicted
    speed-up over the best, or None where replay cannot say (module docstring)."""

    run_dir: Path
    max_tokens: int | None = None
    model: str | None = None  # the model file the engine serves, where known (`futile`)
    _streams: dict[int, Any] = field(default_factory=dict)  # baseline trial -> streams
    _ratios: dict[tuple, float | None] = field(default_factory=dict)

    def __call__(
        self, config: Mapping[str, Any], current: Any, results: Sequence[Any]
    ) -> float | None:
        if current is None or not _same_proposer(config, current.config):
            return None
        new, old = (
            self._ratio(config, current, results),
            self._ratio(current.config, current, results),
        )
        return new / old if new and old else None

    def futile(self, config: Mapping[str, Any], current: Any) -> str | None:
        """Why `config`, the current best plus an adaptive self-draft, cannot beat it, where the
        bytes say so: the draft copy's bytes per token (the model file's weights at the draft
        dtype) over those the best's engine reported give c, and a bound under 1 + PREDICTED_GAIN
        (`speculation.draft_speedup_bound`) is not worth a launch; None otherwise. The engine's
        draft budget prices a pass by the same bytes, so at c >= 1 it drafts only its probes.
        (Not adaptive, a draft pass costs what the kernels make it: on a host where the stored
        format's kernels are compute-bound, an int8 pass may take less time than a 5-bit one.)"""
        from roofline.modelspec.files import read_file_weights
        from roofline.tune.ladder import PREDICTED_GAIN

        try:
            spec = spec_options(config)
        except (ValueError, TypeError):
            return None
        traits = speculation.PROPOSERS.get(spec.method)
        if (
            traits is None
            or not traits.draft_model
            or spec.draft_model is not None
            or not spec.adaptive
            or self.model is None
            or current is None
            or not current.folder
            or drafts(current.config) is not False
            or rest_key(config) != rest_key(current.config)
        ):
            return None
        stats = server_stats(self.run_dir / current.folder)
        target = stats.bytes_per_token if stats is not None else None
        if not target:
            return None
        try:
            weights = read_file_weights(self.model)
        except (UserError, OSError):
            return None
        draft = weights.bytes_per_token_at(DTYPES[spec.draft_dtype].bits_per_weight)
        c = draft / target
        bound = speculation.draft_speedup_bound(c, spec.k)
        if bound >= 1.0 + PREDICTED_GAIN:
            return None
        return (
            f"spec={spec.method} at draft_dtype={spec.draft_dtype} not measured: its passes read "
            f"{draft / 1e6:.1f} MB a token, {c:.2f}x the current best's {target / 1e6:.1f} MB, so "
            f"it can speed decoding up {bound:.2f}x at most, and the engine's draft budget, "
            "which prices a pass by its bytes, would draft nothing (--draft-model names a smaller "
            "draft)"
        )

    def speedup(self, result: Any, results: Sequence[Any]) -> float | None:
        """A measured trial's predicted speed-up over its configuration without a proposer."""
        if result.status not in TUNED or not _drafts_model_free(result.config):
            return None
        return self._ratio(result.config, result, results)

    def speedup_on(
        self, config: Mapping[str, Any], on: Any, results: Sequence[Any]
    ) -> float | None:
        """A configuration's predicted speed-up on the verify costs trial `on`'s engine measured
        (before it runs: a block's values on the current best's server)."""
        return self._ratio(config, on, results) if _drafts_model_free(config) else None

    def _ratio(self, config: Mapping[str, Any], on: Any, results: Sequence[Any]) -> float | None:
        """config's replayed speed-up on the verify costs of trial `on`'s engine, at the rate of
        `on`'s configuration without a proposer."""
        key = (on.number, tuple(sorted((k, repr(v)) for k, v in config.items())))
        if key in self._ratios:
            return self._ratios[key]
        base = next(
            (r for r in results if r.slot.kind == SlotKind.BASELINE and r.status == TrialStatus.OK),
            None,
        )
        if base is None or not base.folder or not on.folder:
            return None
        if base.number not in self._streams:
            self._streams[base.number] = baseline_streams(self.run_dir / base.folder)
        streams = self._streams[base.number]
        stats = server_stats(self.run_dir / on.folder)
        costs = measured_costs(stats)
        if not streams or costs is None:
            return None
        plain = on if drafts(on.config) is False else plain_before(results, on)
        rate = plain.metrics.output_speed_median_tok_per_s if plain else None
        context = stats.max_seq_len if stats is not None else None
        p = predict_one(config, streams, costs, rate, self.max_tokens, context)
        self._ratios[key] = p.ratio
        return p.ratio


def _drafts_model_free(config: Mapping[str, Any]) -> bool:
    try:
        return model_free(spec_options(config).method)
    except (ValueError, TypeError):
        return False


def _same_proposer(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Both configurations draft with one model-free proposer and agree on every other knob."""
    try:
        sa, sb = spec_options(a), spec_options(b)
    except (ValueError, TypeError):
        return False
    return sa.method == sb.method and model_free(sa.method) and rest_key(a) == rest_key(b)
