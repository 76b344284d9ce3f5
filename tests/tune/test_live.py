"""Live knobs: a trial that differs from the running server only in knobs its launcher takes per
request runs on that server (no launch); other knobs relaunch; the exactness verdicts are those of
relaunched trials; and no engine outlives the study."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tune_helpers import FAKE, FakeLauncher, marker, tune_options, wait_gone, write_space

from roofline.bench.engines.launchers import EMBEDDED
from roofline.speculation import SERVER_ONLY, options
from roofline.tune.space import load_space_file
from roofline.tune.tuner import Display, run_tune

# every command line LiveFake made, (port, configuration): a server's start is the first on its
# port; later ones on the same port are trials' commands (the whole configuration as flags)
STARTS: list[tuple[int, dict]] = []


def _started() -> list[dict]:
    first: dict[int, dict] = {}
    for port, config in STARTS:
        first.setdefault(port, config)
    return list(first.values())


@dataclass(frozen=True)
class LiveFake(FakeLauncher):
    """fake_engine.py taking `shift` per request (the `fake_live` field)."""

    def argv(self, *, model, port, host, config, extra_args=(), template=None) -> list[str]:
        STARTS.append((port, dict(config)))
        return super().argv(model=model, port=port, host=host, config=config, extra_args=extra_args)

    def live_body(self, config: Mapping[str, Any]) -> dict[str, Any] | None:
        return {"fake_live": {k: config[k] for k in self.live_knobs if k in config}}


LIVE = LiveFake(name="livefake", knobs=FAKE.knobs, live_knobs=frozenset({"shift"}))

SPACE = """
[baseline]
speed = 100
[knobs.speed]
choices = [100, 150]
default = 100
[knobs.shift]
choices = [0, 5, 7]
default = 0
"""


def _tune(tmp_path, monkeypatch, launcher, name: str, body: str = SPACE):
    from roofline.bench import engines

    monkeypatch.setitem(engines.LAUNCHERS, launcher.name, launcher)
    space = load_space_file(write_space(tmp_path, body, f"{name}.toml"), launcher)
    mark = marker()
    opts = tune_options(space, mark, engine=launcher.name, reps=1, strategy="grid")
    STARTS.clear()
    result = run_tune(opts, tmp_path / name, Display())
    assert wait_gone(mark) == []  # the kept server too
    return result, _started()


def _verdicts(result) -> dict:
    return {
        tuple(sorted(r.config.items())): (r.status, r.exactness.first_position)
        for r in result.trials
        if r.exactness is not None
    }


def test_live_trials_run_on_the_running_server_with_relaunched_verdicts(tmp_path, monkeypatch):
    live, starts = _tune(tmp_path, monkeypatch, LIVE, "live")
    trials = [r for r in live.trials if r.status != "skipped"]
    assert len(trials) >= 6
    # a server is started only when the restart knobs change, and never with a live knob
    assert len(starts) == sum(r.launched for r in trials) < len(trials)
    assert all("shift" not in c for c in starts)
    for before, r in itertools.pairwise(trials):
        if not r.launched:
            assert r.config.get("speed") == before.config.get("speed")
            # its command runs the whole configuration: the live knob as a flag
            assert ("--shift" in r.argv) == ("shift" in r.config), r.argv
        assert r.live == {"fake_live": {"shift": r.config["shift"]}} or "shift" not in r.config
    relaunched, _ = _tune(tmp_path, monkeypatch, FAKE, "relaunched")
    assert all(r.launched and not r.live for r in relaunched.trials if r.status != "skipped")
    assert _verdicts(live) == _verdicts(relaunched)
    assert ("--shift" in live.best_command) == ("shift" in live.best.config)
    assert any(status == "inexact" for status, _ in _verdicts(live).values())


def test_a_live_trial_that_kills_the_server_fails_and_the_next_one_starts_again(
    tmp_path, monkeypatch
):
    """The running server dies in a live trial (`mode` crash_mid, per request): that trial is
    failed with the server's log tail, and the trial after a failed one starts a server of its
    own."""
    crashing = LiveFake(name="livefake", knobs=FAKE.knobs, live_knobs=frozenset({"shift", "mode"}))
    result, starts = _tune(tmp_path, monkeypatch, crashing, "crash", SPACE_CRASH)
    by = {(r.config.get("mode", "ok"), r.config.get("shift", 0)): r for r in result.trials}
    died = by[("crash_mid", 0)]
    assert died.status == "failed" and "segmentation fault" in (died.log_tail or "")
    assert not died.launched  # it ran on the baseline's server
    trials = [r for r in result.trials if r.status != "skipped"]
    for before, r in itertools.pairwise(trials):
        if before.status == "failed":
            assert r.launched
    assert all(r.status in ("ok", "inexact") for r in trials if r.config.get("mode") != "crash_mid")
    assert len(starts) == sum(r.launched for r in trials) >= 2


SPACE_CRASH = """
[baseline]
speed = 100
[knobs.mode]
choices = ["ok", "crash_mid"]
default = "ok"
[knobs.shift]
choices = [0, 5]
default = 0
"""


def test_the_embedded_engines_live_knobs_come_from_the_speculation_options():
    want = {o.knob for name, o in options().items() if name not in SERVER_ONLY}
    want |= {"threads", "kernels"}
    assert want == EMBEDDED.live_knobs
    assert "dtype" not in EMBEDDED.live_knobs and "max_batch" not in EMBEDDED.live_knobs
    body = EMBEDDED.live_body({"spec": "trie", "max_bfs_breadth": 24, "dtype": "int8"})
    assert body == {"roofline_speculation": {"method": "trie", "max_bfs_breadth": 24}}
    assert EMBEDDED.live_body({"dtype": "int8"}) == {}  # the server's own options
    body = EMBEDDED.live_body({"spec": "ngram", "threads": 1})
    assert body == {"roofline_speculation": {"method": "ngram"}, "roofline_threads": 1}
    assert EMBEDDED.live_body({"threads": 2, "dtype": "int8"}) == {"roofline_threads": 2}
    body = EMBEDDED.live_body({"kernels": "measured", "dtype": "stored"})
    assert body == {"roofline_kernels": "measured"}
    # a server of its own: drafts that learn across requests, a knob only the server takes
    assert EMBEDDED.live_body({"spec": "trie", "trie_scope": "shared"}) is None
    assert EMBEDDED.live_body({"spec": "draft", "draft_model": "m.gguf"}) is None


def test_a_launcher_without_live_knobs_has_no_live_body():
    assert FAKE.live_knobs == frozenset() and FAKE.live_body({"shift": 5}) is None


LADDER = """
[baseline]
speed = 100
[knobs.speed]
choices = [100, 400]
default = 100
[knobs.shift]
choices = [0, 5]
default = 0
"""


def test_a_ladder_step_of_live_values_runs_as_one_interleaved_paired_block(tmp_path, monkeypatch):
    """Each step's incumbent and values share the baseline's server; the bench runs alternate
    between them repetition by repetition; the ladder pairs their units and decides as ever."""
    from roofline.bench import engines

    both = LiveFake(name="livefake", knobs=FAKE.knobs, live_knobs=frozenset({"speed", "shift"}))
    monkeypatch.setitem(engines.LAUNCHERS, both.name, both)
    space = load_space_file(write_space(tmp_path, LADDER, "ladder.toml"), both)
    mark = marker()
    STARTS.clear()
    opts = tune_options(space, mark, engine=both.name, reps=2)
    result = run_tune(opts, tmp_path / "run", Display())
    assert wait_gone(mark) == []
    assert len(_started()) == 1  # the baseline's server, for every trial
    by = {(r.slot.kind, r.slot.round): r for r in result.trials}
    assert all(r.status != "skipped" for r in result.trials)  # the incumbent runs in its block
    inc1, fast = by[("incumbent", 1)], by[("ladder", 1)]
    assert inc1.config == {"speed": 100} and fast.config == {"speed": 400}
    assert not inc1.launched and not fast.launched
    # each trial's command runs its own configuration (the block's server was started with less)
    assert "400" in fast.argv and "400" not in inc1.argv
    assert ("400" in result.best_command) == (result.best.config.get("speed") == 400)
    step1, step2 = result.ladder
    assert step1.remeasured == inc1.number and step1.kept and step1.best_value == 400
    assert step1.paired.pairs == 8  # 4 prompts x 2 reps
    assert not step2.kept and by[("ladder", 2)].status == "inexact"
    assert result.best.number == fast.number
    # the measured requests alternate repetition by repetition: the incumbent's prompts, then the
    # value's (a run of equal labels may join a step's last run and the next step's first)
    log = (tmp_path / "run" / "trials" / "000" / "server.log").read_text().splitlines()
    streamed = [ln.split(" ", 1)[1] for ln in log if ln.startswith("stream ")]
    labels = [json.loads(k) for k, _ in itertools.groupby(streamed)]
    s100, s400, shift = {"speed": 100}, {"speed": 400}, {"speed": 400, "shift": 5}
    # baseline and step 1's first incumbent run, then step 1, then step 2, whose inexact value
    # (its first round is its greedy pass) runs no second round
    assert labels == [s100, s400, s100, s400, shift, s400]
    assert by[("ladder", 2)].pruned_after == 1 and by[("incumbent", 2)].pruned_after == 0


@dataclass(frozen=True)
class LearningLiveFake(LiveFake):
    """Its requests teach it speed, as drafts' acceptance statistics do: a warm-up comes first."""

    def learns_speed(self, config) -> bool:
        return True


def test_a_configuration_the_server_ran_before_needs_no_warm_up_pass(tmp_path, monkeypatch):
    """On a server that learns, a greedy pass warms up each configuration new to it; the
    incumbent measured again in the next step's block (the same requests on the same server)
    takes its greedy outputs from its first round instead."""
    from roofline.bench import engines

    both = LearningLiveFake(
        name="learnfake",
        knobs=FAKE.knobs,
        live_knobs=frozenset({"speed", "shift"}),
        stream_token_ids=True,
    )
    monkeypatch.setitem(engines.LAUNCHERS, both.name, both)
    space = load_space_file(write_space(tmp_path, LADDER, "ladder.toml"), both)
    mark = marker()
    result = run_tune(tune_options(space, mark, engine=both.name), tmp_path / "run", Display())
    assert wait_gone(mark) == []
    by = {(r.slot.kind, r.slot.round): r for r in result.trials}
    assert by[("ladder", 2)].status == "inexact" and result.best.config == {"speed": 400}
    log = (tmp_path / "run" / "trials" / "000" / "server.log").read_text().splitlines()
    whole = [json.loads(ln.split(" ", 1)[1]) for ln in log if ln.startswith("whole ")]
    passes = [k for k, _ in itertools.groupby(whole)]
    # the baseline, step 1's value, step 2's value: 4 prompts each; not the incumbents again
    assert passes == [{"speed": 100}, {"speed": 400}, {"speed": 400, "shift": 5}]
    assert len(whole) == 12


def test_a_value_clearly_slower_after_the_first_round_runs_no_more_rounds(tmp_path, monkeypatch):
    """In a paired block a value 4x slower than the incumbent on every prompt of the first round
    stops there (pruned, never kept); the incumbent runs every round."""
    from roofline.bench import engines

    live = LiveFake(name="livefake", knobs=FAKE.knobs, live_knobs=frozenset({"speed"}))
    monkeypatch.setitem(engines.LAUNCHERS, live.name, live)
    body = "[baseline]\nspeed = 400\n[knobs.speed]\nchoices = [400, 100, 800]\ndefault = 400\n"
    space = load_space_file(write_space(tmp_path, body, "slow.toml"), live)
    mark = marker()
    opts = tune_options(space, mark, engine=live.name, reps=3)
    result = run_tune(opts, tmp_path / "run", Display())
    assert wait_gone(mark) == []
    by = {r.config.get("speed"): r for r in result.trials if r.slot.kind == "ladder"}
    slow, fast = by[100], by[800]
    again = next(r for r in result.trials if r.slot.kind == "incumbent")

    def runs(r) -> list[str]:
        return sorted(p.name for p in (tmp_path / "run" / r.folder).glob("bench-*"))

    assert slow.pruned_after == 1 and runs(slow) == ["bench-0"] and len(slow.rep_values) == 1
    assert fast.pruned_after == 0 and runs(fast) == ["bench-0", "bench-1", "bench-2"]
    assert again.pruned_after == 0 and runs(again) == ["bench-0", "bench-1", "bench-2"]
    (step,) = result.ladder
    assert step.kept and result.best.number == fast.number


def _fake_runs(units_by_k):
    """Block runs whose lines are the units themselves (for a patched `block._units`)."""
    return [[(None, [u])] for u in units_by_k]


def _units(gain: float, noise: float, seed: int, reps: int = 3) -> dict[str, float]:
    import random

    rng = random.Random(seed)
    return {
        f"{p}#{r}": 100.0 * gain * (1 + noise * (2 * rng.random() - 1))
        for p in "abcd"
        for r in range(reps)
    }


def _close_call_of(monkeypatch, gains, noise, seed, predicted=None):
    from types import SimpleNamespace

    from roofline.tune import block
    from roofline.tune.slots import Slot

    monkeypatch.setattr(block, "_units", lambda settings, run: dict(run[0][1][0]))
    settings = SimpleNamespace(reps=3, objective=SimpleNamespace(direction="maximize"))
    items = [block.Item(10, Slot("incumbent", 2, "spec"), {}, None)]
    items += [
        block.Item(11 + i, Slot("ladder", 2, "spec", v), {}, None, i, (predicted or {}).get(v))
        for i, v in enumerate(gains)
    ]
    units = [_units(1.0, noise, seed)] + [
        _units(g, noise, seed + 1 + i) for i, g in enumerate(gains.values())
    ]
    return block._close_call(settings, items, _fake_runs(units), list(range(len(items))))


def test_two_values_too_close_to_call_get_more_rounds_and_clear_ones_do_not(monkeypatch):
    # ngram and trie both beat the incumbent; trie by 2.3% more, 3% noise per request: the
    # interval of trie against ngram straddles 1.02 -> the two run more rounds
    close = [_close_call_of(monkeypatch, {"ngram": 1.30, "trie": 1.33}, 0.03, s) for s in range(5)]
    assert close.count((1, 2)) >= 4
    # trie 20% ahead of ngram: decided; equal with 0.2% noise: a tie beyond doubt; a value that
    # does not beat the incumbent cannot be in a close call
    assert _close_call_of(monkeypatch, {"ngram": 1.30, "trie": 1.56}, 0.03, 0) is None
    assert _close_call_of(monkeypatch, {"ngram": 1.30, "trie": 1.30}, 0.002, 0) is None
    assert _close_call_of(monkeypatch, {"ngram": 1.0, "trie": 1.33}, 0.03, 0) is None
    # replay predicts trie 12% faster: it is kept whether ngram counts as tied or not
    predicted = {"ngram": 1.20, "trie": 1.34}
    assert _close_call_of(monkeypatch, {"ngram": 1.30, "trie": 1.33}, 0.03, 1, predicted) is None
    # ... within 10%: replay ties them whatever more rounds measure; the simpler is kept
    predicted = {"ngram": 1.25, "trie": 1.34}
    assert _close_call_of(monkeypatch, {"ngram": 1.30, "trie": 1.33}, 0.03, 1, predicted) is None
    # replay predicts the simpler 12% faster, trie is measured faster: tied, ngram would be kept;
    # not, trie -> the call is open
    predicted = {"ngram": 1.46, "trie": 1.30}
    assert _close_call_of(monkeypatch, {"ngram": 1.30, "trie": 1.33}, 0.03, 1, predicted) == (1, 2)
    # the faster-measured value listed first: nothing simpler to hold it against
    assert _close_call_of(monkeypatch, {"trie": 1.33, "ngram": 1.30}, 0.03, 0) is None


def test_a_close_call_runs_its_two_values_more_rounds_and_the_ladder_pairs_them(
    tmp_path, monkeypatch
):
    """Rounds after the block's: the two values only, in bench-<rep> folders numbered on."""
    from roofline.bench import engines
    from roofline.tune import block

    live = LiveFake(name="livefake", knobs=FAKE.knobs, live_knobs=frozenset({"speed"}))
    monkeypatch.setitem(engines.LAUNCHERS, live.name, live)
    body = "[baseline]\nspeed = 100\n[knobs.speed]\nchoices = [100, 300, 320]\ndefault = 100\n"
    space = load_space_file(write_space(tmp_path, body, "close.toml"), live)
    calls = []

    def twice(settings, items, runs, active):
        calls.append(len(runs[1]))
        return (1, 2) if len(calls) <= 2 else None

    monkeypatch.setattr(block, "_close_call", twice)
    mark = marker()
    result = run_tune(
        tune_options(space, mark, engine=live.name, reps=2), tmp_path / "run", Display()
    )
    assert wait_gone(mark) == []
    by = {r.config.get("speed"): r for r in result.trials if r.slot.kind == "ladder"}
    again = next(r for r in result.trials if r.slot.kind == "incumbent")

    def runs(r) -> list[str]:
        return sorted(p.name for p in (tmp_path / "run" / r.folder).glob("bench-*"))

    assert calls == [2, 3, 4]  # asked after the block's rounds and after each extra one
    assert runs(again) == ["bench-0", "bench-1"]
    assert runs(by[300]) == runs(by[320]) == ["bench-0", "bench-1", "bench-2", "bench-3"]
    assert len(by[300].units) == 16 and len(again.units) == 8  # 4 prompts x 4 and x 2 rounds
    (step,) = result.ladder
    assert step.kept and step.paired.pairs == 8  # against the incumbent: the rounds it ran


class TwoFigures:
    """A predictor whose figure before a block (on the current best's costs) differs from the one
    after it (on the trial's own engine's), as two engines' measured verify costs do."""

    def __init__(self, run_dir, max_tokens=None, model=None):
        pass

    def __call__(self, config, current, results):
        return None

    def speedup_on(self, config, on, results):
        return {300: 1.30, 320: 1.34}.get(config.get("speed"))

    def speedup(self, result, results):
        return {300: 1.34, 320: 1.30}.get(result.config.get("speed"))


def test_a_blocks_values_keep_the_predictions_its_close_calls_used(tmp_path, monkeypatch):
    """The ladder breaks ties on the figures the block decided its extra rounds by, not on ones
    re-made after it from another engine's costs (they would send the rounds to the wrong pair)."""
    from roofline.bench import engines
    from roofline.tune import predict_step

    live = LiveFake(name="livefake", knobs=FAKE.knobs, live_knobs=frozenset({"speed"}))
    monkeypatch.setitem(engines.LAUNCHERS, live.name, live)
    monkeypatch.setattr(predict_step, "StepPredictor", TwoFigures)
    body = "[baseline]\nspeed = 100\n[knobs.speed]\nchoices = [100, 300, 320]\ndefault = 100\n"
    space = load_space_file(write_space(tmp_path, body, "two.toml"), live)
    mark = marker()
    result = run_tune(
        tune_options(space, mark, engine=live.name, reps=2), tmp_path / "run", Display()
    )
    assert wait_gone(mark) == []
    by = {r.config.get("speed"): r for r in result.trials if r.slot.kind == "ladder"}
    assert by[300].predicted == 1.30 and by[320].predicted == 1.34
