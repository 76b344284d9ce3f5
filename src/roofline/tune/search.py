"""Search strategies: which configuration a tuner runs next.

Each starts from the baseline (trial 0), whose greedy outputs the others must match, and is two
functions in `STRATEGIES`: `plan(space)`, the slots enqueued up front so that workers sharing a
study each claim a different one (`roofline.tune.study`); and `configure(space, slot, view,
trial)`, the configuration to launch for a claimed slot, or "skip" (its condition does not hold)
or "wait" (it depends on slots still running).

ladder (`tune.ladder`, the B200 study's method): one knob at a time on top of the best so far,
kept only when its paired ratio to the incumbent clears noise. grid: every combination, the
reference for small spaces. tpe: Optuna's TPE, define-by-run (a conditional knob
is learned only where active); inexact trials are violated constraints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from roofline.tune.ladder import ladder_configure, ladder_plan
from roofline.tune.slots import Action, Decision, Rule, Slot, SlotKind, View
from roofline.tune.space_records import DimensionKind, Space

# -- the grid --------------------------------------------------------------------------------------


def grid_configs(space: Space) -> list[dict[str, Any]]:
    """Every combination of the space's values on top of the baseline; a knob whose condition does
    not hold is left out (so it does not multiply the grid)."""
    out: list[dict[str, Any]] = []

    def walk(i: int, config: dict[str, Any]) -> None:
        if i == len(space.dimensions):
            out.append(config)
            return
        d = space.dimensions[i]
        if not d.active(space.effective(config)):
            rest = dict(config)
            rest.pop(d.name, None)
            walk(i + 1, rest)
            return
        for v in d.values():
            walk(i + 1, {**config, d.name: v})

    walk(0, dict(space.baseline))
    return out


def grid_plan(space: Space) -> list[Slot]:
    base = space.effective(space.baseline)
    slots = [Slot(SlotKind.BASELINE, 0, config=dict(space.baseline))]
    slots += [
        Slot(SlotKind.GRID, 1, config=c) for c in grid_configs(space) if space.effective(c) != base
    ]
    return slots


def fixed_configure(
    space: Space, slot: Slot, view: View, rule: Rule, trial: Any = None
) -> Decision:
    return Decision(Action.RUN, dict(slot.config or {}))


# -- TPE -------------------------------------------------------------------------------------------


def tpe_plan(space: Space) -> list[Slot]:
    return [Slot(SlotKind.BASELINE, 0, config=dict(space.baseline))]


def suggest_config(trial: Any, space: Space) -> dict[str, Any]:
    """Define-by-run: ask the trial for each knob whose conditions hold, in the space's order."""
    config = dict(space.baseline)
    for d in space.dimensions:
        if not d.active(space.effective(config)):
            config.pop(d.name, None)
            continue
        if d.kind == DimensionKind.CHOICE:
            config[d.name] = trial.suggest_categorical(d.name, list(d.choices))
        elif d.kind == DimensionKind.INT:
            config[d.name] = trial.suggest_int(
                d.name, int(d.low), int(d.high), step=int(d.step or 1), log=d.log
            )
        else:
            config[d.name] = trial.suggest_float(
                d.name, float(d.low), float(d.high), step=d.step, log=d.log
            )
    return config


def tpe_configure(space: Space, slot: Slot, view: View, rule: Rule, trial: Any = None) -> Decision:
    if slot.kind == SlotKind.BASELINE:
        return Decision(Action.RUN, dict(slot.config or {}))
    return Decision(Action.RUN, suggest_config(trial, space))


def tpe_sampler(seed: int | None, budget: int | None = None) -> Any:
    """TPE, its first draws random: 8 of them, or a third of a smaller budget (at least 3), so a
    budget of 8 is not all random draws."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed,
            multivariate=True,
            group=True,
            n_startup_trials=8 if budget is None else max(3, min(8, budget // 3)),
        )


def tpe_pruner(budget: int | None = None) -> Any:
    """Stop a trial after a repetition whose value lies below the lower quartile of the values
    finished trials reported at the same repetition (3 at least: the baseline and inexact trials
    report none): it is clearly losing, and its remaining repetitions would only measure how much.
    A pruned trial is never the best. (The median, or a quartile of two values, pruned
    configurations 0.4-0.6% off the best on their first repetition's noise.)"""
    import optuna

    return optuna.pruners.PercentilePruner(
        75.0, n_startup_trials=1 + 3, n_warmup_steps=0, n_min_trials=3
    )


def plain_sampler(seed: int | None, budget: int | None = None) -> Any:
    """Ladder and grid never ask Optuna for values; any sampler will do."""
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


@dataclass(frozen=True)
class Strategy:
    name: str
    help: str  # `roofline tune --strategy`'s words for it
    plan: Callable[[Space], list[Slot]]
    configure: Callable[..., Decision]
    sampler: Callable[[int | None, int | None], Any]  # (seed, trial budget)
    open_ended: bool  # asks Optuna for new trials beyond the plan (until the budget)
    default_budget: int | None = None  # trials run without --trials (None: the whole plan)
    climbs: bool = False  # a ladder: its steps are a table, its best is where the climb ended
    # (trial budget) -> Optuna's pruner: trials report each repetition and may stop early
    pruner: Callable[[int | None], Any] | None = None


STRATEGIES: dict[str, Strategy] = {
    "ladder": Strategy(
        "ladder",
        "one knob at a time, keeping what beats the incumbent beyond noise (paired)",
        ladder_plan,
        ladder_configure,
        plain_sampler,
        False,
        climbs=True,
    ),
    "grid": Strategy(
        "grid",
        "every combination of the space's values",
        grid_plan,
        fixed_configure,
        plain_sampler,
        False,
    ),
    "tpe": Strategy(
        "tpe",
        "Optuna's TPE sampler, for spaces too big for a grid; a trial below the lower quartile "
        "after a repetition is pruned",
        tpe_plan,
        tpe_configure,
        tpe_sampler,
        True,
        default_budget=20,
        pruner=tpe_pruner,
    ),
}


def get_strategy(name: str) -> Strategy:
    from roofline.errors import UserError

    if name not in STRATEGIES:
        raise UserError(f"unknown strategy {name!r}; choose {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


def grid_size(space: Space) -> int:
    return len(grid_plan(space))
