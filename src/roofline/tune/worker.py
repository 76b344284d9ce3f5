"""A worker's loop over a shared study: claim a trial, let the strategy configure it, run it,
record it; a ladder step of live values as one block (`step_block`). Ctrl-C puts the running
trial back in the queue."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from roofline.errors import UserError
from roofline.tune.objectives import DEFAULT_OBJECTIVE
from roofline.tune.search import Strategy
from roofline.tune.slots import TUNED, Action, Rule, Slot, SlotKind
from roofline.tune.space_records import Space
from roofline.tune.study import (
    POLL_S,
    baseline_outputs,
    claim,
    record,
    requeue,
    view,
)
from roofline.tune.trial_result import TrialResult


@dataclass
class Worker:
    study: Any
    strategy: Strategy
    space: Space
    rule: Rule
    budget: int | None = None
    objective: str = DEFAULT_OBJECTIVE
    poll_s: float = POLL_S
    predict: Any = None  # View.predict: replay's verdict on a proposer's knob values, or None


# (number, slot, config, baseline outputs, report) -> (result, greedy outputs); report: None, or
# (repetition, value so far) -> True when the trial should stop there (pruned)
Report = Callable[[int, float], bool]
Evaluate = Callable[
    [int, Slot, dict, list[dict] | None, Report | None], tuple[TrialResult, list[Any] | None]
]
# (worker, claimed incumbent trial, its slot, on_start, on_result) -> trials run, or None
StepBlock = Callable[[Any, Any, Slot, Callable, Callable], int | None]


class BaselineFailed(UserError):
    """The baseline configuration gave no result: there is nothing to hold other trials against."""


def run_worker(
    w: Worker,
    evaluate: Evaluate,
    *,
    on_start: Callable[[int, Slot, dict], None] = lambda *a: None,
    on_result: Callable[[TrialResult], None] = lambda r: None,
    step_block: StepBlock | None = None,
) -> int:
    """Claim, configure, evaluate and record trials until none is left; the number this worker ran.

    `evaluate(number, slot, config, baseline_outputs)` runs one trial (baseline_outputs None for the
    baseline itself). `step_block(worker, trial, slot, on_start, on_result)` runs the ladder step
    of a claimed incumbent slot as one paired block (tune.block; not under a trial budget), or
    answers None. Ctrl-C fails the running trial and enqueues it again, then re-raises."""
    ran = 0
    while True:
        trial = claim(w.study, w.strategy, w.budget)
        if trial is None:
            return ran
        slot = Slot.from_json(trial.user_attrs.get("slot"))
        if (
            step_block
            and w.strategy.climbs
            and slot.kind == SlotKind.INCUMBENT
            and w.budget is None
        ):
            try:
                n = step_block(w, trial, slot, on_start, on_result)
            except BaseException as e:
                requeue(
                    w.study,
                    trial.number,
                    "interrupted" if isinstance(e, KeyboardInterrupt) else str(e)[:200],
                )
                raise
            if n is not None:
                ran += n
                continue
        try:
            decision, reference = _configure(w, trial, slot)
            if decision.action == Action.SKIP:
                from roofline.tune.trial import skipped

                result = skipped(trial.number, slot, decision.reason, w.objective)
                record(w.study, trial, result, w.rule)
                on_result(result)
                continue
            config = dict(decision.config or {})
            trial.set_user_attr("config", config)
            on_start(trial.number, slot, config)
            report = (
                _reporter(trial) if w.strategy.pruner and slot.kind != SlotKind.BASELINE else None
            )
            result, outputs = evaluate(trial.number, slot, config, reference, report)
        except (
            BaseException
        ) as e:  # Ctrl-C, or no baseline to compare with: the slot goes back in the queue
            requeue(
                w.study,
                trial.number,
                "interrupted" if isinstance(e, KeyboardInterrupt) else str(e)[:200],
            )
            raise
        result = with_prediction(w, result, view(w.study).results)
        record(w.study, trial, result, w.rule, outputs)
        ran += 1
        on_result(result)
        if slot.kind == SlotKind.BASELINE and result.status not in TUNED:
            raise BaselineFailed(f"the baseline configuration failed: {result.error}")


def with_prediction(w: Worker, result: TrialResult, results: Sequence[TrialResult]) -> TrialResult:
    """The result with its replayed speed-up (`TrialResult.predicted`) where the worker's
    predictor gives one; a prediction that fails leaves the result as it was."""
    speedup = getattr(w.predict, "speedup", None)
    try:
        p = speedup(result, results) if speedup is not None else None
    except Exception:  # a prediction never fails a trial
        p = None
    return replace(result, predicted=p) if p else result


def predicted_on(w: Worker, config: dict, on: Any, results: Sequence[TrialResult]) -> float | None:
    """config's replayed speed-up on the verify costs trial `on`'s engine measured, where the
    worker's predictor gives one (before a block runs: its values on the current best's server)."""
    speedup_on = getattr(w.predict, "speedup_on", None)
    try:
        return speedup_on(config, on, results) if speedup_on and on is not None else None
    except Exception:  # a prediction never fails a step
        return None


def _reporter(trial: Any) -> Report:
    """Tell Optuna a trial's value after each repetition; True when its pruner says stop."""

    def report(rep: int, value: float) -> bool:
        trial.report(value, rep)
        return bool(trial.should_prune())

    return report


def _configure(w: Worker, trial: Any, slot: Slot) -> tuple[Any, list[dict] | None]:
    """The strategy's decision for this slot, waiting while it depends on unfinished trials, and the
    baseline's greedy outputs (None for the baseline itself)."""
    while True:
        v = view(w.study, exclude=trial.number, predict=w.predict)
        if slot.kind == SlotKind.BASELINE:
            return w.strategy.configure(w.space, slot, v, w.rule, trial), None
        if not any(u.kind == SlotKind.BASELINE for u in v.unfinished):
            reference = baseline_outputs(w.study)
            if reference is None:
                failed = [r for r in v.results if r.slot.kind == SlotKind.BASELINE]
                why = failed[-1].error if failed else "no baseline trial"
                raise BaselineFailed(f"the baseline configuration gave no result ({why})")
            decision = w.strategy.configure(w.space, slot, v, w.rule, trial)
            if decision.action != Action.WAIT:
                return decision, reference
        time.sleep(w.poll_s)
