"""Where a tuning study lives, and how workers share it without running a trial twice.

Storage is Optuna's RDB storage (`storage`): `RUN/study.db` (SQLite), or a `--storage` URL
(PostgreSQL for several machines, `--study NAME` naming the study).

Claiming: the creator enqueues the whole plan as WAITING trials, then marks the study "planned" (an
early joiner waits). A worker claims a trial by `set_trial_state_values` WAITING -> RUNNING, which
one transaction grants to one worker only, as Optuna's `ask()` does; TPE then asks for fresh ones.
Creating races, so it is retried and joiners load. Resuming: a trial records its worker (host,
pid, process start); a starting worker fails its host's RUNNING trials whose process is gone (in
private SQLite, any without a worker) and enqueues their slots again. A dead worker elsewhere is
noticed only by its own next start.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from roofline.errors import UserError
from roofline.tune.records import Machine
from roofline.tune.search import Strategy
from roofline.tune.slots import TUNED, Rule, Slot, SlotKind, TrialStatus, View
from roofline.tune.space_records import Space
from roofline.tune.trial_result import TrialResult

DEFAULT_STUDY = "tune"
POLL_S = 1.0


def open_study(
    storage: Any,
    name: str,
    strategy: Strategy,
    space: Space,
    fingerprint: Mapping[str, Any],
    direction: str,
    seed: int | None,
    budget: int | None = None,
) -> tuple[Any, bool]:
    """(the study, True when this call created it). The creator enqueues the strategy's plan; a
    joiner waits for it and refuses a study set up for another engine, space, strategy or
    objective."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = strategy.sampler(seed, budget)
    pruner = strategy.pruner(budget) if strategy.pruner else None
    try:
        study = optuna.create_study(
            storage=storage, study_name=name, direction=direction, sampler=sampler, pruner=pruner
        )
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
        created = False
    if created:
        study.set_user_attr("tune", dict(fingerprint))
        plan = strategy.plan(space)
        for slot in plan:
            study.enqueue_trial({}, user_attrs={"slot": slot.to_json()})
        study.set_user_attr("planned", len(plan))
        return study, True
    deadline = time.monotonic() + 120
    while "planned" not in study.user_attrs:
        if time.monotonic() > deadline:
            raise UserError(
                f"study {name!r} exists but its plan was never written (its creator died?); "
                "use another --study name"
            )
        time.sleep(POLL_S)
    theirs = study.user_attrs.get("tune") or {}
    for key in ("engine", "space", "strategy", "objective"):
        if theirs.get(key) != fingerprint.get(key):
            raise UserError(
                f"study {name!r} was set up with another {key} ({_short(theirs.get(key))}); "
                f"join it with the same settings or use another --study name"
            )
    return study, False


def _short(value: Any) -> str:
    text = value.get("name", "") if isinstance(value, dict) else str(value)
    return text[:60]


# -- who runs a trial ------------------------------------------------------------------------------


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a live pid from a reused
    one."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def worker_id() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _start_ticks(os.getpid())}


def _worker_gone(worker: Mapping[str, Any] | None, private: bool) -> bool:
    if not worker:
        return private  # killed between the claim and the label: only a private study can be sure
    if worker.get("host") != socket.gethostname():
        return False
    start = _start_ticks(int(worker.get("pid", -1)))
    return start is None or (worker.get("start") is not None and start != worker.get("start"))


def requeue(study: Any, number: int, reason: str) -> None:
    """Fail an interrupted trial and enqueue its slot again (same fixed params for TPE's draws)."""
    from optuna.trial import TrialState

    storage = study._storage
    tid = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    frozen = storage.get_trial(tid)
    # recorded already (or another worker's recovery was first)
    if frozen.state != TrialState.RUNNING:
        return
    try:
        storage.set_trial_user_attr(tid, "interrupted", reason)
        storage.set_trial_state_values(tid, TrialState.FAIL)
    except Exception:  # finished meanwhile: nothing to redo
        return
    study.enqueue_trial(
        dict(frozen.params),
        user_attrs={"slot": frozen.user_attrs.get("slot"), "requeued_from": number},
    )


def recover(study: Any, private: bool) -> list[int]:
    """Requeue the RUNNING trials whose worker is gone; their numbers. A baseline that failed (the
    study stopped there) is queued again too: the failure may have been the machine's, not the
    configuration's, and nothing can be compared without it."""
    from optuna.trial import TrialState

    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _worker_gone(t.user_attrs.get("worker"), private):
            requeue(study, t.number, "its worker stopped before the trial ended")
            out.append(t.number)
    baselines = [t for t in study.get_trials(deepcopy=False) if _slot(t).kind == SlotKind.BASELINE]
    if baselines and all(t.state in (TrialState.FAIL, TrialState.PRUNED) for t in baselines):
        last = baselines[-1]
        study.enqueue_trial(
            {}, user_attrs={"slot": last.user_attrs.get("slot"), "requeued_from": last.number}
        )
        out.append(last.number)
    return out


# -- claiming, recording, the view -----------------------------------------------------------------


def _slot(frozen: Any) -> Slot:
    return Slot.from_json(frozen.user_attrs.get("slot"))


def _counts(frozen: Any) -> bool:
    """Does this trial use up the budget? Skipped and interrupted ones do not."""
    from optuna.trial import TrialState

    return (
        frozen.state != TrialState.WAITING
        and "skipped" not in frozen.user_attrs
        and "interrupted" not in frozen.user_attrs
    )


def claim(study: Any, strategy: Strategy, budget: int | None) -> Any | None:
    """A trial this worker now holds (RUNNING), or None when the plan is done or the budget
    spent."""
    import optuna
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    if budget is not None and sum(map(_counts, trials)) >= budget:
        return None
    storage = study._storage
    waiting = sorted(
        (t for t in trials if t.state == TrialState.WAITING),
        key=lambda t: (_slot(t).round, t.number),
    )
    for t in waiting:
        tid = storage.get_trial_id_from_study_id_trial_number(study._study_id, t.number)
        try:
            if not storage.set_trial_state_values(tid, TrialState.RUNNING):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        trial = optuna.trial.Trial(study, tid)
        break
    else:
        if not strategy.open_ended:
            return None
        trial = study.ask()
    trial.set_user_attr("worker", worker_id())
    return trial


def claim_step(study: Any, round: int) -> list[tuple[Any, Slot]]:
    """The waiting value slots of one ladder step this worker now holds (RUNNING), with their
    slots; those another worker took first are left out."""
    import optuna
    from optuna.trial import TrialState

    storage = study._storage
    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        slot = _slot(t)
        if slot.kind != SlotKind.LADDER or slot.round != round:
            continue
        tid = storage.get_trial_id_from_study_id_trial_number(study._study_id, t.number)
        try:
            if not storage.set_trial_state_values(tid, TrialState.RUNNING):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        trial = optuna.trial.Trial(study, tid)
        trial.set_user_attr("worker", worker_id())
        out.append((trial, slot))
    return out


def results(study: Any) -> list[TrialResult]:
    """Every finished trial's result (interrupted ones as failed), in trial order."""
    from optuna.trial import TrialState

    out = []
    for t in study.get_trials(deepcopy=False):
        if "result" in t.user_attrs:
            out.append(TrialResult.from_json(t.user_attrs["result"]))
        elif t.state == TrialState.FAIL:
            out.append(
                TrialResult(
                    t.number,
                    _slot(t),
                    dict(t.user_attrs.get("config") or {}),
                    TrialStatus.FAILED,
                    error=f"interrupted: {t.user_attrs.get('interrupted', 'no result recorded')}",
                    machine=Machine.from_json(t.user_attrs.get("worker")),
                )
            )
    return sorted(out, key=lambda r: r.number)


def view(study: Any, exclude: int | None = None, predict: Any = None) -> View:
    """What a worker knows now: finished results, unfinished slots (but `exclude`), and its
    predictor (`View.predict`)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    unfinished = [
        _slot(t)
        for t in trials
        if t.state in (TrialState.WAITING, TrialState.RUNNING) and t.number != exclude
    ]
    return View(results(study), unfinished, predict)


def record(
    study: Any, trial: Any, result: TrialResult, rule: Rule, outputs: list[Any] | None = None
) -> None:
    """Store the result on the trial and finish it: COMPLETE with the value (inexact ones carry a
    violated constraint, which TPE avoids), PRUNED for skipped slots, FAIL for failures."""
    from optuna.trial import TrialState

    trial.set_user_attr("config", dict(result.config))
    if outputs is not None and result.slot.kind == SlotKind.BASELINE and result.status in TUNED:
        trial.set_user_attr("greedy", [o.to_json() for o in outputs])
    trial.set_user_attr("result", result.to_json())
    if result.status in TUNED and result.value is not None:
        exact = result.status == TrialStatus.OK or rule.allow_inexact
        trial.set_constraint("exact", 0.0 if exact else 1.0)
        # stopped as losing: Optuna keeps its last reported value (an inexact one stays
        # COMPLETE, its violated constraint is what TPE learns from)
        if result.pruned_after and result.status == TrialStatus.OK:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, result.value)
    elif result.status == TrialStatus.SKIPPED:
        trial.set_user_attr("skipped", result.error or "")
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, state=TrialState.FAIL)


def baseline_outputs(study: Any) -> list[dict] | None:
    """The reference greedy outputs (JSON) of the finished baseline trial, if there is one."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if _slot(t).kind == SlotKind.BASELINE and "greedy" in t.user_attrs:
            return t.user_attrs["greedy"]
    return None
