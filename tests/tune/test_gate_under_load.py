"""Tune's exactness gate under load: a trial exact alone but whose greedy outputs change when its
objective runs several streams (bench's `verify`) is inexact, and says where and at how many."""

from __future__ import annotations

from types import SimpleNamespace

from roofline.bench.engines.greedy import Exactness
from roofline.bench.verify import Divergence, Verify
from roofline.report.tune_text import status_note
from roofline.tune.trial import under_load
from roofline.tune.trial_result import TrialResult

ALONE = Exactness(True, 3, "token_ids")


def gate(verify: Verify | None, alone: Exactness = ALONE) -> Exactness:
    return under_load(alone, SimpleNamespace(verify=verify))


def test_nothing_checked_leaves_the_single_stream_verdict():
    assert gate(None) == ALONE
    assert gate(Verify(checked=0, identical=0)) == ALONE
    assert gate(Verify(checked=4, identical=4, streams=4, basis="token_ids")) == ALONE


def test_a_divergence_under_load_makes_the_trial_inexact():
    d = Divergence("code", 17, "token_ids", request=2, reference="5 6 7", loaded="5 6 8")
    e = gate(Verify(checked=4, identical=3, first_divergence=d, streams=4, basis="token_ids"))
    assert not e.exact and e.streams == 4 and e.compared == 4
    assert (e.first_prompt, e.first_position) == ("code", 17)
    assert (e.baseline_piece, e.candidate_piece) == ("5 6 7", "5 6 8")
    assert Exactness.from_json(e.to_json()) == e
    r = TrialResult(number=1, slot=None, config={}, status="inexact", exactness=e)
    assert "at 4 streams" in status_note(r) and "'code'" in status_note(r)


def test_a_check_that_could_not_finish_is_not_evidence():
    e = gate(Verify(checked=0, identical=0, streams=4, error="timed out"))
    assert not e.exact and "timed out" in e.candidate_piece


def test_a_trial_inexact_alone_keeps_its_own_divergence():
    alone = Exactness(False, 3, "token_ids", first_prompt="prose", first_position=3)
    d = Divergence("code", 17, "token_ids", request=0)
    assert gate(Verify(checked=4, identical=3, first_divergence=d, streams=4), alone) == alone


def test_an_old_record_without_streams_loads_as_one_stream():
    d = ALONE.to_json()
    del d["streams"]
    assert Exactness.from_json(d).streams == 1
