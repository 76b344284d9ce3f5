"""Per-position acceptance statistics: counted on hand-built verify outcomes, and the adaptive
budget cuts a draft where one more position's expected gain stops paying for its row."""

from __future__ import annotations

import pytest

from roofline.engine.runtime.speculate.adaptive import (
    MIN_OFFERS,
    AcceptanceTable,
    DraftBudget,
    expected_tokens,
    match_bucket,
)
from roofline.engine.runtime.speculate.tree import DraftTree
from roofline.response_stats import PositionAcceptance


def linear_cost(rows: int) -> float:
    """A hand-built verify cost curve: every row past the first costs a tenth of a pass."""
    return 1.0 + 0.1 * (rows - 1)


def test_match_buckets():
    got = [match_bucket(m) for m in (None, 1, 2, 3, 4, 5, 8, 9, 16, 17, 400)]
    assert got == ["-", "1", "2", "3-4", "3-4", "5-8", "5-8", "9-16", "9-16", "17+", "17+"]


def test_the_table_counts_offers_and_survivals_per_position():
    t = AcceptanceTable("ngram")
    t.record("3-4", 3, 0)  # positions 1..3 offered, the first missed
    t.record("3-4", 3, 2)  # the path reached depth 2
    t.record("3-4", 4, 4)  # all four kept
    t.record("1", 1, 1)
    assert t.rows() == [
        PositionAcceptance("ngram", "1", 1, 1, 1),
        PositionAcceptance("ngram", "3-4", 1, 3, 2),
        PositionAcceptance("ngram", "3-4", 2, 3, 2),
        PositionAcceptance("ngram", "3-4", 3, 3, 1),
        PositionAcceptance("ngram", "3-4", 4, 1, 1),
    ]
    assert t.rows()[3].rate == pytest.approx(1 / 3)
    assert t.rows()[0].to_json() == {
        "proposer": "ngram",
        "match": "1",
        "position": 1,
        "offered": 1,
        "survived": 1,
    }


def test_survival_is_measured_only_with_enough_offers_else_alpha_to_the_i():
    t = AcceptanceTable("trie")
    for i in range(MIN_OFFERS):
        t.record("2", 2, 2 if i % 4 == 0 else 1)  # s_1 = 1, s_2 = 4/16
    t.record("2", 3, 3)  # position 3: one offer, not enough
    assert t.survival("2", 0.5, 3) == pytest.approx([1.0, 5 / 17, 0.125])
    assert t.survival("9-16", 0.5, 2) == pytest.approx([0.5, 0.25])  # an unseen bucket


def test_a_budget_records_its_verify_steps_in_the_shared_table():
    t = AcceptanceTable("trie")
    a = DraftBudget(linear_cost, adaptive=False, table=t)
    b = DraftBudget(linear_cost, adaptive=False, table=t)
    tree = DraftTree((5, 6, 7, 8), (-1, 0, 0, 1))  # depths 1, 2, 2, 3
    a.record(a.cut(tree, match_len=5), 2)
    b.record(b.cut(DraftTree.chain([1, 2]), match_len=1), 0)
    b.record(b.cut(DraftTree.empty(), match_len=None), 0)  # nothing drafted: nothing offered
    assert [(r.match, r.position, r.offered, r.survived) for r in t.rows()] == [
        ("1", 1, 1, 0),
        ("1", 2, 1, 0),
        ("5-8", 1, 1, 1),
        ("5-8", 2, 1, 1),
        ("5-8", 3, 1, 0),
    ]
    assert (a.stats.drafted, a.stats.accepted, b.stats.passes) == (4, 2, 2)


def test_the_budget_cuts_where_a_positions_gain_stops_paying():
    t = AcceptanceTable("ngram")
    # s = 0.9, 0.8, 0.05, 0.04, ...: the third position is rarely reached
    for i in range(100):
        t.record("5-8", 6, 2 if i < 80 else (1 if i < 90 else (3 if i < 95 else 0)))
    s = t.survival("5-8", 0.6, 6)
    assert s[:3] == pytest.approx([0.95, 0.85, 0.05])
    budget = DraftBudget(linear_cost, table=t)
    chain = DraftTree.chain([1, 2, 3, 4, 5, 6])
    # E / cost: n=1 1.95/1.1, n=2 2.8/1.2 = 2.33, n=3 2.85/1.3 = 2.19: two rows pay, a third not
    assert len(budget.cut(chain, match_len=6)) == 2
    # the same draft in a bucket without statistics: alpha's model, as before statistics existed
    fallback = DraftBudget(linear_cost, table=t)
    ratios = [expected_tokens(fallback.alpha, n) / linear_cost(1 + n) for n in range(1, 7)]
    assert len(fallback.cut(chain, match_len=1)) == 1 + ratios.index(max(ratios))
    assert len(DraftBudget(linear_cost).cut(chain)) == len(fallback.cut(chain, match_len=1))


def test_nothing_pays_when_no_position_survives():
    t = AcceptanceTable("ngram")
    for _ in range(MIN_OFFERS):
        t.record("2", 4, 0)
    budget = DraftBudget(linear_cost, table=t)
    assert len(budget.cut(DraftTree.chain([1, 2, 3, 4]), match_len=2)) == 0


def test_the_table_travels_in_the_servers_stats():
    from roofline.response_stats import ServerStats

    t = AcceptanceTable("trie")
    t.record("5-8", 2, 1)
    stats = ServerStats(position_acceptance=tuple(t.rows()))
    assert ServerStats.from_json(stats.to_json()) == stats
    bad = {"position_acceptance": [{"proposer": "trie", "match": "1", "position": "1"}, 3]}
    assert ServerStats.from_json(bad).position_acceptance == ()  # malformed rows read as none


def test_a_request_whose_drafts_fail_stops_trusting_the_shared_table():
    # the table says drafts after a 5-8 match survive (copied code); one request's drafts (prose)
    # keep failing: its own record scales the table down until drafting stops paying, while a new
    # request on the same table, and one whose drafts survive, still draft
    t = AcceptanceTable("suffix")
    for _ in range(100):
        t.record("5-8", 4, 4)
    chain = DraftTree.chain([1, 2, 3, 4])
    failing = DraftBudget(linear_cost, table=t)
    sizes = []
    for _ in range(6):
        tree = failing.cut(chain, match_len=6)
        sizes.append(len(tree))
        failing.record(tree, 0)
    assert sizes[0] == 4 and sizes[-1] == 0, sizes
    assert failing.calibration() < 0.2
    assert len(DraftBudget(linear_cost, table=t).cut(chain, match_len=6)) == 4
    kept = DraftBudget(linear_cost, table=t)
    for _ in range(6):
        kept.record(kept.cut(chain, match_len=6), 4)
    assert kept.calibration() >= 1.0  # above the table, which the failing request pulled down
    assert len(kept.cut(chain, match_len=6)) == 4
