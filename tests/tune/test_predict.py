"""Predicted ladders by replay: hand-computed replays of the n-gram (chain) and trie (tree)
proposers, the predicted speed-up from a hand-built cost curve, and the settings a space yields."""

from __future__ import annotations

import pytest

from roofline.engine.runtime.speculate import proposer_factory
from roofline.speculation import SpecOptions
from roofline.tune.predict import (
    PassCosts,
    Prediction,
    ReplayStats,
    Stream,
    matching,
    predict_ladder,
    predict_one,
    replay,
    settings,
)
from roofline.tune.space_records import Condition, Dimension, Space

NGRAM = SpecOptions("ngram", k=3, prompt_lookup_min=1, prompt_lookup_max=2, adaptive=False)
TRIE = SpecOptions("trie", max_trie_depth=4, min_bfs_breadth=1, max_bfs_breadth=2, adaptive=False)
LINEAR = PassCosts(((1, 1.0), (2, 1.1)), "hand-built: 1 + 0.1 per extra row")


def test_ngram_replay_by_hand():
    # prefill -> 1. context 1 2 3 4 1: "1" first ends at 0, draft 2 3 4 (k 3), truth 2 3 9: 2
    # accepted, + 9. Ends in 9, seen nowhere before: no draft, + 1. "1" again (the 2-gram "9 1" is
    # new): room 8 - 5 - 1 = 2, draft 2 3, both accepted, + 9.
    stats = replay(proposer_factory(NGRAM), [1, 2, 3, 4], [1, 2, 3, 9, 1, 2, 3, 9])
    assert stats == ReplayStats(
        passes=4, tokens=8, drafted=5, accepted=4, rows=((1, 1), (3, 1), (4, 1))
    )
    assert stats.tokens_per_pass == 2.0
    # decode: 7 tokens in passes of 4, 1 and 3 rows = 1.3 + 1.0 + 1.2 one-row passes
    assert stats.cost(LINEAR) == pytest.approx(3.5)


def test_trie_replay_by_hand():
    # context 5 1 5 2 | 5: the anchor "5" (count 3) has children 2 (newest) and 1, breadth 2 at a
    # one-token match (depth 4, breadths 1..2); below them 5 and 5; below "5 1 5" the 2 of
    # "5 1 5 2" ("5 2 5" has no child yet): tree 2 1 5 5 2 under parents -1 -1 0 1 3, 5 nodes.
    # Truth 1 5 2 7: the path 1 -> 5 -> 2, 3 accepted, + 7. Then "7" never continued: + 5.
    make = proposer_factory(TRIE)
    tree = make().propose([5, 1, 5, 2, 5], 20)
    assert (tree.tokens, tree.parents) == ((2, 1, 5, 5, 2), (-1, -1, 0, 1, 3))
    stats = replay(make, [5, 1, 5, 2], [5, 1, 5, 2, 7, 5], max_tokens=20)
    assert stats == ReplayStats(passes=3, tokens=6, drafted=5, accepted=3, rows=((1, 1), (6, 1)))
    assert stats.tokens_per_pass == 2.0
    # as a chain (breadth 1 at every level): "5" -> 2 -> 5, truth 1: nothing accepted, + 1. Then
    # anchors "5 1" (5, then 2) and "1" (5, 2, then the 5 of "1 5 2 5"): 5 2 5, truth 5 2 7: 2
    # accepted, + 7; then + 5 undrafted.
    chain = replay(
        proposer_factory(SpecOptions(**{**TRIE.__dict__, "tree": False})),
        [5, 1, 5, 2],
        [5, 1, 5, 2, 7, 5],
        max_tokens=20,
    )
    assert chain == ReplayStats(
        passes=4, tokens=6, drafted=5, accepted=2, rows=((1, 1), (3, 1), (4, 1))
    )


def test_max_tokens_cuts_the_room_as_the_engine_does():
    # room = max_tokens - n - 1: with the output at its limit, the last step drafts 2, not 3
    stats = replay(proposer_factory(NGRAM), [1, 2, 3, 4], [1, 2, 3, 4])
    # context 1 2 3 4 1: draft 2 3 (room 4 - 1 - 1 = 2), both accepted, + 4
    assert stats == ReplayStats(passes=2, tokens=4, drafted=2, accepted=2, rows=((3, 1),))


def test_the_context_cuts_the_room_as_the_engine_does():
    # a 6-token context: with 4 prompt tokens and 1 out, rows for at most 6 - 5 = 1 draft token
    stats = replay(proposer_factory(NGRAM), [1, 2, 3, 4], [1, 2], max_tokens=20, max_seq_len=6)
    assert stats == ReplayStats(passes=2, tokens=2, drafted=1, accepted=1, rows=((2, 1),))


def _space() -> Space:
    spec = Dimension("spec", "choice", ("none", "ngram", "trie", "draft"), default="none")
    on = (Condition("spec", ("ngram", "draft")),)
    return Space(
        "t",
        "embedded",
        "",
        "",
        baseline={"dtype": "fp32", "adaptive": False},
        dimensions=(
            Dimension("dtype", "choice", ("fp32", "stored")),
            spec,
            Dimension("spec_k", "choice", (2, 3), default=4, conditions=on),
            Dimension(
                "prompt_lookup_max",
                "choice",
                (1, 2),
                default=5,
                conditions=(Condition("spec", ("ngram",)),),
            ),
            Dimension(
                "max_bfs_breadth",
                "choice",
                (1, 2),
                default=10,
                conditions=(Condition("spec", ("trie",)),),
            ),
        ),
    )


def test_settings_are_every_model_free_proposer_and_its_knobs():
    found = settings(_space())
    methods = [c["spec"] for c in found]
    assert "draft" not in methods and "none" not in methods  # draft loads a model
    # ngram: k 2|3|4 (the default: a trial leaving it unset runs it) x lookup max 1|2|5, but max
    # 1 is below the default min 2: refused
    ngram = [c for c in found if c["spec"] == "ngram"]
    assert sorted((c["spec_k"], c["prompt_lookup_max"]) for c in ngram) == [
        (k, m) for k in (2, 3, 4) for m in (2, 5)
    ]
    trie = [c for c in found if c["spec"] == "trie"]
    assert sorted(c["max_bfs_breadth"] for c in trie) == [1, 2, 10]
    assert all(c["adaptive"] is False and "dtype" not in c for c in found)


def test_predict_ladder_with_a_hand_built_cost_curve():
    streams = [Stream("a", (1, 2, 3, 4), (1, 2, 3, 9, 1, 2, 3, 9))]
    space = _space()
    ladder = predict_ladder(space, streams, LINEAR, baseline_tok_s=10.0)
    assert len(ladder) == 9
    assert [p.ratio for p in ladder] == sorted((p.ratio for p in ladder), reverse=True)
    # ngram, k 3, lookup 1..2 (min lowered by the baseline): the replay above, 7 / 3.5
    space_min1 = space.with_baseline({"prompt_lookup_min": 1})
    ladder = predict_ladder(space_min1, streams, LINEAR, baseline_tok_s=10.0)
    p = matching(
        ladder,
        {
            "spec": "ngram",
            "spec_k": 3,
            "prompt_lookup_max": 2,
            "prompt_lookup_min": 1,
            "adaptive": False,
        },
    )
    assert p is not None and p.stats.tokens_per_pass == 2.0
    assert p.ratio == pytest.approx(2.0) and p.tok_per_s == pytest.approx(20.0)
    assert p.prompts["a"] == p.stats
    assert Prediction.from_json(p.to_json()) == p
    # no proposer: no prediction to match
    assert matching(ladder, {"spec": "none"}) is None


def test_pass_costs_interpolate_and_extrapolate_like_the_runner():
    c = PassCosts(((1, 1.0), (3, 1.2), (5, 2.0)), "x")
    assert c(2) == pytest.approx(1.1)
    assert c(7) == pytest.approx(2.8)
    assert PassCosts.from_json(c.to_json()) == c
    # a measured dip (3 rows cheaper than 2) is noise: the speed-up takes the running maximum
    dip = PassCosts(((1, 1.0), (2, 1.2), (3, 0.9), (5, 1.5)), "x")
    assert dip.monotone().points == ((1, 1.0), (2, 1.2), (3, 1.2), (5, 1.5))
    ngram = {"spec": "ngram", "spec_k": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 2}
    p = predict_one(
        {**ngram, "adaptive": False},
        [Stream("a", (1, 2, 3, 4), (1, 2, 3, 9, 1, 2, 3, 9))],
        dip,
        None,
    )
    # passes of 4, 1 and 3 rows: 1.35 + 1.0 + 1.2 (not 0.9)
    assert p.ratio == pytest.approx(7 / 3.55)


def test_with_a_one_row_time_the_work_outside_passes_and_the_proposer_count():
    # a flat curve: every pass costs one row's 10 ms; the baseline's 50 tok/s (20 ms a token) spend
    # the other 10 ms outside the pass, per token, with or without a proposer
    ngram = {"spec": "ngram", "spec_k": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 2}
    streams = [Stream("a", (1, 2, 3, 4), (1, 2, 3, 9, 1, 2, 3, 9))]
    flat = ((1, 1.0), (5, 1.0))
    passes_only = predict_one({**ngram, "adaptive": False}, streams, PassCosts(flat, "x"), 50.0)
    timed = predict_one(
        {**ngram, "adaptive": False}, streams, PassCosts(flat, "x", one_row_s=0.01), 50.0
    )
    s = timed.stats
    assert s.proposer_s > 0 and s == passes_only.stats  # the timing is not compared
    decode = s.tokens - 1  # the first token is the prefill's
    decode_passes = sum(n for _, n in s.rows)
    assert passes_only.ratio == pytest.approx(decode / decode_passes)
    want = decode * 0.02 / (0.01 * decode_passes + decode * 0.01 + s.proposer_s)
    assert timed.ratio == pytest.approx(want) and 1.0 < timed.ratio < passes_only.ratio
    assert PassCosts.from_json(PassCosts(flat, "x", 0.01).to_json()).one_row_s == 0.01
    # a one-row pass longer than a baseline token is another engine's: passes only
    slow = PassCosts(flat, "x", one_row_s=0.05)
    assert predict_one({**ngram, "adaptive": False}, streams, slow, 50.0).ratio == passes_only.ratio


def test_prompts_are_averaged_geometrically_like_the_paired_ratio():
    """A copy-heavy prompt beside one no draft helps: the speed-up is the geometric mean of the
    two prompts' own (as the ladder's paired ratio averages measured requests), not the ratio of
    summed tokens to summed passes, which weighs the slow prompt's time."""
    ngram = {"spec": "ngram", "spec_k": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 2}
    copy = Stream("copy", (1, 2, 3, 4), (1, 2, 3, 9, 1, 2, 3, 9))
    plain = Stream("plain", (5, 6), tuple(range(100, 108)))  # no token repeats: never drafts
    flat = PassCosts(((1, 1.0), (5, 1.0)), "flat")
    p = predict_one({**ngram, "adaptive": False}, [copy, plain], flat, None)
    alone = [
        predict_one({**ngram, "adaptive": False}, [s], flat, None).ratio for s in (copy, plain)
    ]
    assert alone[1] == pytest.approx(1.0) and alone[0] > 1.5
    assert p.ratio == pytest.approx((alone[0] * alone[1]) ** 0.5)
    s = p.stats
    pooled = (s.tokens - 2) / sum(n for _, n in s.rows)  # two prefill tokens
    assert p.ratio > pooled
