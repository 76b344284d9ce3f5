"""The strategies on a fake objective (a pure function of the configuration, no engine), through the
same study and worker loop the real tuner uses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roofline.bench.engines.base import Knob, Launcher, knob_table
from roofline.tune import study as st
from roofline.tune import worker as wk
from roofline.tune.ladder import ladder_plan, ladder_steps
from roofline.tune.search import STRATEGIES, grid_configs, grid_plan
from roofline.tune.slots import Rule
from roofline.tune.space import parse_space
from roofline.tune.trial_result import TrialResult

LAUNCHER = Launcher(
    "fake",
    knob_table(
        Knob("dtype", "choice", ("fp32", "bf16")),
        Knob("spec", "choice", ("none", "ngram", "trie")),
        Knob("breadth", "int", minimum=1),
        Knob("depth", "int", minimum=1),
        Knob("threads", "int", minimum=1),
    ),
)


def synthetic_space(name: str, breadth_step: int, depth_step: int):
    return parse_space(
        f"""
source = "test"
date = "2026-12-02"
[knobs.dtype]
choices = ["fp32", "bf16"]
default = "fp32"
[knobs.spec]
choices = ["none", "ngram", "trie"]
default = "none"
[knobs.breadth]
low = 2
high = 48
step = {breadth_step}
default = 10
unless = {{ spec = "none" }}
[knobs.depth]
low = 4
high = 32
step = {depth_step}
default = 16
unless = {{ spec = "none" }}
[knobs.threads]
choices = [1, 2]
default = 2
""",
        LAUNCHER,
        name=name,
    )


SPACE = synthetic_space("synthetic", 2, 4)
# the same knobs, coarser: a grid of 196 points instead of 772, for the tests that run the whole
# grid
COARSE = synthetic_space("coarse", 8, 8)


class Out:
    """A greedy output stand-in (the worker stores the baseline's for the exactness gate)."""

    def to_json(self) -> dict:
        return {"prompt_id": "p", "text": "x", "token_ids": [1]}


def landscape(config: dict) -> float:
    """tok/s: speculation pays with a sharp peak at breadth 24 (like the B200 study's sweep), depth
    helps a little near 16, bf16 a bit; trie beats ngram."""
    c = SPACE.effective(config)
    v = 100.0 * (1.15 if c["dtype"] == "bf16" else 1.0) * (0.97 if c["threads"] == 1 else 1.0)
    if c["spec"] != "none":
        peak = math.exp(-(((c["breadth"] - 24) / 9) ** 2))
        v *= (1.0 + (1.8 if c["spec"] == "trie" else 1.3) * peak) * (
            1 + 0.1 * math.exp(-(((c["depth"] - 16) / 8) ** 2))
        )
    return v


def evaluate_with(fn, spread: float = 1.0, inexact=lambda c: False, units=None):
    """A trial's result from fn(config); units(config, number) gives its pairing units (none: the
    ladder falls back to the spread rule)."""

    def evaluate(number, slot, config, reference, report=None):
        status = "inexact" if inexact(config) else "ok"
        return TrialResult(
            number,
            slot,
            config,
            status,
            value=fn(config),
            spread=spread,
            rep_values=(fn(config) - spread / 2, fn(config) + spread / 2),
            units={} if units is None else units(config, number),
        ), [Out()]

    return evaluate


def run(strategy: str, evaluate, *, budget=None, seed=1, rule=None, space=SPACE, predict=None):
    import optuna

    s, rule = STRATEGIES[strategy], rule or Rule()
    study, created = st.open_study(
        optuna.storages.InMemoryStorage(), "t", s, space, {"engine": "fake"}, rule.direction, seed
    )
    assert created
    ran = wk.run_worker(wk.Worker(study, s, space, rule, budget=budget, predict=predict), evaluate)
    return study, st.results(study), ran


def test_ladder_climbs_one_knob_at_a_time_and_keeps_only_gains_beyond_the_spread():
    _, results, ran = run("ladder", evaluate_with(landscape, spread=5.0))
    baseline, steps = ladder_steps(SPACE, results, Rule())
    assert baseline.config == {} and baseline.value == pytest.approx(100.0)
    kept = {s.knob: s.kept.config.get(s.knob) for s in steps if s.kept}
    # bf16 (+15 > spread 5) is kept; then trie at the default breadth 10 (x1.16) is kept;
    # breadth 24 then climbs the peak; depth 16 is the default; threads=1 loses
    assert kept == {"dtype": "bf16", "spec": "trie", "breadth": 24}
    assert [s.knob for s in steps] == ["dtype", "spec", "breadth", "depth", "threads"]
    best = Rule().best(results)
    assert best.config == {"dtype": "bf16", "spec": "trie", "breadth": 24}
    # every step's values ran once: 1 + 2 (spec) + 23 (breadth) + 7 (depth) + 1 (threads) +
    # baseline, and the incumbent again where the trial before its step was not it
    again = [r for r in results if r.slot.kind == "incumbent" and r.status == "ok"]
    assert ran == len(results) - sum(r.status == "skipped" for r in results)
    assert ran == 1 + 1 + 2 + 23 + 7 + 1 + len(again)
    for r in again:
        step = next(s for s in steps if s.round == r.slot.round)
        assert step.remeasured is r and r.config == step.before.config
        assert r.number == min(t.number for t in step.tried) - 1  # right before its challengers
    # spec follows bf16's own trial and breadth follows trie's: nothing to measure again there
    assert {r.slot.knob for r in again} == {"depth", "threads"}
    configs = [tuple(sorted(r.config.items())) for r in results if r.slot.kind != "incumbent"]
    assert len(configs) == len(set(configs))


def test_the_ladder_measures_only_the_proposer_values_replay_predicts_faster():
    # a perfect replay: the landscape's own ratio between two settings of one proposer
    def predict(config, current, results):
        c, b = SPACE.effective(config), SPACE.effective(current.config)
        same = all(c[k] == b[k] for k in ("dtype", "threads", "spec"))
        return (
            landscape(config) / landscape(current.config) if same and c["spec"] != "none" else None
        )

    _, results, ran = run("ladder", evaluate_with(landscape, spread=5.0), predict=predict)
    _, steps = ladder_steps(SPACE, results, Rule())
    kept = {s.knob: s.kept.config.get(s.knob) for s in steps if s.kept}
    assert kept == {"dtype": "bf16", "spec": "trie", "breadth": 24}  # as when all are measured
    skipped = [r for r in results if r.status == "skipped" and "predicted" in (r.error or "")]
    measured = [r for r in results if r.slot.kind == "ladder" and r.status == "ok"]
    assert {r.slot.knob for r in skipped} == {"breadth", "depth"}
    # breadth: the values predicted 2% or more above breadth 10 ran, the others did not
    breadth = sorted(r.config["breadth"] for r in measured if r.slot.knob == "breadth")
    best = {"dtype": "bf16", "spec": "trie"}

    def gain(b):
        return landscape({**best, "breadth": b}) / landscape(best)

    assert breadth == [b for b in range(2, 50, 2) if gain(b) >= 1.02]
    assert 0 < len(breadth) < 23
    assert ran < 1 + 1 + 2 + 23 + 7 + 1  # the whole ladder without predictions, incumbents aside
    # depth 16 is trie's default and the best: no value predicted faster, the step not measured
    assert not [r for r in measured if r.slot.knob == "depth"]
    assert all(r.status == "skipped" for r in results if r.slot.knob == "depth")


def test_a_gain_within_the_spread_is_not_kept():
    flat = evaluate_with(
        lambda c: 100.0 + (3.0 if SPACE.effective(c)["dtype"] == "bf16" else 0.0), spread=5.0
    )
    _, results, _ = run("ladder", flat)
    _, steps = ladder_steps(SPACE, results, Rule())
    assert steps[0].knob == "dtype" and steps[0].kept is None and "within spread" in steps[0].note
    # still the fastest measured, but not climbed
    assert Rule().best(results).value == pytest.approx(103.0)


def paired_units(gain_of, noise: float):
    """Pairing units of 4 prompts x 2 reps: prompts of very different speeds (50-120 tok/s), times
    the configuration's gain, times a per-request noise of +-noise (seeded by the trial)."""
    import random

    def units(config, number):
        rng = random.Random(number)
        speeds = {"a": 50.0, "b": 80.0, "c": 120.0, "d": 65.0}
        return {
            f"{p}#{rep}": base * gain_of(config) * (1 + noise * (2 * rng.random() - 1))
            for p, base in speeds.items()
            for rep in range(2)
        }

    return units


def test_a_paired_gain_beyond_noise_is_kept_though_the_spread_is_larger():
    # bf16 is 5% faster on every request; the spread across repetitions (30 tok/s) is far larger
    # than the gain (5 tok/s), so the spread rule would keep nothing; paired by request, the
    # prompts' different speeds cancel and 1% noise leaves a narrow interval around 1.05
    def gain_of(config):
        return 1.05 if SPACE.effective(config)["dtype"] == "bf16" else 1.0

    _, results, _ = run(
        "ladder",
        evaluate_with(lambda c: 100.0 * gain_of(c), spread=30.0, units=paired_units(gain_of, 0.01)),
    )
    _, steps = ladder_steps(SPACE, results, Rule())
    dtype = steps[0]
    assert dtype.paired is not None and dtype.paired.pairs == 8
    assert dtype.paired.low <= dtype.paired.ratio <= dtype.paired.high
    assert dtype.paired.low > 1.03 and dtype.paired.high < 1.07
    assert dtype.kept is not None and dtype.kept.config.get("dtype") == "bf16"
    assert "kept dtype=bf16" in dtype.note


def test_a_tie_keeps_the_simpler_configuration():
    # no knob changes anything; per-request noise of 20% and no drift pattern: every step a tie
    def gain_of(config):
        return 1.0

    import random

    def units(config, number):
        rng = random.Random(number)
        noisy = {f"{p}#{rep}": 1 + 0.2 * (2 * rng.random() - 1) for p in "abcd" for rep in (0, 1)}
        return {k: 100.0 * v for k, v in noisy.items()}

    _, results, _ = run("ladder", evaluate_with(lambda c: 100.0, spread=1.0, units=units))
    _, steps = ladder_steps(SPACE, results, Rule())
    assert steps and all(s.paired is not None for s in steps)
    ties = [s for s in steps if s.paired.verdict == "tie"]
    assert ties and all(s.kept is None and "tie (within noise)" in s.note for s in ties)
    assert all(s.kept is None for s in steps if s.paired.verdict != "better")


def test_values_that_tie_with_each_other_keep_the_first_listed_whatever_the_noise():
    # ngram and trie are both 30% faster than no proposer; 2% noise per request decides which
    # measures faster. Each run keeps ngram (listed first), with the tie named in the note where
    # trie measured faster; a trie that is really 20% faster than ngram is kept
    notes = []
    for seed in range(5):
        for trie_gain, want in ((1.3, "ngram"), (1.56, "trie")):

            def gain_of(config, trie_gain=trie_gain):
                gains = {"none": 1.0, "ngram": 1.3, "trie": trie_gain}
                return gains[SPACE.effective(config)["spec"]]

            def units(config, number, seed=seed, gain_of=gain_of):
                return paired_units(gain_of, 0.02)(config, number + 100 * seed)

            ev = evaluate_with(lambda c, g=gain_of: 100.0 * g(c), units=units)
            _, results, _ = run("ladder", ev)
            _, steps = ladder_steps(SPACE, results, Rule())
            spec = next(s for s in steps if s.knob == "spec")
            assert spec.kept is not None and spec.kept.config["spec"] == want, spec.note
            notes.append(spec.note)
    assert any("trie against spec=ngram" in n and "the simpler kept" in n for n in notes)


class Replay:
    """A predictor whose replayed speed-ups are given per proposer (nothing to skip)."""

    def __init__(self, by_spec):
        self.by_spec = by_spec

    def __call__(self, config, current, results):
        return None

    def speedup(self, result, results):
        return self.by_spec.get(SPACE.effective(result.config)["spec"])


def _spec_step(gain_of, seed: int, by_spec: dict):
    """The ladder's spec step over a landscape of gains (2% noise per request, seeded) with replay
    predicting `by_spec` per proposer."""

    def units(config, number):
        return paired_units(gain_of, 0.02)(config, number + 100 * seed)

    ev = evaluate_with(lambda c: 100.0 * gain_of(c), units=units)
    _, results, _ = run("ladder", ev, predict=Replay(by_spec))
    _, steps = ladder_steps(SPACE, results, Rule())
    return next(s for s in steps if s.knob == "spec")


def test_values_measurement_cannot_tell_apart_are_decided_by_replay_then_by_the_space():
    # ngram and trie measure the same 30% gain (2% noise: a tie every seed); replay predicts trie
    # 12% faster -> trie each time; replay within 10% -> the space's order, ngram
    def gain_of(config):
        return 1.3 if SPACE.effective(config)["spec"] != "none" else 1.0

    for seed in range(4):
        for by_spec, want in (
            ({"ngram": 1.22, "trie": 1.37}, "trie"),
            ({"ngram": 1.28, "trie": 1.37}, "ngram"),
        ):
            spec = _spec_step(gain_of, seed, by_spec)
            assert spec.kept is not None and spec.kept.config["spec"] == want, spec.note
            assert spec.kept.predicted == by_spec[want]
            if want == "trie":
                assert "replay predicts ngram 1.22x, trie 1.37x" in spec.note


def test_a_measured_gap_between_values_replay_prices_the_same_is_a_tie():
    # trie measures 20% faster than ngram (2% noise: beyond noise every seed). Replay counts the
    # same passes for both (within 10%): the gap is the requests' noise, ngram (listed first) is
    # kept and the note says why; replay 12% apart: the measurement decides, trie
    def gain_of(config):
        return {"none": 1.0, "ngram": 1.3, "trie": 1.56}[SPACE.effective(config)["spec"]]

    for seed in range(4):
        for by_spec, want in (
            ({"ngram": 1.28, "trie": 1.37}, "ngram"),
            ({"ngram": 1.22, "trie": 1.37}, "trie"),
        ):
            spec = _spec_step(gain_of, seed, by_spec)
            assert spec.kept is not None and spec.kept.config["spec"] == want, spec.note
            if want == "ngram":
                assert "but replay predicts 1.37x and 1.28x: a tie" in spec.note


def test_ladder_skips_knobs_whose_condition_does_not_hold():
    no_spec = evaluate_with(lambda c: 50.0 if SPACE.effective(c)["spec"] != "none" else 100.0)
    _, results, ran = run("ladder", no_spec)
    skipped = [r for r in results if r.status == "skipped" and r.slot.kind == "ladder"]
    assert {r.slot.knob for r in skipped} == {"breadth", "depth"}
    assert all("inactive" in r.error for r in skipped)
    # their steps measure no incumbent either; dtype's follows the baseline's own trial
    idle = {r.slot.knob: r.error for r in results if r.slot.kind == "incumbent" and r.value is None}
    assert "no value of breadth runs" in idle["breadth"] and "no value of depth" in idle["depth"]
    assert "measured just before" in idle["dtype"]
    again = [r for r in results if r.slot.kind == "incumbent" and r.status == "ok"]
    assert ran == 1 + 1 + 2 + 1 + len(again)  # baseline, dtype, spec x2, threads (+ incumbents)
    assert len(skipped) + len(idle) == len(ladder_plan(SPACE)) - 5 - len(again)


def test_inexact_configurations_are_never_best_unless_allowed():
    fast_but_wrong = evaluate_with(
        landscape, inexact=lambda c: SPACE.effective(c)["dtype"] == "bf16"
    )
    _, results, _ = run("ladder", fast_but_wrong)
    assert any(r.status == "inexact" for r in results)
    best = Rule().best(results)
    assert best.status == "ok" and SPACE.effective(best.config)["dtype"] == "fp32"
    _, results, _ = run("ladder", fast_but_wrong, rule=Rule(allow_inexact=True))
    assert Rule(allow_inexact=True).best(results).status == "inexact"


def test_grid_runs_every_combination_once():
    # conditions: spec none has no breadth/depth
    assert len(grid_configs(SPACE)) == 2 * 2 * (1 + 2 * 24 * 8)
    configs = grid_configs(COARSE)
    assert len(configs) == 2 * 2 * (1 + 2 * 6 * 4)
    _, results, ran = run("grid", evaluate_with(landscape), space=COARSE)
    assert ran == len(grid_plan(COARSE)) == len(configs)  # the baseline is one of the grid's points
    assert len({tuple(sorted(COARSE.effective(r.config).items())) for r in results}) == ran
    best = Rule().best(results)
    assert best.value == pytest.approx(max(landscape(c) for c in configs))


def test_budget_stops_the_plan_and_the_rest_waits():
    study, _, ran = run("grid", evaluate_with(landscape), budget=5, space=COARSE)
    assert ran == 5
    from optuna.trial import TrialState

    assert len(study.get_trials(states=(TrialState.WAITING,))) == len(grid_plan(COARSE)) - 5


def test_tpe_reaches_within_10_percent_of_the_grid_best_in_a_third_of_its_trials():
    grid_best = max(landscape(c) for c in grid_configs(SPACE))
    budget = len(grid_plan(SPACE)) // 3
    _, results, ran = run("tpe", evaluate_with(landscape), budget=budget, seed=7)
    assert ran == budget
    tpe_best = Rule().best(results).value
    assert tpe_best >= 0.9 * grid_best, (tpe_best, grid_best)


def test_minimize_picks_the_smallest():
    _, results, _ = run(
        "grid", evaluate_with(lambda c: 1000.0 / landscape(c)), rule=Rule("minimize"), space=COARSE
    )
    best = Rule("minimize").best(results)
    assert best.value == pytest.approx(min(1000.0 / landscape(c) for c in grid_configs(COARSE)))


def test_a_failed_baseline_stops_the_study():
    def evaluate(number, slot, config, reference, report=None):
        return TrialResult(number, slot, config, "failed", error="engine crashed"), None

    with pytest.raises(wk.BaselineFailed, match="engine crashed"):
        run("ladder", evaluate)


def test_interrupted_trial_is_failed_and_its_slot_queued_again():
    import optuna

    calls = []

    def evaluate(number, slot, config, reference, report=None):
        calls.append(number)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return evaluate_with(landscape)(number, slot, config, reference, report)

    s = STRATEGIES["grid"]
    small = parse_space(
        'source = "t"\ndate = "d"\n[knobs.dtype]\nchoices = ["fp32", "bf16"]\ndefault = "fp32"\n'
        "[knobs.threads]\nchoices = [1, 2]\ndefault = 2\n",
        LAUNCHER,
    )
    study, _ = st.open_study(optuna.storages.InMemoryStorage(), "t", s, small, {}, "maximize", 0)
    w = wk.Worker(study, s, small, Rule())
    with pytest.raises(KeyboardInterrupt):
        wk.run_worker(w, evaluate)
    interrupted = [t for t in study.get_trials() if "interrupted" in t.user_attrs]
    assert len(interrupted) == 1 and interrupted[0].state.name == "FAIL"
    wk.run_worker(w, evaluate)
    done = [r for r in st.results(study) if r.status == "ok"]
    # each point once, the interrupted one re-run
    assert sorted(str(sorted(small.effective(r.config).items())) for r in done) == sorted(
        str(sorted(small.effective(c).items())) for c in grid_configs(small)
    )


def test_tpe_prunes_trials_losing_after_their_first_repetition():
    """Each trial reports its first repetition; one below the lower quartile of the finished
    trials' is stopped there: PRUNED in Optuna, marked in its result, and never the best."""
    import optuna

    def noisy(number: int) -> float:  # the landscape TPE cannot learn: values by trial number
        return 100.0 + (number * 37) % 50

    told: list[tuple[int, bool]] = []

    def evaluate(number, slot, config, reference, report=None):
        value = noisy(number)
        stop = report is not None and report(0, value)
        told.append((number, stop))
        return TrialResult(
            number,
            slot,
            config,
            "ok",
            value=value,
            spread=1.0,
            rep_values=(value,) if stop else (value, value),
            pruned_after=1 if stop else 0,
        ), [Out()]

    study, results, _ = run("tpe", evaluate, budget=14)
    pruned = [r for r in results if r.pruned_after]
    assert pruned and len(pruned) < len(results) - 4
    assert told[0] == (0, False)  # the baseline reports nothing
    states = {t.number: t.state for t in study.get_trials()}
    assert all(states[r.number] == optuna.trial.TrialState.PRUNED for r in pruned)
    for r in pruned:  # below the lower quartile (numpy's) of the trials finished before it
        earlier = [
            x.value for x in results if x.number < r.number and x.number and not x.pruned_after
        ]
        assert len(earlier) >= 3 and r.value < float(np.percentile(earlier, 25))
    kept = [r for r in results[1:] if not r.pruned_after and r.number > 4]
    assert kept  # a value above the quartile runs on
    best = Rule().best(results)
    assert not best.pruned_after
    assert best.value == max(r.value for r in results if not r.pruned_after)
