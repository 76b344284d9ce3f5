"""Predictions during a run (`tune.predict_step`): a proposer's knob values replayed on the
baseline's streams with the current best's own verify costs, and the ladder skipping the values
predicted no faster than the best by the margin a kept step needs."""

from __future__ import annotations

import json

import pytest

from roofline.bench.engines.greedy import GreedyOutput
from roofline.response_stats import ServerStats
from roofline.tune.ladder import challenger
from roofline.tune.predict import predict_one
from roofline.tune.predict_records import PassCosts
from roofline.tune.predict_run import MEASURED, baseline_streams
from roofline.tune.predict_step import StepPredictor
from roofline.tune.records import TrialMetrics
from roofline.tune.slots import Slot, View
from roofline.tune.space_records import Dimension, Space
from roofline.tune.trial_result import TrialResult

# a prompt that lists 0..29 twice and an answer that copies the list: n-gram lookup drafts it
PROMPT = [*range(30), 99, *range(30), 98]
OUTPUT = [*range(30), 97, 96, 95, 94]
STEEP = ((1, 1.0), (2, 1.2), (3, 1.5), (5, 2.2), (9, 4.0))  # a stored-format curve
FLAT = ((1, 1.0), (2, 1.0), (3, 1.05), (5, 1.1), (9, 1.3))  # fp32's


def _trial(number, kind, config, tok_s, folder):
    return TrialResult(
        number,
        Slot(kind),
        config,
        "ok",
        value=tok_s,
        metrics=TrialMetrics(output_speed_median_tok_per_s=tok_s),
        folder=folder,
    )


def _stats(folder, points):
    folder.mkdir(parents=True, exist_ok=True)
    prov = {"server": {"roofline": ServerStats(pass_costs=points, max_seq_len=512).to_json()}}
    (folder / "provenance.json").write_text(json.dumps(prov))


@pytest.fixture
def run(tmp_path):
    """A run folder: the fp32 baseline (flat costs, its greedy streams), the stored format without
    a proposer, and stored + ngram k=4 (steep costs), the current best."""
    base = tmp_path / "trials" / "000"
    base.mkdir(parents=True)
    outputs = [GreedyOutput("copy", "", tuple(OUTPUT), tuple(PROMPT))]
    (base / "greedy.json").write_text(json.dumps([o.to_json() for o in outputs]))
    _stats(base / "bench", FLAT)
    _stats(tmp_path / "trials" / "001" / "bench", STEEP)
    _stats(tmp_path / "trials" / "002" / "bench-0", STEEP)
    ngram = {"dtype": "stored", "spec": "ngram", "spec_k": 4, "adaptive": False}
    results = [
        _trial(0, "baseline", {"dtype": "fp32"}, 40.0, "trials/000"),
        _trial(1, "ladder", {"dtype": "stored"}, 70.0, "trials/001"),
        _trial(2, "ladder", ngram, 100.0, "trials/002"),
    ]
    return tmp_path, results


def test_a_knob_value_is_replayed_on_the_current_bests_own_costs(run):
    run_dir, results = run
    current = results[-1]
    predict = StepPredictor(run_dir, max_tokens=len(OUTPUT))
    eight = {**current.config, "spec_k": 8}
    got = predict(eight, current, results)
    streams = baseline_streams(run_dir / "trials" / "000")
    costs = PassCosts(STEEP, MEASURED)

    def ratio(c):  # at the stored format's rate without a proposer (trial 1)
        return predict_one(c, streams, costs, 70.0, len(OUTPUT), 512).ratio

    assert got == pytest.approx(ratio(eight) / ratio(current.config))
    assert got != pytest.approx(1.0)  # k matters on this stream
    # on the baseline's flat costs the same values predict otherwise: the best's curve was used
    flat = PassCosts(FLAT, MEASURED)
    on_flat = (
        predict_one(eight, streams, flat, 70.0, len(OUTPUT), 512).ratio
        / predict_one(current.config, streams, flat, 70.0, len(OUTPUT), 512).ratio
    )
    assert got != pytest.approx(on_flat)


def test_a_blocks_values_are_predicted_on_the_plain_best_before_they_run(run):
    run_dir, results = run
    plain, eight = results[1], {"dtype": "stored", "spec": "ngram", "spec_k": 8}
    predict = StepPredictor(run_dir, max_tokens=len(OUTPUT))
    streams = baseline_streams(run_dir / "trials" / "000")
    want = predict_one(eight, streams, PassCosts(STEEP, MEASURED), 70.0, len(OUTPUT), 512)
    assert predict.speedup_on(eight, plain, results) == pytest.approx(want.ratio)  # its own rate
    assert predict.speedup(results[2], results) is not None
    assert predict.speedup_on(plain.config, plain, results) is None  # no proposer: nothing


def test_nothing_is_predicted_across_proposers_formats_or_without_measured_costs(run):
    run_dir, results = run
    current = results[-1]
    predict = StepPredictor(run_dir)
    assert predict({**current.config, "spec": "trie"}, current, results) is None
    assert predict({**current.config, "spec": "draft"}, current, results) is None
    assert predict({**current.config, "dtype": "bf16"}, current, results) is None
    plain = results[1]  # no proposer on the best: the method knob's step, always measured
    assert predict({**plain.config, "spec": "ngram"}, plain, results) is None
    (run_dir / "trials" / "002" / "bench-0" / "provenance.json").unlink()
    assert StepPredictor(run_dir)({**current.config, "spec_k": 8}, current, results) is None


def test_the_ladder_skips_values_predicted_no_faster_and_says_so():
    knob = Dimension("spec_k", "choice", choices=(2, 4, 8), default=4)
    space = Space("s", "embedded", "", "", baseline={"spec": "ngram"}, dimensions=(knob,))
    current = _trial(3, "ladder", {"spec": "ngram"}, 100.0, "trials/003")
    predicted = {2: 0.95, 8: 1.049}  # under 1 + PREDICTED_GAIN: replay cannot tell them apart
    view = View([current], predict=lambda c, best, results: predicted.get(c.get("spec_k")))
    low = challenger(space, current, "spec_k", 2, view)
    edge = challenger(space, current, "spec_k", 8, view)
    assert low.action == edge.action == "skip"
    assert "predicted 0.950x the current best" in low.reason and "not measured" in low.reason
    predicted[8] = 1.051
    assert challenger(space, current, "spec_k", 8, view).action == "run"
    # no predictor, or one that cannot say: measured
    assert challenger(space, current, "spec_k", 2).action == "run"
    predicted.clear()
    assert challenger(space, current, "spec_k", 2, view).action == "run"


def test_a_self_draft_reading_no_fewer_bytes_than_its_target_is_not_launched(tmp_path):
    """The shipped Q4_1 file: its own weights at int8 read about 1.4x its stored bytes a token,
    so `draft_speedup_bound` is 1 and the ladder skips the value, saying why; drafting for the fp32
    reference (4 bytes a weight) is bounded above 1 and runs."""
    from roofline.modelspec.default_model import default_model_path
    from roofline.modelspec.files import read_file_weights
    from roofline.speculation import draft_speedup_bound

    model = str(default_model_path())
    weights = read_file_weights(model)
    stored, fp32 = weights.bytes_per_token, weights.params_read * 4
    for number, served in ((1, stored), (2, fp32)):
        folder = tmp_path / "trials" / f"{number:03d}" / "bench"
        folder.mkdir(parents=True)
        prov = {"server": {"roofline": ServerStats(bytes_per_token=served).to_json()}}
        (folder / "provenance.json").write_text(json.dumps(prov))
    on_stored = _trial(1, "ladder", {"dtype": "stored"}, 90.0, "trials/001")
    on_fp32 = _trial(2, "ladder", {"dtype": "fp32"}, 40.0, "trials/002")
    predict = StepPredictor(tmp_path, model=model)
    draft = {"dtype": "stored", "spec": "draft"}
    why = predict.futile(draft, on_stored)
    assert why is not None and "draft_dtype=int8 not measured" in why and "1.00x at most" in why
    assert predict.futile({**draft, "draft_dtype": "stored"}, on_stored) is not None  # c = 1
    assert predict.futile({**draft, "draft_dtype": "bf16"}, on_stored) is not None
    assert predict.futile({"dtype": "fp32", "spec": "draft"}, on_fp32) is None  # c ~ 1/4
    assert draft_speedup_bound(0.25, 4) == pytest.approx(2.5)
    # another draft model, a fixed draft length, no model known, or a best that already drafts:
    # not bounded here
    assert predict.futile({**draft, "draft_model": "small.gguf"}, on_stored) is None
    assert predict.futile({**draft, "adaptive": False}, on_stored) is None  # drafts all k
    assert StepPredictor(tmp_path).futile(draft, on_stored) is None
    assert (
        predict.futile(draft, _trial(1, "ladder", {**draft, "spec": "ngram"}, 90.0, "trials/001"))
        is None
    )
    # the ladder's challenger takes the verdict
    knob = Dimension("spec", "choice", choices=("none", "ngram", "draft"), default="none")
    space = Space("s", "embedded", "", "", baseline={"dtype": "stored"}, dimensions=(knob,))
    view = View([on_stored], predict=predict)
    skipped = challenger(space, on_stored, "spec", "draft", view)
    assert skipped.action == "skip" and skipped.reason == why
    assert challenger(space, on_stored, "spec", "ngram", view).action == "run"
