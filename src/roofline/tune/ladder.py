"""The ladder (the B200 study's method): one knob at a time, in the space's order, on top of the
best so far; the incumbent is measured again next to its challengers, and a value is kept only when
its paired ratio to the incumbent clears noise (`tune.paired`): runs of one configuration minutes
apart vary more than many gains. `ladder_steps` replays the decisions over finished results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from roofline.tune.paired import PairedRatio, paired_ratio
from roofline.tune.slots import Action, Decision, Rule, Slot, SlotKind, TrialStatus, View
from roofline.tune.space_records import Space


def ladder_plan(space: Space) -> list[Slot]:
    """The baseline, then per knob in order: the incumbent again (skipped when its measurement is
    the trial just before), then each value other than the one the baseline runs."""
    slots = [Slot(SlotKind.BASELINE, 0, config=dict(space.baseline))]
    base = space.effective(space.baseline)
    for i, d in enumerate(space.dimensions, 1):
        slots.append(Slot(SlotKind.INCUMBENT, i, d.name))
        slots += [Slot(SlotKind.LADDER, i, d.name, v) for v in d.values() if v != base.get(d.name)]
    return slots


@dataclass(frozen=True)
class Step:
    """One rung of the ladder: a knob, what its values gave, and whether the best one was kept."""

    round: int
    knob: str
    before: Any  # the best result when the step started
    tried: tuple  # results of this step's values, in trial order
    kept: Any | None  # the result that became the new best, or None
    # kept.value - before.value in the objective's direction (None when not kept)
    gain: float | None
    note: str
    paired: PairedRatio | None = None  # the best value against the incumbent, paired
    remeasured: Any | None = None  # the incumbent measured again just before its challengers
    best: Any | None = None  # the value compared with the incumbent (the best paired ratio)


def _decide(d: Any, current: Any, step_results: Sequence[Any], rule: Rule) -> Step:
    """One step over its finished results. The incumbent's figures come from its measurement next
    to the challengers; each eligible value is paired with it and the best paired ratio decides
    (`tune.paired`). Results without pairing units (run folders from before) fall back to the old
    rule: the gain must beat the larger spread."""
    tried = tuple(
        r
        for r in step_results
        if r.slot.kind == SlotKind.LADDER and r.status != TrialStatus.SKIPPED
    )
    again = [r for r in step_results if r.slot.kind == SlotKind.INCUMBENT and rule.eligible(r)]
    step = Step(0, d.name, current, tried, None, None, "", remeasured=again[-1] if again else None)
    cand = rule.best(tried)
    if not tried:
        return step
    if current is None:
        return replace(step, note="no baseline to compare with")
    if cand is None:
        pruned = [f"{d.name}={r.config.get(d.name)}" for r in tried if r.pruned_after]
        if not pruned:
            return replace(step, note="no eligible value (failed or inexact)")
        note = f"not kept: {', '.join(pruned)} clearly slower (stopped after a first round)"
        if len(pruned) < len(tried):
            note += "; the other values failed or were inexact"
        return replace(step, note=note)
    incumbent = step.remeasured or current
    ratios = {
        r.number: paired_ratio(r.units, incumbent.units, rule.maximize, r.number)
        for r in tried
        if rule.eligible(r) and r.units and incumbent.units
    }
    ratios = {n: pr for n, pr in ratios.items() if pr is not None}
    if ratios:
        number = max(ratios, key=lambda n: ratios[n].ratio)
        number, why = _simplest_tied(d, tried, ratios, number, rule)
        cand, pr = next(r for r in tried if r.number == number), ratios[number]
        what = f"{d.name}={cand.config.get(d.name)}"
        if pr.verdict == "better":
            g = rule.gain(cand.value, current.value)
            note = f"kept {what}: {pr.describe()}{why}"
            return replace(step, kept=cand, gain=g, note=note, paired=pr, best=cand)
        word = "tie (within noise)" if pr.verdict == "tie" else "slower"
        note = f"not kept: {what} {word}: {pr.describe()}"
        return replace(step, note=note, paired=pr, best=cand)
    margin = max(current.spread or 0.0, cand.spread or 0.0)
    g = rule.gain(cand.value, current.value)
    what = f"{d.name}={cand.config.get(d.name)}"
    if g > margin:
        note = f"kept {what}: gain {g:.3g} > spread {margin:.3g}"
        return replace(step, kept=cand, gain=g, note=note, best=cand)
    note = f"not kept: best {what} gains {g:.3g}, within spread {margin:.3g}"
    return replace(step, note=note, best=cand)


# replayed speed-ups this close are the same to replay: they are priced on the verify costs an
# engine measured at start-up, and on 2 cores of one host the replayed ngram/trie ratio moved
# between 0.92 and 1.01 from one launch to the next (docs/measured.md: a probe that caught the host
# with a slow one-row pass priced 2-3 row passes cheap, and the proposers that draft more ahead)
PREDICTED_TIE = 0.10
# a proposer knob's value is measured only when replay predicts it this much faster than the best:
# both are replayed on one engine's costs, and spec_k 8 against 4 moved only 1.01-1.04x across runs
PREDICTED_GAIN = 0.05


def replay_ties(a: float | None, b: float | None) -> bool:
    """Whether two replayed speed-ups are the same to replay (both known, within PREDICTED_TIE).
    Replay counts each value's passes exactly; two values it prices this close spend about the same
    passes, so a measured gap between them is the requests' own noise, which on a shared 2-core
    host moves one request's time by a third within a run (docs/measured.md, series L-O)."""
    return bool(a and b) and max(a, b) <= min(a, b) * (1.0 + PREDICTED_TIE)


def _simplest_tied(
    d: Any, tried: Sequence[Any], ratios: Mapping[int, PairedRatio], best: int, rule: Rule
) -> tuple[int, str]:
    """Which value a step keeps when several beat the incumbent. The tied ones are the fastest
    and every value it does not beat beyond noise (paired); of those, the ones replay predicts
    fastest (`TrialResult.predicted`, within PREDICTED_TIE; all of them when any lacks a
    prediction), and of those the first the space lists (its choices go simplest first). So values
    a run cannot tell apart are decided by the replay and then by the space, not by which was
    measured faster. (trial number, a note saying so or "")."""
    by_number = {r.number: r for r in tried}
    top = by_number[best]
    if ratios[best].verdict != "better":
        return best, ""
    beat = {
        n: by_number[n].units for n, pr in ratios.items() if n != best and pr.verdict == "better"
    }
    pred = {n: by_number[n].predicted for n in beat}
    against = ties_with(top.units, beat, rule.maximize, top.number, pred, top.predicted)
    tied = [top, *(by_number[n] for n in against)]
    if len(tied) == 1:
        return best, ""
    order = list(d.values())

    def rank(r: Any) -> int:
        v = r.config.get(d.name)
        return order.index(v) if v in order else len(order)

    kept = pick_tied(tied, rank, lambda r: r.predicted)
    simpler = min(tied, key=rank)
    if kept is top and simpler is top:
        return best, ""
    other = kept if kept is not top else simpler  # the value the note holds the fastest against
    fast, what = f"{d.name}={top.config.get(d.name)}", f"{d.name}={other.config.get(d.name)}"
    vs = against[other.number]
    note = f"; {fast} against {what} {vs.describe()}: a tie"
    if vs.verdict == "better":  # tied by replay alone
        note = (
            f"; {fast} against {what} {vs.describe()}, but replay predicts "
            f"{top.predicted:.2f}x and {other.predicted:.2f}x: a tie (within the noise of "
            "requests replay counts the same passes for)"
        )
    if all(r.predicted for r in tied) and kept is not simpler:
        shown = ", ".join(
            f"{r.config.get(d.name)} {r.predicted:.2f}x" for r in sorted(tied, key=rank)
        )
        note += f"; replay predicts {shown}: the simplest of the fastest kept"
    else:
        note += ", the simpler kept"
    return kept.number, note


def ties_with(
    top_units: Mapping[str, float],
    others: Mapping[Any, Mapping[str, float]],
    maximize: bool,
    seed: int,
    predicted: Mapping[Any, float | None] | None = None,
    top_predicted: float | None = None,
) -> dict[Any, PairedRatio]:
    """Of `others` (key -> pairing units), those tied with the fastest value (top_units): it does
    not beat them beyond noise, or replay prices them the same (`replay_ties`; `predicted`: key ->
    replayed speed-up, `top_predicted` the fastest's). Each with the top's paired ratio against
    it, in `others`' order."""
    out = {}
    for k, units in others.items():
        vs = paired_ratio(top_units, units, maximize, seed)
        same = replay_ties(top_predicted, (predicted or {}).get(k))
        if vs is not None and (vs.verdict != "better" or same):
            out[k] = vs
    return out


def pick_tied(tied: Sequence[Any], rank: Any, predicted: Any) -> Any:
    """Of values measurement cannot tell apart: those replay predicts fastest (within
    PREDICTED_TIE; all of them when any has no prediction), and of those the lowest rank (the
    space's order, simplest first)."""
    chosen = list(tied)
    if all(predicted(r) for r in tied):
        most = max(predicted(r) for r in tied)
        chosen = [r for r in tied if predicted(r) * (1.0 + PREDICTED_TIE) >= most]
    return min(chosen, key=rank)


def ladder_steps(space: Space, results: Sequence[Any], rule: Rule) -> tuple[Any | None, list[Step]]:
    """Replay the ladder over finished results: (the baseline result, the steps taken so far).

    A step is complete when none of its slots is unfinished; the caller passes only finished
    results, and steps with no results yet are left out."""
    by_round: dict[int, list] = {}
    for r in sorted(results, key=lambda r: r.number):
        by_round.setdefault(r.slot.round, []).append(r)
    baseline = rule.best([r for r in by_round.get(0, []) if r.slot.kind == SlotKind.BASELINE])
    current = baseline
    steps = []
    for i, d in enumerate(space.dimensions, 1):
        step = replace(_decide(d, current, by_round.get(i, []), rule), round=i)
        if not step.tried:
            continue
        steps.append(step)
        if step.kept is not None:
            current = step.kept
    return baseline, steps


def ladder_current(
    space: Space, results: Sequence[Any], rule: Rule, before_round: int
) -> Any | None:
    """The best result after the steps before `before_round` (the configuration the next step builds
    on)."""
    baseline, steps = ladder_steps(space, [r for r in results if r.slot.round < before_round], rule)
    current = baseline
    for s in steps:
        if s.kept is not None:
            current = s.kept
    return current


def challenger(
    space: Space, current: Any, knob: str, value: Any, view: View | None = None
) -> Decision:
    """Whether `knob=value` on top of the current best is a configuration to run: not when its
    condition does not hold, when it is what the best runs, when a bound says it cannot beat the
    best (`view.predict`'s `futile`: a self-draft reading no fewer bytes than its target), or when
    replay predicts it no faster than the best by the margin a kept step needs (`view.predict`: a
    proposer's own knobs)."""
    config = space.resolve({**current.config, knob: value})
    if knob not in config:
        cond = " and ".join(c.describe() for c in space.dimension(knob).conditions)
        return Decision(
            Action.SKIP, reason=f"{knob} is inactive on the current best ({cond} does not hold)"
        )
    if space.effective(config) == space.effective(current.config):
        return Decision(Action.SKIP, reason=f"{knob}={value} is what the current best runs")
    futile = getattr(view.predict, "futile", None) if view else None
    why = futile(config, current) if futile else None
    if why:
        return Decision(Action.SKIP, reason=why)
    ratio = view.predict(config, current, view.results) if view and view.predict else None
    if ratio is not None and ratio < 1.0 + PREDICTED_GAIN:
        return Decision(
            Action.SKIP,
            reason=f"{knob}={value} predicted {ratio:.3f}x the current best (replay of the "
            f"baseline's outputs; under {1.0 + PREDICTED_GAIN:.2f}x replay cannot tell them "
            "apart): not measured",
        )
    return Decision(Action.RUN, config)


def _incumbent(space: Space, slot: Slot, view: View, current: Any) -> Decision:
    """The current best again, right before its challengers, unless the trial just before was it
    (then that measurement pairs) or none of the step's values will run."""
    base = space.effective(space.baseline)
    values = [v for v in space.dimension(slot.knob).values() if v != base.get(slot.knob)]
    if all(challenger(space, current, slot.knob, v, view).action == Action.SKIP for v in values):
        return Decision(Action.SKIP, reason=f"no value of {slot.knob} runs on the current best")
    ran = [r.number for r in view.results if r.status != TrialStatus.SKIPPED]
    if ran and max(ran) == current.number:
        return Decision(Action.SKIP, reason="the current best was measured just before")
    return Decision(Action.RUN, dict(current.config))


def ladder_configure(
    space: Space, slot: Slot, view: View, rule: Rule, trial: Any = None
) -> Decision:
    if slot.kind == SlotKind.BASELINE:
        return Decision(Action.RUN, dict(slot.config or {}))
    if any(u.round < slot.round for u in view.unfinished):
        return Decision(Action.WAIT, reason=f"step {slot.round} waits for earlier steps")
    current = ladder_current(space, view.results, rule, slot.round)
    if current is None:
        return Decision(Action.SKIP, reason="the baseline did not give a result")
    if slot.kind == SlotKind.INCUMBENT:
        return _incumbent(space, slot, view, current)
    if any(u.round == slot.round and u.kind == SlotKind.INCUMBENT for u in view.unfinished):
        return Decision(Action.WAIT, reason=f"step {slot.round} waits for its incumbent")
    return challenger(space, current, slot.knob, slot.value, view)
