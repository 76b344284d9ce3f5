"""The suffix trie (insertion, counts, LRU leaf eviction), the breadth schedule and the draft trees
it grows."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline.engine.runtime.speculate import (
    DraftTree,
    SpecOptions,
    TrieProposer,
    bfs_breadth,
    proposer_factory,
)
from roofline.engine.runtime.speculate.base import min_trie_capacity
from roofline.engine.runtime.speculate.trie import ROOT, TokenTrie


def ngrams(trie: TokenTrie) -> dict[tuple[int, ...], int]:
    """Every n-gram in the trie with its count."""
    out: dict[tuple[int, ...], int] = {}
    stack: list[tuple[int, tuple[int, ...]]] = [(ROOT, ())]
    while stack:
        node, path = stack.pop()
        for child in trie.children(node):
            gram = (*path, trie.token[child])
            out[gram] = trie.count[child]
            stack.append((child, gram))
    return out


def brute_ngrams(tokens: list[int], depth: int) -> Counter:
    return Counter(
        tuple(tokens[i : i + n]) for n in range(1, depth + 1) for i in range(len(tokens) - n + 1)
    )


# ---- the breadth schedule
# ------------------------------------------------------------------------------


def test_breadth_schedule_defaults():
    table = {m: bfs_breadth(m, 18, 1, 10) for m in (1, 2, 5, 9, 13, 16, 17)}
    assert table == {1: 10, 2: 9, 5: 8, 9: 5, 13: 3, 16: 2, 17: 1}


def test_breadth_schedule_clamps_and_degenerate_cases():
    assert bfs_breadth(0, 18, 1, 10) == 10
    assert bfs_breadth(100, 18, 1, 10) == 1
    assert bfs_breadth(1, 2, 1, 10) == 10  # depth 2: only one-token matches exist
    assert {bfs_breadth(m, 18, 4, 4) for m in range(1, 18)} == {4}
    assert bfs_breadth(1, 3, 2, 6) == 6 and bfs_breadth(2, 3, 2, 6) == 2


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 40), st.integers(1, 10), st.integers(0, 20))
def test_breadth_schedule_is_monotone_within_bounds(depth, low, extra):
    high = low + extra
    values = [bfs_breadth(m, depth, low, high) for m in range(1, depth)]
    assert values[0] == high
    assert depth == 2 or values[-1] == low
    assert all(a >= b for a, b in itertools.pairwise(values))
    assert all(low <= v <= high for v in values)


# ---- insertion and counts
# ------------------------------------------------------------------------------


def test_insertion_counts_every_ngram_up_to_the_depth():
    trie = TokenTrie(capacity=100, max_depth=3)
    trie.insert([1, 2, 1, 2, 3])
    assert ngrams(trie) == {
        (1,): 2,
        (2,): 2,
        (3,): 1,
        (1, 2): 2,
        (2, 1): 1,
        (2, 3): 1,
        (1, 2, 1): 1,
        (2, 1, 2): 1,
        (1, 2, 3): 1,
    }
    assert trie.size == 9
    assert trie.find([1, 2, 1, 2]) is None
    assert trie.count[trie.find([1, 2])] == 2


def test_incremental_insertion_equals_one_shot():
    rng = np.random.default_rng(0)
    stream = rng.integers(0, 5, 300).tolist()
    one_shot = TokenTrie(10_000, 6)
    one_shot.insert(stream)
    proposer = TrieProposer(SpecOptions(method="trie", max_trie_depth=6))
    for end in range(0, 301, 13):
        proposer.accepted(stream[:end])
    proposer.accepted(stream)
    proposer.accepted(stream)  # nothing new: nothing inserted
    assert ngrams(proposer.trie) == ngrams(one_shot)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=80), st.integers(2, 6))
def test_counts_match_brute_force(tokens, depth):
    trie = TokenTrie(10_000, depth)
    tails = trie.insert(tokens)
    assert ngrams(trie) == dict(brute_ngrams(tokens, depth))
    # the tails are the suffixes of length 0..depth-1
    for m, node in enumerate(tails):
        assert node == trie.find(tokens[len(tokens) - m :])
    assert len(tails) == min(len(tokens), depth - 1) + 1


def test_token_range_is_checked():
    with pytest.raises(ValueError, match="token ids"):
        TokenTrie(100, 4).insert([-1])


# ---- eviction
# ------------------------------------------------------------------------------------------


def test_least_recently_used_leaf_goes_first():
    trie = TokenTrie(capacity=3, max_depth=2)
    for token in (5, 6, 7):
        trie.insert([token])
    trie.insert([5])  # 5 is used again: 6 is now the oldest
    trie.insert([8])
    assert set(ngrams(trie)) == {(5,), (7,), (8,)}
    trie.insert([9])
    assert set(ngrams(trie)) == {(5,), (8,), (9,)}
    assert trie.count[trie.find([5])] == 2
    assert trie.size == 3


def test_only_leaves_are_evicted():
    trie = TokenTrie(capacity=4, max_depth=2)
    trie.insert([1, 2])  # 1, 2, (1, 2): all last used at step 2
    trie.insert([2])  # 2 used at step 3
    trie.insert([4])  # full
    trie.insert([5])  # the oldest leaf is (1, 2); node 1 is as old but has a child
    assert set(ngrams(trie)) == {(1,), (2,), (4,), (5,)}
    trie.insert([6])  # now 1 is a leaf, and the oldest
    assert set(ngrams(trie)) == {(2,), (4,), (5,), (6,)}
    trie.insert([7])
    assert set(ngrams(trie)) == {(4,), (5,), (6,), (7,)}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 6), max_size=40), max_size=6),
    st.integers(2, 5),
    st.integers(0, 20),
)
def test_pool_never_overflows_and_stays_consistent(streams, depth, extra):
    capacity = min_trie_capacity(depth) + extra
    trie = TokenTrie(capacity, depth)
    for stream in streams:
        tails = [ROOT]
        for end, token in enumerate(stream, 1):
            tails = trie.extend(tails, token)
            assert trie.size <= capacity
            # a stream's own tails survive its insertion: they are its suffixes, alive in the trie
            assert tails == [trie.find(stream[end - m : end]) for m in range(len(tails))]
        assert len(ngrams(trie)) == trie.size
        assert all(count >= 1 for count in ngrams(trie).values())


def test_pool_at_the_minimum_capacity_keeps_the_newest_text():
    depth = 4
    trie = TokenTrie(min_trie_capacity(depth), depth)
    stream = list(range(200))  # all novel: every token creates `depth` nodes
    trie.insert(stream)
    assert trie.size == min_trie_capacity(depth)
    assert trie.find([197, 198, 199]) is not None
    assert trie.find([0]) is None


# ---- draft trees
# ---------------------------------------------------------------------------------------

CONTEXT = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3]


def test_draft_tree_by_hand():
    """Anchor [1, 2, 3] (breadth 9) has children 5 (newer) and 4, each followed by what came after
    them."""
    proposer = TrieProposer(SpecOptions(method="trie"))
    tree = proposer.propose(CONTEXT, 100)
    assert tree == DraftTree(
        tokens=(5, 4, 1, 1, 2, 2, 3, 3, 5, 1, 2, 3),
        parents=(-1, -1, 0, 1, 2, 3, 4, 5, 7, 8, 9, 10),
    )
    assert tree.best_path().tokens == (5, 1, 2, 3)
    assert proposer.propose(CONTEXT, 2) == DraftTree((5, 4), (-1, -1))


def test_chain_mode_is_the_best_path():
    proposer = TrieProposer(SpecOptions(method="trie", tree=False))
    tree = proposer.propose(CONTEXT, 100)
    assert tree == DraftTree.chain([5, 1, 2, 3])


def test_counts_beat_recency():
    proposer = TrieProposer(SpecOptions(method="trie"))
    tree = proposer.propose([7, 8, 7, 8, 7, 9, 7], 100)
    assert tree.tokens[:4] == (8, 9, 7, 7)
    assert tree.parents[:4] == (-1, -1, 0, 1)
    assert tree.best_path().tokens[:2] == (8, 7)


def test_caps_and_no_match():
    options = SpecOptions(method="trie", num_draft_tokens=3)
    proposer = TrieProposer(options)
    assert len(proposer.propose(CONTEXT, 100)) == 3
    assert len(proposer.propose(CONTEXT, 0)) == 0
    assert len(TrieProposer(options).propose([1, 2, 3, 4], 10)) == 0  # nothing recurs
    assert len(TrieProposer(options).propose([], 10)) == 0


def test_long_match_narrows_short_match_widens():
    """Many different tokens followed 0 before; a long repeated stretch has one continuation."""
    rng = np.random.default_rng(3)
    noise = []
    for token in rng.permutation(np.arange(10, 40)).tolist():
        noise += [0, token]
    short = TrieProposer(SpecOptions(method="trie", num_draft_tokens=12)).propose([*noise, 0], 100)
    assert len(short.children(-1)) == 10  # one-token match: max_bfs_breadth
    stretch = list(range(100, 130))
    long = TrieProposer(SpecOptions(method="trie")).propose(
        noise + stretch + noise[:20] + stretch[:20], 100
    )
    assert long.is_chain
    assert long.tokens == tuple((stretch + noise)[20:32])  # what followed the earlier stretch


def test_shared_scope_shares_and_request_scope_does_not():
    shared = proposer_factory(SpecOptions(method="trie", trie_scope="shared"))
    first, second = shared(), shared()
    assert first.trie is second.trie
    first.accepted([1, 2, 3, 4, 5, 6])
    assert second.propose([9, 1, 2, 3], 10).best_path().tokens == (4, 5, 6)

    private = proposer_factory(SpecOptions(method="trie"))
    first, second = private(), private()
    assert first.trie is not second.trie
    first.accepted([1, 2, 3, 4, 5, 6])
    assert len(second.propose([9, 1, 2, 3], 10)) == 0


def test_shared_trie_survives_eviction_of_another_requests_tails():
    depth = 4
    options = SpecOptions(
        method="trie",
        trie_scope="shared",
        max_trie_depth=depth,
        trie_capacity=min_trie_capacity(depth),
    )
    make = proposer_factory(options)
    first, second = make(), make()
    context = [1, 2, 3, 1, 2]
    first.accepted(context)
    second.accepted(list(range(100, 160)))  # evicts everything of the first request
    assert first.trie.find([1, 2, 3]) is None
    tree = first.propose([*context, 3, 1], 10)  # tails rebuilt, then extended
    assert tree.best_path().tokens[:1] == (2,)
    assert first.trie.size <= options.trie_capacity


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=120),
    st.integers(0, 20),
    st.booleans(),
    st.sampled_from(["request", "shared"]),
    st.integers(2, 8),
    st.integers(1, 16),
)
def test_every_proposal_is_a_valid_capped_tree(
    tokens, max_tokens, tree_mode, scope, depth, num_draft
):
    options = SpecOptions(
        method="trie",
        tree=tree_mode,
        trie_scope=scope,
        max_trie_depth=depth,
        num_draft_tokens=num_draft,
        trie_capacity=min_trie_capacity(depth),
    )
    make = proposer_factory(options)
    proposer, other = make(), make()
    other.accepted(tokens[::-1])
    for end in range(1, len(tokens) + 1, 5):
        tree = proposer.propose(tokens[:end], max_tokens)
        assert isinstance(tree, DraftTree)  # validated on construction
        assert len(tree) <= min(max_tokens, num_draft)
        assert tree_mode or tree.is_chain
        proposer.accepted(tokens[:end])


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.integers(0, 30), st.integers(0, 10_000), st.booleans())
def test_repetition_best_path_is_the_true_continuation(period, extra, seed, tree_mode):
    block = np.random.default_rng(seed).permutation(1000)[:period].tolist()  # distinct tokens
    stream = block * (5 + 40 // period)
    length = period + 1 + extra
    proposer = TrieProposer(SpecOptions(method="trie", tree=tree_mode))
    best = proposer.propose(stream[:length], 12).best_path()
    assert len(best) >= 1
    assert list(best.tokens) == stream[length : length + len(best)]
