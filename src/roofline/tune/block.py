"""A ladder step run as one paired block: the incumbent and the step's values on one server.

When every configuration of a step differs from the others only in live knobs (tune.servers), the
worker claims the step's slots together and measures them in one block:

    for rep in reps:                    round-robin: one bench run of every prompt per
        for config in block:            configuration, the incumbent first; its lines keep
            bench run (reps=1)          `rep` = the round, so units pair across configurations

so a value's units pair with the incumbent's from the same minutes; consecutive runs share the
bandwidth probe between them. The first round, one stream with token ids in the stream, is also
the greedy pass (the exactness evidence) of each configuration that teaches the server nothing;
the others run a greedy pass first, their warm-up (`engine_runs.ids_in_stream`).
A value clearly slower than the incumbent after the first round (`paired.clearly_worse`), or
inexact and not allowed to win, runs no more rounds: pruned, it cannot be kept. Two values that
both beat the incumbent but are too close to call between them (`_close_call`) run up to
CLOSE_CALL_ROUNDS more rounds, the two alone. The decision is the
ladder's own (`ladder._decide` over the results, `tune.paired`); the block only feeds it results. A
step that cannot be one block (a restart knob, drafts that learn across requests, a budget) runs
slot by slot.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from roofline.bench.driver import Progress
from roofline.bench.records import RequestRecord
from roofline.tune.ladder import (
    challenger,
    ladder_current,
    pick_tied,
    replay_ties,
    ties_with,
)
from roofline.tune.paired import TIE_RATIO, clearly_worse, paired_ratio
from roofline.tune.slots import Action, Decision, Direction, Slot, SlotKind, View
from roofline.tune.space_records import Space


@dataclasses.dataclass(frozen=True)
class Item:
    """One configuration of a block: its trial number, slot, configuration and folder."""

    number: int
    slot: Slot
    config: dict[str, Any]
    folder: Path
    rank: int = -1  # where its value comes in the knob's list (simplest first); -1: the incumbent
    predicted: float | None = None  # its replayed speed-up (tune.predict_step), where known


def ladder_block(space: Space, slot: Slot, view: View, rule: Any) -> list[tuple[Slot, Decision]]:
    """The decisions of one ladder step whose incumbent slot is `slot`, run together: the incumbent
    always runs (it pairs with its challengers from the same minutes), each value as
    `search.challenger` says. [] when the step has nothing to run or the best is unknown."""
    current = ladder_current(space, view.results, rule, slot.round)
    if current is None:
        return []
    base = space.effective(space.baseline)
    values = [v for v in space.dimension(slot.knob).values() if v != base.get(slot.knob)]
    out = [
        (
            Slot(SlotKind.LADDER, slot.round, slot.knob, v),
            challenger(space, current, slot.knob, v, view),
        )
        for v in values
    ]
    if all(d.action == Action.SKIP for _, d in out):
        return []
    return [(slot, Decision(Action.RUN, dict(current.config))), *out]


def fits(launcher: Any, configs: Sequence[dict[str, Any]]) -> bool:
    """Whether these configurations can share one server: each takes its live knobs per request
    and their restart knobs agree."""
    restart = []
    for c in configs:
        if launcher.live_body(c) is None:
            return False
        restart.append({k: v for k, v in c.items() if k not in launcher.live_knobs})
    return all(r == restart[0] for r in restart)


def run_block(
    settings: Any,
    items: Sequence[Item],
    baseline: Sequence[Any],
    progress: Progress,
    servers: Any,
    *,
    run_dir: Path | None = None,
) -> list[tuple[Any, list[Any] | None]]:
    """Measure the block's configurations interleaved on one server; (result, greedy outputs) per
    item, in order. An error fails every item (KeyboardInterrupt passes through, the server
    stopped)."""
    from roofline.tune.trial import failure, measured_result, trial_common

    t0 = time.monotonic()
    commons = [trial_common(settings, i.number, i.slot, i.config, i.folder, run_dir) for i in items]
    argv: list[str] = []
    log_path = items[0].folder / "server.log"
    try:
        served = [
            servers.serve(i.config, i.folder / "server.log", lambda s: argv.extend(s.argv))
            for i in items
        ]
        argv[:], log_path = served[0].argv, served[0].log_path
        for c, s in zip(commons, served):
            c.update(live=dict(s.body), launched=s.launched)
        numbers = ", ".join(str(i.number) for i in items)
        progress.note(f"trials {numbers}: one paired block on the running engine")
        try:
            outputs, runs = _rounds(settings, items, served, baseline, progress)
        except BaseException as e:
            servers.failed(e)
            raise
        servers.done()
    except KeyboardInterrupt:
        raise
    except Exception as e:  # the study goes on: every configuration of the block failed with it
        return [(failure(e, c, log_path, argv, t0), None) for c in commons]
    return [
        (
            dataclasses.replace(
                measured_result(
                    settings,
                    c,
                    item.folder,
                    baseline,
                    out,
                    [summary for summary, _ in run],
                    [ln for _, lines in run for ln in lines],
                    log_path,
                    list(s.command or s.argv),  # its whole configuration, live knobs as flags
                    t0,
                ),
                pruned_after=len(run) if len(run) < settings.reps else 0,
            ),
            out,
        )
        for item, c, out, run, s in zip(items, commons, outputs, runs, served)
    ]


def _rounds(
    settings: Any,
    items: Sequence[Item],
    served: Sequence[Any],
    baseline: Sequence[Any],
    progress: Progress,
) -> tuple[list[Any], list[list[tuple[Any, list[RequestRecord]]]]]:
    """The block's rounds: (greedy outputs, bench runs) per item. The first round is also the
    greedy pass when the engine streams token ids at one stream (`ids_in_stream`), else a greedy
    pass runs first; after it a value clearly slower than the incumbent, or inexact and not
    allowed to win, runs no more rounds."""
    from roofline.tune.engine_runs import (
        bench_rep,
        discovered,
        greedy_outputs,
        ids_in_stream,
        stream_outputs,
        trial_probes,
        with_ids,
    )
    from roofline.tune.trial import exact_gate

    info: dict[str, Any] = {}

    def greedy(k: int) -> list[Any]:
        if not info:
            info.update(discovered(served[0].url, settings))
        return greedy_outputs(
            settings.launcher, served[k].url, settings, info, dict(served[k].body)
        )

    streamed = [ids_in_stream(settings, i.config, s.warm) for i, s in zip(items, served)]
    outputs = [None if streamed[k] else greedy(k) for k in range(len(items))]
    once, probes = dataclasses.replace(settings, reps=1), trial_probes(settings)
    runs: list[list[tuple[Any, list[RequestRecord]]]] = [[] for _ in items]

    def measure(k: int, rep: int) -> None:
        s, body = served[k], dict(served[k].body)
        first = rep == 0 and streamed[k]
        warm = int(first and k == 0 and s.launched)  # a new server's first request
        body = with_ids(body) if first else body
        runs[k].append(
            bench_rep(once, s.url, items[k].folder, rep, progress, outputs[k], body, probes, warm)
        )
        if first:
            outputs[k] = stream_outputs(runs[k][0][1], settings.prompts) or greedy(k)

    active = list(range(len(items)))
    for rep in range(settings.reps):
        for k in active:
            measure(k, rep)
        if rep == 0 and settings.reps > 1:
            stop = _stop_slower(settings, items, runs)
            for k in sorted(stop):
                progress.note(
                    f"trial {items[k].number}: clearly slower than the incumbent after "
                    "the first round: no more rounds"
                )
            gate = exact_gate(settings, baseline)
            for k in active:
                if gate is not None and k not in stop and not gate(outputs[k]):
                    progress.note(
                        f"trial {items[k].number}: outputs differ from the baseline's: one round"
                    )
                    stop.add(k)
            active = [k for k in active if k not in stop]
    for rep in range(settings.reps, settings.reps + CLOSE_CALL_ROUNDS):
        pair = _close_call(settings, items, runs, active)
        if pair is None:
            break
        if rep == settings.reps:
            a, b = (items[k].number for k in pair)
            progress.note(f"trials {a} and {b}: too close to call: more rounds of the two")
        for k in pair:
            measure(k, rep)
    return outputs, runs


CLOSE_CALL_ROUNDS = 6  # at most this many rounds more, of two values too close to call


def _close_call(
    settings: Any,
    items: Sequence[Item],
    runs: Sequence[Sequence[tuple[Any, list[RequestRecord]]]],
    active: Sequence[int],
) -> tuple[int, int] | None:
    """Two values (indices into items) whose comparison still decides the step: both beat the
    incumbent (items[0]) beyond noise, the faster-measured one against the other has an interval
    that straddles 1 + TIE_RATIO, and the ladder would keep another value with the other counted
    as tied than without it (`ladder.pick_tied`). More rounds of the two narrow the interval, so a
    gain of a few percent is called the same way run after run rather than by which side of the
    threshold one run's interval fell; values replay prices the same (`ladder.replay_ties`) are
    tied whatever the rounds say, so they need none. None: the block's rounds decide."""
    if items[0].slot.kind != SlotKind.INCUMBENT or settings.reps < 2 or 0 not in active:
        return None
    maximize = settings.objective.direction == Direction.MAXIMIZE
    units = {k: _units(settings, runs[k]) for k in active}
    ratios = {k: paired_ratio(units[k], units[0], maximize, items[k].number) for k in active[1:]}
    better = [k for k, pr in ratios.items() if pr is not None and pr.verdict == "better"]
    if len(better) < 2:
        return None
    top = max(better, key=lambda k: ratios[k].ratio)
    beat = {k: units[k] for k in better if k != top}
    pred = {k: items[k].predicted for k in beat}
    against = ties_with(units[top], beat, maximize, items[top].number, pred, items[top].predicted)
    tied = [top, *against]
    # a value replay ties with the top is tied whatever more rounds measure
    open_ = [
        k
        for k, vs in against.items()
        if vs.high > 1.0 + TIE_RATIO and not replay_ties(pred[k], items[top].predicted)
    ]

    def pick(ks: list[int]) -> int:
        return pick_tied(ks, lambda k: items[k].rank, lambda k: items[k].predicted)

    for k in sorted(open_, key=lambda k: items[k].rank):
        if pick(tied) != pick([j for j in tied if j != k]):
            return (k, top)
    return None


def _units(settings: Any, run: Sequence[tuple[Any, list[RequestRecord]]]) -> dict[str, float]:
    """The objective on each pairing unit of a configuration's bench runs so far."""
    from roofline.tune.objectives import measure

    lines = [ln for _, got in run for ln in got]
    return dict(measure(settings.objective, lines, settings.objective_settings).units)


def _stop_slower(
    settings: Any, items: Sequence[Item], runs: Sequence[Sequence[tuple[Any, list[RequestRecord]]]]
) -> set[int]:
    """The challengers (indices into items) clearly slower than the incumbent (items[0]) after
    the first round (`paired.clearly_worse`): they run no more rounds and cannot be kept."""
    if items[0].slot.kind != SlotKind.INCUMBENT:
        return set()
    maximize = settings.objective.direction == Direction.MAXIMIZE
    base, out = _units(settings, runs[0]), set()
    for k in range(1, len(items)):
        if runs[k] and base and clearly_worse(_units(settings, runs[k]), base, maximize):
            out.add(k)
    return out


@dataclasses.dataclass(frozen=True)
class Blocks:
    """How a worker runs blocks: whether configurations fit one (`fits`), and how a block is
    measured (`evaluate(items, baseline greedy outputs as JSON)`: run_block's answer)."""

    fits: Callable[[Sequence[dict[str, Any]]], bool]
    evaluate: Callable[[Sequence[Item], list[dict]], list[tuple[Any, list[Any] | None]]]
    folder: Callable[[int], Path]  # trial number -> its folder


def run_step_block(
    blocks: Blocks,
    w: Any,
    trial: Any,
    slot: Slot,
    on_start: Callable[[int, Slot, dict], None],
    on_result: Callable[[Any], None],
) -> int | None:
    """Run the ladder step of the claimed incumbent trial as one block: claim the step's other
    slots, measure, record each. The number of trials run; None (nothing claimed beyond `trial`)
    when the step cannot be one block, and the worker goes on slot by slot."""
    from roofline.tune import study as st
    from roofline.tune.trial import skipped
    from roofline.tune.worker import predicted_on, with_prediction

    v = st.view(w.study, exclude=trial.number, predict=w.predict)
    if any(u.round < slot.round or u.kind == SlotKind.BASELINE for u in v.unfinished):
        return None
    reference = st.baseline_outputs(w.study)
    decided = ladder_block(w.space, slot, v, w.rule) if reference is not None else []
    runs = [d.config for _, d in decided if d.action == Action.RUN]
    if len(runs) < 2 or not blocks.fits(runs):
        return None
    by_value = {s.value: d for s, d in decided[1:]}
    values = list(w.space.dimension(slot.knob).values())
    current = ladder_current(w.space, v.results, w.rule, slot.round)
    claimed = st.claim_step(w.study, slot.round)
    members = [(trial, slot, decided[0][1])]
    other = Decision(Action.SKIP, reason=f"not a value of step {slot.round}")
    members += [(t, s, by_value.get(s.value, other)) for t, s in claimed]
    done: set[int] = set()
    items: list[tuple[Any, Item]] = []
    try:
        for t, s, d in members:
            if d.action == Action.SKIP:
                result = skipped(t.number, s, d.reason, w.objective)
                st.record(w.study, t, result, w.rule)
                done.add(t.number)
                on_result(result)
                continue
            t.set_user_attr("config", dict(d.config))
            on_start(t.number, s, dict(d.config))
            rank = values.index(s.value) if s.kind == SlotKind.LADDER and s.value in values else -1
            p = predicted_on(w, dict(d.config), current, v.results)
            folder = blocks.folder(t.number)
            items.append((t, Item(t.number, s, dict(d.config), folder, rank, p)))
        results = blocks.evaluate([i for _, i in items], reference)
    except BaseException as e:  # Ctrl-C: the step's slots go back in the queue
        for t, *_ in members:
            if t.number not in done:
                st.requeue(
                    w.study,
                    t.number,
                    "interrupted" if isinstance(e, KeyboardInterrupt) else str(e)[:200],
                )
        raise
    for (t, item), (result, outputs) in zip(items, results):
        # the prediction the block's close calls used, so the ladder picks from the same figures
        # (a later engine's verify costs move the replayed ratios by a few percent)
        predicted = item.predicted if item.rank >= 0 else None
        result = (
            dataclasses.replace(result, predicted=predicted)
            if predicted
            else with_prediction(w, result, v.results)
        )
        st.record(w.study, t, result, w.rule, outputs)
        on_result(result)
    return len(items)
