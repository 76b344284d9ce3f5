"""The run-folder side of predicted ladders: streams from greedy.json (a text-only engine gives
none), verify costs from the server's `/v1/models` figures or the ceiling's model, predicted.json,
a prediction per trial that ran, and the tables that show them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from roofline.bench.engines.greedy import GreedyOutput
from roofline.bench.summary import CeilingFigures
from roofline.cli.tune_output import predicted_markdown
from roofline.engine.runtime.scheduler import Usage
from roofline.engine.serve.response_builder import ResponseBuilder
from roofline.report.tune_text import predicted_table, tables, trials_table
from roofline.response_stats import ServerStats
from roofline.tune.options import TuneOptions
from roofline.tune.predict_records import PassCosts, Prediction, ReplayStats
from roofline.tune.predict_run import (
    FAILED,
    MEASURED,
    PredictedLadder,
    model_pass_costs,
    pass_costs_of,
    predict_and_write,
    predict_run,
    predict_trials,
    read_predicted,
    server_stats,
    streams_of,
    trial_predictions,
    write_predicted,
)
from roofline.tune.records import TrialMetrics
from roofline.tune.slots import Direction, Slot
from roofline.tune.space_records import Dimension, Space
from roofline.tune.trial_result import TrialResult


def _trial(number, config, tok_s, status="ok", folder=None, ceiling=None):
    return TrialResult(
        number,
        Slot("baseline" if number == 0 else "ladder"),
        config,
        status,
        value=tok_s,
        metrics=TrialMetrics(output_speed_median_tok_per_s=tok_s, ceiling=ceiling),
        folder=folder,
    )


def _prediction(setting, ratio, tpp_tokens=(10, 5)):
    stats = ReplayStats(passes=tpp_tokens[1], tokens=tpp_tokens[0], drafted=8, accepted=5)
    return Prediction(setting, stats, ratio, 100.0 * ratio)


def test_server_stats_carry_pass_costs_and_refuse_malformed_ones():
    s = ServerStats(bytes_per_token=10, pass_costs=((1, 1.0), (2, 1.25)), one_row_pass_s=0.004)
    assert s.to_json()["pass_costs"] == {"1": 1.0, "2": 1.25}
    assert ServerStats.from_json(s.to_json()) == s
    for bad in (-1.0, 0, "x", True):
        assert ServerStats.from_json({"one_row_pass_s": bad}).one_row_pass_s is None
    for bad in ({"1": "x"}, {"one": 1.0}, {"2": -1.0}, [1, 2], {"1": True}):
        assert ServerStats.from_json({"pass_costs": bad}).pass_costs is None
    assert "pass_costs" not in ServerStats(bytes_per_token=10).to_json()


def test_greedy_outputs_keep_prompt_ids_and_old_files_still_load():
    old = {"prompt_id": "a", "text": "x", "token_ids": [1, 2]}
    assert GreedyOutput.from_json(old).prompt_token_ids is None
    assert GreedyOutput.from_json(old).to_json() == old
    new = GreedyOutput("a", "x", (1, 2), (7, 8))
    assert GreedyOutput.from_json(new.to_json()) == new
    assert streams_of([new])[0].prompt_ids == (7, 8)
    assert streams_of([new, GreedyOutput.from_json(old)]) is None  # one without: no replay


def test_the_server_sends_prompt_ids_where_vllm_does():
    usage = Usage(2, 1)
    chat = ResponseBuilder("m", chat=True, prompt_token_ids=[5, 6])
    out = chat.full("x", "stop", usage, token_ids=[9])
    assert out["prompt_token_ids"] == [5, 6] and out["choices"][0]["token_ids"] == [9]
    text = ResponseBuilder("m", chat=False, prompt_token_ids=[5, 6])
    out = text.full("x", "stop", usage, token_ids=[9])
    assert out["choices"][0]["prompt_token_ids"] == [5, 6] and "prompt_token_ids" not in out
    # not asked for token ids: none sent
    assert "prompt_token_ids" not in chat.full("x", "stop", usage)


def test_verify_costs_from_the_server_else_from_the_ceiling(tmp_path):
    folder = tmp_path / "trials" / "000"
    (folder / "bench").mkdir(parents=True)
    stats = ServerStats(pass_costs=((1, 1.0), (3, 1.5)))
    (folder / "bench" / "provenance.json").write_text(
        json.dumps({"server": {"roofline": stats.to_json()}})
    )
    base = _trial(0, {}, 10.0)
    got = pass_costs_of(server_stats(folder), base, None, None)
    assert got == PassCosts(((1, 1.0), (3, 1.5)), MEASURED)
    assert server_stats(tmp_path / "elsewhere") is None
    block = tmp_path / "trials" / "001"  # a paired block's trial: one bench run per repetition
    (block / "bench-0").mkdir(parents=True)
    (block / "bench-0" / "provenance.json").write_text(
        json.dumps({"server": {"roofline": stats.to_json()}})
    )
    assert server_stats(block).pass_costs == stats.pass_costs
    # an external engine: the ceiling's model, memory-bound until the rows' matmuls take longer
    ceiling = CeilingFigures(bytes_per_token=1e9, bandwidth_bytes_per_s=1e12, tok_per_s=1000.0)
    base = _trial(0, {}, 10.0, ceiling=ceiling)
    got = pass_costs_of(None, base, None, None)
    assert got(25) == 1.0 and "memory-bound" in got.source  # no peak FLOP/s known
    # 1 ms to read the weights; 0.1 ms of matmuls per row: flat to 10 rows, then linear
    m = model_pass_costs(1e9, 1e12, 1e9, 1e13)
    assert m(5) == pytest.approx(1.0) and m(33) == pytest.approx(3.3)
    assert m.source.startswith("model")


def test_predictions_per_trial_use_the_same_configuration_without_a_proposer(tmp_path):
    ngram = {"spec": "ngram", "spec_k": 4, "adaptive": False}
    ladder = PredictedLadder(
        0,
        50.0,
        PassCosts(((1, 1.0), (2, 1.1)), MEASURED),
        (_prediction(ngram, 1.5), _prediction({"spec": "trie", "adaptive": False}, 1.2)),
        4,
    )
    trials = [
        _trial(0, {"dtype": "fp32"}, 50.0),
        _trial(1, {"dtype": "stored"}, 80.0),
        _trial(2, {"dtype": "stored", **ngram}, 110.0),
        _trial(3, {"dtype": "fp32", "spec": "trie", "adaptive": False}, 55.0),
        _trial(4, {"dtype": "stored", "spec": "draft"}, 90.0),
    ]
    got = trial_predictions(ladder, trials)
    assert set(got) == {2, 3}  # the baseline and dtype trials: nothing to predict; draft: no
    assert got[2].tok_per_s == pytest.approx(120.0)  # 80 (stored, no proposer) x 1.5
    assert got[3].tok_per_s == pytest.approx(60.0)  # 50 (the baseline) x 1.2
    # a knob left at its default matches the prediction that set it
    got = trial_predictions(
        ladder, [_trial(4, {}, 2.0), _trial(5, {"spec": "ngram", "adaptive": False}, 1.0)]
    )
    assert set(got) == {5} and got[5].tok_per_s == pytest.approx(3.0)
    # other knobs no trial ran without a proposer: no rate to scale, no prediction
    assert trial_predictions(ladder, [_trial(6, {"threads": 1, **ngram}, 1.0)]) == {}

    from roofline.tune.objectives import ObjectiveInfo
    from roofline.tune.records import StudyInfo
    from roofline.tune.result import TuneResult

    t = TuneResult(
        "embedded",
        None,
        "ladder",
        ObjectiveInfo("speed", direction=Direction.MAXIMIZE, unit="tok/s", label="Output Speed"),
        {},
        StudyInfo("tune", "", {}),
        "",
        baseline=trials[0],
        trials=tuple(trials),
    )
    _, headers, rows, notes = trials_table(t, trial_predictions(ladder, trials))
    col = headers.index("predicted")
    assert rows[2][col] == "120.0 (1.50x, 2.00 tok/pass)" and rows[1][col] == "-"
    assert any(n.startswith("predicted:") for n in notes)
    assert "predicted" not in trials_table(t)[1]
    # `roofline tune` and the report: the column comes with the run folder's predicted.json
    assert "predicted" not in tables(t, tmp_path)[-1][1]
    write_predicted(tmp_path, ladder)
    assert "predicted" in tables(t, tmp_path)[-1][1]
    _, headers, rows, notes = predicted_table(ladder, {"dtype": "fp32"})
    assert rows[0][:2] == ["spec=ngram spec_k=4 adaptive=False", "2.00"]
    assert any(MEASURED in n for n in notes)
    md = predicted_markdown(ladder, {"dtype": "fp32"})
    assert md.startswith("## predicted ladder") and "| spec=ngram spec_k=4" in md


def _with_costs(tmp_path, number, costs):
    folder = tmp_path / "trials" / f"{number:03d}"
    (folder / "bench").mkdir(parents=True)
    stats = ServerStats(pass_costs=costs)
    (folder / "bench" / "provenance.json").write_text(
        json.dumps({"server": {"roofline": stats.to_json()}})
    )
    return f"trials/{number:03d}"


def test_each_trial_is_predicted_on_its_own_engines_verify_costs(tmp_path):
    ngram = {"spec": "ngram", "spec_k": 4, "adaptive": False}
    fp32_costs, stored_costs = ((1, 1.0), (5, 1.2)), ((1, 1.0), (5, 2.5))
    ladder = PredictedLadder(
        0, 50.0, PassCosts(fp32_costs, MEASURED), (_prediction(ngram, 1.5),), 4
    )

    def trial(number, config, tok_s, costs):
        units = {f"p#{i}": tok_s * (1 + 0.01 * i) for i in range(4)}
        t = _trial(number, config, tok_s, folder=_with_costs(tmp_path, number, costs))
        return replace(t, units=units)

    trials = [
        trial(0, {"dtype": "fp32"}, 50.0, fp32_costs),
        trial(1, {"dtype": "stored"}, 200.0, stored_costs),
        trial(2, {"dtype": "stored"}, 180.0, stored_costs),  # the incumbent, again
        trial(3, {"dtype": "stored", **ngram}, 216.0, stored_costs),
        trial(4, {"dtype": "stored", "threads": 1, **ngram}, 100.0, stored_costs),
    ]
    trials = [replace(t, slot=Slot("ladder", 2)) for t in trials]
    calls = []

    def replay(config, pass_cost, baseline_tok_s):
        calls.append((config, pass_cost, baseline_tok_s))
        return _prediction(config, 1.1)

    got = predict_trials(tmp_path, ladder, trials, replay)
    # trial 4: no trial ran stored on one thread without a proposer
    assert [t.number for t in got] == [3] and got[0].plain == got[0].against == 2
    assert calls == [({"dtype": "stored", **ngram}, PassCosts(stored_costs, MEASURED), 180.0)]
    assert got[0].predicted == 1.1
    assert got[0].measured.ratio == pytest.approx(1.2)  # 216 / 180 on every unit
    assert trial_predictions(replace(ladder, trials=got), trials)[3].ratio == 1.1
    back = PredictedLadder.from_json(replace(ladder, trials=got).to_json())
    assert back.trials == got
    # a knob's step: held against its incumbent (ngram again, trial 5), predicted ratio of the two;
    # trial 5 itself has no plain trial in its step: no measured ratio (minutes apart)
    k8 = {**ngram, "spec_k": 8}
    ladder = replace(ladder, predictions=(*ladder.predictions, _prediction(k8, 1.0)))
    later = [
        replace(
            trial(5, {"dtype": "stored", **ngram}, 200.0, stored_costs), slot=Slot("incumbent", 3)
        ),
        replace(trial(6, {"dtype": "stored", **k8}, 220.0, stored_costs), slot=Slot("ladder", 3)),
    ]
    ratios = {"spec_k": {4: 1.1, 8: 1.32}}

    def by_k(config, pass_cost, baseline_tok_s):
        return _prediction(config, ratios["spec_k"][config.get("spec_k", 4)])

    got = {t.number: t for t in predict_trials(tmp_path, ladder, [*trials, *later], by_k)}
    assert got[5].against == 2 and got[5].measured is None
    assert got[6].against == 5 and got[6].predicted == pytest.approx(1.2)
    assert got[6].measured.ratio == pytest.approx(1.1)


def test_predicted_json_round_trip_and_why_not(tmp_path):
    ladder = PredictedLadder(
        0, None, PassCosts(((1, 1.0),), MEASURED), (_prediction({"spec": "ngram"}, 2.0),), 1
    )
    write_predicted(tmp_path, ladder)
    assert read_predicted(tmp_path) == ladder
    assert read_predicted(tmp_path / "none") is None
    folder = tmp_path / "trials" / "000"
    folder.mkdir(parents=True)
    (folder / "greedy.json").write_text(json.dumps([{"prompt_id": "a", "text": "hi"}]))
    base = _trial(0, {}, 10.0, folder="trials/000")
    why = predict_run(tmp_path, TuneOptions(engine="x"), base)
    assert why.startswith("no prediction:") and "no token ids" in why
    assert "did not finish" in predict_run(tmp_path, TuneOptions(), None)
    # ids, but a space with no model-free proposer (draft loads a model)
    (folder / "greedy.json").write_text(json.dumps([GreedyOutput("a", "", (1,), (2,)).to_json()]))
    space = Space("s", "embedded", "", "", dimensions=(Dimension("spec", "choice", ("draft",)),))
    why = predict_run(tmp_path, TuneOptions(space=space.to_json()), base)
    assert "sets no model-free proposer" in why and "ngram" in why and "draft" not in why
    # whatever goes wrong, a tuning run gets one line, never an exception
    assert predict_and_write(tmp_path, TuneOptions(space={}), base).startswith(FAILED)
