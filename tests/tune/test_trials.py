"""Trials against fake engine commands: crashes, hangs, garbage and inexact answers are recorded with
their reasons and log tails, the study goes on, and no engine process is left behind."""

from __future__ import annotations

import json

import pytest
from tune_helpers import FAKE, marker, register_fake, wait_gone, write_space

from roofline.tune.result import TuneResult
from roofline.tune.space import load_space_file
from roofline.tune.tuner import RESULT, TRIALS, Display, TuneOptions, run_tune


def options(space, mark: str, **kw) -> TuneOptions:
    kw.setdefault("reps", 2)
    return TuneOptions(engine="fake", space=space.to_json(), max_tokens=12, extra_args=(mark,), ready_timeout_s=3,
                       request_timeout_s=5, stop_grace_s=1, **kw)


def by_mode(result: TuneResult) -> dict:
    return {r.config.get("mode", "ok"): r for r in result.trials}


def test_crash_hang_garbage_fail_with_log_tails_and_the_study_goes_on(tmp_path, monkeypatch):
    register_fake(monkeypatch)
    space = load_space_file(write_space(tmp_path, """
[baseline]
speed = 400
[knobs.mode]
choices = ["ok", "crash", "crash_mid", "hang", "garbage", "ignore_term"]
default = "ok"
"""), FAKE)
    mark = marker()
    result = run_tune(options(space, mark), tmp_path / "run", Display())
    trials = by_mode(result)
    assert set(trials) == {"ok", "crash", "crash_mid", "hang", "garbage", "ignore_term"}
    assert trials["ok"].status == "ok" and trials["ok"].value > 0 and trials["ok"].slot.kind == "baseline"
    crash = trials["crash"]
    assert crash.status == "failed" and "code 3" in crash.error and "out of memory" in crash.log_tail
    assert trials["crash_mid"].status == "failed" and "segmentation fault" in trials["crash_mid"].log_tail
    assert trials["hang"].status == "failed" and "did not answer /health within 3s" in trials["hang"].error
    assert trials["garbage"].status == "failed" and "GARBAGE" in trials["garbage"].error
    assert trials["ignore_term"].status == "ok"  # it measures fine; stopping it needed SIGKILL
    for r in result.trials:
        assert r.argv and r.argv[-1] == mark and r.machine["hostname"]
        assert r.engine == "fake" and r.engine_version == "fake 1.0"
    assert result.best in (trials["ok"], trials["ignore_term"])
    assert wait_gone(mark) == []
    # everything was written as it ended: one line per trial, and tune.json reads back
    lines = (tmp_path / "run" / TRIALS).read_text().splitlines()
    assert len(lines) == 6
    saved = TuneResult.from_json(json.loads((tmp_path / "run" / RESULT).read_text()))
    assert saved.to_json() == json.loads(json.dumps(result.to_json()))
    assert (tmp_path / "run" / "trials" / "001" / "server.log").exists()


@pytest.mark.parametrize("allow", [False, True])
def test_the_exactness_gate_rejects_a_faster_inexact_configuration(tmp_path, monkeypatch, allow):
    register_fake(monkeypatch)
    space = load_space_file(write_space(tmp_path, """
[baseline]
speed = 100
[knobs.shift]
choices = [0, 5]
default = 0
"""), FAKE)
    mark = marker()
    result = run_tune(options(space, mark, allow_inexact=allow, reps=1), tmp_path / "run", Display())
    inexact = [r for r in result.trials if r.status == "inexact"]
    assert len(inexact) == 1
    e = inexact[0].exactness
    assert e["exact"] is False and e["basis"] == "token_ids" and e["first_position"] == 3
    assert e["first_prompt"] == "reasoning"  # the first of the built-in prompts
    assert inexact[0].value > 1.5 * result.baseline.value  # twice as fast, but wrong
    assert result.best == (inexact[0] if allow else result.baseline)
    assert wait_gone(mark) == []


@pytest.mark.parametrize("objective, extra", [
    ("goodput", {"slo": "ttft=5s,tpot=1s", "concurrency": 2}),
    ("cost", {"price_per_hour": 3.6, "concurrency": 2}),
])
def test_goodput_and_cost_objectives(tmp_path, monkeypatch, objective, extra):
    register_fake(monkeypatch)
    space = load_space_file(write_space(tmp_path, "[knobs.speed]\nchoices = [200, 800]\n"), FAKE)
    result = run_tune(options(space, marker(), objective=objective, reps=1, **extra), tmp_path / "run", Display())
    assert [r.status for r in result.trials] == ["ok", "ok", "ok"]
    for r in result.trials:
        tok_per_s = r.metrics["output_tok_per_s"]
        if objective == "cost":  # $3.60/h at tok/s: 3.6 / (3600 * tok/s) * 1e6 dollars per million tokens
            assert r.value == pytest.approx(1e3 / tok_per_s)
        else:  # every request meets these loose SLOs: goodput is the whole output rate
            assert r.value == pytest.approx(tok_per_s)
    fastest = max(result.trials, key=lambda r: r.metrics["output_tok_per_s"])
    assert result.best.number == fastest.number and result.objective["direction"] == (
        "minimize" if objective == "cost" else "maximize")


def test_tpe_through_the_tuner(tmp_path, monkeypatch):
    register_fake(monkeypatch)
    space = load_space_file(write_space(tmp_path, "[knobs.speed]\nlow = 100\nhigh = 900\nstep = 100\n"), FAKE)
    result = run_tune(options(space, marker(), strategy="tpe", trials=4, reps=1), tmp_path / "run", Display())
    assert len(result.trials) == 4 and result.trials[0].slot.kind == "baseline"
    assert all(r.status == "ok" and 100 <= r.config.get("speed", 100) <= 900 for r in result.trials)
    assert set(result.sweeps) == {"speed"}


def test_the_command_to_run_again_drops_the_trials_host_and_port():
    from roofline.tune.result import without_trial_address

    argv = ["python", "-m", "roofline", "serve", "--port", "39215", "--host", "127.0.0.1", "--spec", "trie",
            "--max-bfs-breadth", "24"]
    assert without_trial_address(argv) == ["python", "-m", "roofline", "serve", "--spec", "trie", "--max-bfs-breadth", "24"]
    assert without_trial_address(["llama-server", "--port=8081", "--host=0.0.0.0", "-m", "x.gguf", "--threads", "2"]) == \
        ["llama-server", "-m", "x.gguf", "--threads", "2"]
    assert without_trial_address(["serve", "--spec", "ngram"]) == ["serve", "--spec", "ngram"]
