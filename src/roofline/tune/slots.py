"""What a search strategy works with: the slots a study enqueues (`Slot`), how results compare
(`Rule`, by a trial's `TrialStatus`), what a worker knows when it configures a slot (`View`) and
what it decides (`Decision`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class TrialStatus(StrEnum):
    """How a trial ended (`TrialResult.status`; here, beside `Rule`, which compares by it)."""

    OK = "ok"  # measured, and its greedy outputs equal the baseline's
    INEXACT = "inexact"  # measured, but its greedy outputs differ
    FAILED = "failed"
    SKIPPED = "skipped"  # never configured (its decision was to skip)


TUNED = (TrialStatus.OK, TrialStatus.INEXACT)  # statuses that carry a measured value


class Direction(StrEnum):
    """Which way an objective is better (Optuna's words)."""

    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


class SlotKind(StrEnum):
    """What a slot is for."""

    BASELINE = "baseline"
    INCUMBENT = "incumbent"  # the ladder's current best, measured again beside a step's values
    LADDER = "ladder"  # one value of the ladder's step
    GRID = "grid"
    TPE = "tpe"  # a TPE draw


class Action(StrEnum):
    """What a worker does with a slot it claimed (`Decision.action`)."""

    RUN = "run"
    SKIP = "skip"
    WAIT = "wait"  # an earlier slot must finish first


@dataclass(frozen=True)
class Slot:
    """What a claimed trial is for: the baseline, one ladder step's value, a grid point, or a TPE
    draw."""

    kind: SlotKind
    round: int = 0  # baseline 0; the ladder's step (1 = first knob); grid and tpe 1
    knob: str | None = None
    value: Any = None
    config: Mapping[str, Any] | None = None  # fixed configurations (baseline, grid)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "round": self.round,
            "knob": self.knob,
            "value": self.value,
            "config": None if self.config is None else dict(self.config),
        }

    @classmethod
    def from_json(cls, d: Mapping | None) -> Slot:
        if not d:
            return cls(SlotKind.TPE, 1)
        return cls(
            SlotKind(d["kind"]),
            int(d.get("round", 0)),
            d.get("knob"),
            d.get("value"),
            None if d.get("config") is None else dict(d["config"]),
        )


@dataclass(frozen=True)
class Rule:
    """How results compare: the objective's direction, and whether inexact trials may win."""

    direction: Direction = Direction.MAXIMIZE
    allow_inexact: bool = False

    @property
    def maximize(self) -> bool:
        return self.direction == Direction.MAXIMIZE

    def eligible(self, r: Any) -> bool:
        """May be the best: measured, exact (or inexact allowed), and not pruned (measured on
        fewer repetitions because it was losing)."""
        return (
            r.value is not None
            and not getattr(r, "pruned_after", 0)
            and (
                r.status == TrialStatus.OK
                or (r.status == TrialStatus.INEXACT and self.allow_inexact)
            )
        )

    def gain(self, new: float, old: float) -> float:
        """How much better new is than old, in the objective's unit (positive = better)."""
        return new - old if self.maximize else old - new

    def best(self, results: Sequence[Any]) -> Any | None:
        ok = [r for r in results if self.eligible(r)]
        if not ok:
            return None
        return max(ok, key=lambda r: r.value) if self.maximize else min(ok, key=lambda r: r.value)


@dataclass(frozen=True)
class View:
    """What a worker knows when it configures a slot: finished results, and slots not yet
    finished."""

    results: Sequence[Any]  # TrialResult-like: number, slot, config, status, value, spread
    unfinished: Sequence[Slot] = ()
    # (configuration, the current best result, results) -> the configuration's predicted speed-up
    # over the current best by replay (tune.predict_step), None where nothing predicts it
    predict: Callable[[Mapping[str, Any], Any, Sequence[Any]], float | None] | None = None


@dataclass(frozen=True)
class Decision:
    action: Action
    config: Mapping[str, Any] | None = None
    reason: str = ""
