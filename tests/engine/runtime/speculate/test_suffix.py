"""Suffix decoding: the depth-bounded suffix trie (insertion, removal, matching), the draft-size
rule, the probability cutoff, the shared scope's FIFO eviction and the choice of the better-scoring
structure, on hand-built token streams."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline.engine.runtime.speculate import DraftTree, SpecOptions, proposer_factory
from roofline.engine.runtime.speculate.suffix import (
    ROOT,
    SharedSuffixes,
    SuffixProposer,
    SuffixTrie,
    best_draft,
    draft_size,
    longest_match,
)


def ngrams(trie: SuffixTrie) -> dict[tuple[int, ...], int]:
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


def brute_ngrams(streams: list[list[int]], depth: int) -> Counter:
    return Counter(
        tuple(s[i : i + n])
        for s in streams
        for n in range(1, depth + 1)
        for i in range(len(s))
        if i + n <= len(s)
    )


def suffix(**kw) -> SuffixProposer:
    return proposer_factory(SpecOptions("suffix", **kw))()


# ---- the trie ------------------------------------------------------------------------------------


def test_insertion_counts_every_ngram_up_to_the_depth():
    trie = SuffixTrie(3)
    tails = trie.insert([1, 2, 1, 2, 3])
    assert ngrams(trie) == {
        (1,): 2, (2,): 2, (3,): 1,
        (1, 2): 2, (2, 1): 1, (2, 3): 1,
        (1, 2, 1): 1, (2, 1, 2): 1, (1, 2, 3): 1,
    }  # fmt: skip
    assert trie.count[ROOT] == 5 and len(trie) == 9
    assert tails == [ROOT, trie.find([3]), trie.find([2, 3])]  # suffixes of length 0..depth-1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 4), max_size=40), min_size=1, max_size=4), st.integers(2, 6)
)
def test_counts_match_brute_force_and_removal_undoes_insertion(streams, depth):
    trie = SuffixTrie(depth)
    for s in streams:
        trie.insert(s)
    assert ngrams(trie) == brute_ngrams(streams, depth)
    trie.remove(streams[0])
    assert ngrams(trie) == brute_ngrams(streams[1:], depth)
    assert len(trie) == len(brute_ngrams(streams[1:], depth))  # zero-count nodes are gone
    assert trie.count[ROOT] == sum(map(len, streams[1:]))
    trie.insert(streams[0])  # freed nodes are reused and stay consistent
    assert ngrams(trie) == brute_ngrams([*streams[1:], streams[0]], depth)


def test_incremental_insertion_equals_one_shot():
    tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    one, steps = SuffixTrie(4), SuffixTrie(4)
    one.insert(tokens)
    tails = [ROOT]
    for t in tokens:
        tails = steps.extend(tails, t)
    assert ngrams(one) == ngrams(steps)
    with pytest.raises(ValueError, match="token ids"):
        steps.extend(tails, -1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=60), st.integers(2, 6))
def test_children_are_listed_newest_first(tokens, depth):
    """A token's new n-grams are made in one go (`_new_nodes`); each parent still lists its
    children by their n-gram's first occurrence, newest first (chain drafts break ties so)."""
    trie = SuffixTrie(depth)
    trie.insert(tokens)
    first_end: dict[tuple[int, ...], int] = {}
    for end in range(1, len(tokens) + 1):
        for n in range(1, min(depth, end) + 1):
            first_end.setdefault(tuple(tokens[end - n : end]), end)
    stack: list[tuple[int, tuple[int, ...]]] = [(ROOT, ())]
    while stack:
        node, path = stack.pop()
        grams = [(*path, trie.token[child]) for child in trie.children(node)]
        assert [first_end[g] for g in grams] == sorted((first_end[g] for g in grams), reverse=True)
        stack += [(child, g) for child, g in zip(trie.children(node), grams)]


def test_longest_match_is_the_longest_tail_with_a_continuation():
    trie = SuffixTrie(4)
    trie.insert([1, 2, 3, 4, 1, 2, 5])
    assert longest_match(trie, [9, 1, 2]) == 2  # [1, 2] is followed by 3 and 5
    assert longest_match(trie, [3, 4, 1]) == 3  # [3, 4, 1] by 2
    assert longest_match(trie, [2, 3, 4, 1]) == 3  # at most depth - 1: room for one more token
    assert longest_match(trie, [4, 1, 2, 5]) == 0  # 5 ends the stream: nothing follows it
    assert longest_match(trie, []) == 0


# ---- drafts --------------------------------------------------------------------------------------

A = list(range(100, 140))  # distinct tokens
B = list(range(200, 210))


def test_draft_size_rule():
    assert draft_size(5, 12, 1.0, 0.0) == 5
    assert draft_size(20, 12, 1.0, 0.0) == 12  # capped
    assert draft_size(5, 12, 0.5, 0.0) == 2  # floor
    assert draft_size(100, 40, 0.29, 0.0) == 29  # 0.29 * 100 is 28.999... in floats
    assert draft_size(1, 12, 0.0, 3.0) == 3
    assert draft_size(2, 12, 1.0, -2.0) == 0 and draft_size(1, 12, 1.0, -5.0) == 0


@pytest.mark.parametrize(
    ("m", "factor", "offset", "cap", "want"),
    [(6, 1.0, 0.0, 12, 6), (6, 0.5, 0.0, 12, 3), (6, 2.0, 0.0, 8, 8), (6, 0.0, 2.0, 12, 2)],
)
def test_the_draft_grows_with_the_match(m, factor, offset, cap, want):
    """A + B + A[:m]: the tail matches m tokens; the draft continues A for size(m) tokens, each at
    p = 1/2 (one earlier occurrence, plus the tail's own)."""
    proposer = suffix(spec_max_factor=factor, spec_offset=offset, num_draft_tokens=cap)
    draft = proposer.draft(A + B + A[:m], 99)
    assert draft.match_len == m
    assert draft.tree == DraftTree.chain(A[m : m + want])
    assert draft.probs == (0.5,) * want and draft.score == 0.5 * want
    assert len(proposer.propose(A + B + A[:m], 1)) == 1  # max_tokens caps too


def test_a_match_leaves_room_only_up_to_the_depth():
    """Depth 8: the 6-token match could draft only 2 levels; the 4-token match drafts 4 and wins."""
    draft = suffix(suffix_max_depth=8).draft(A + B + A[:6], 99)
    assert (draft.match_len, draft.tree.tokens) == (4, tuple(A[6:10]))


def test_no_match_no_draft():
    assert len(suffix().propose(A, 12)) == 0
    assert len(suffix(spec_offset=-3.0).propose(A + B + A[:3], 12)) == 0  # size(3) = 0


def branching_context() -> list[int]:
    """[1, 2] is followed by 3 eight times, by 4 once, and ends the context: count 10."""
    text = [t for i in range(8) for t in (1, 2, 3, 50 + i)]
    return [*text, 1, 2, 4, 70, 1, 2]


@pytest.mark.parametrize("tree", [True, False])
def test_probability_cutoff_drops_unlikely_branches(tree):
    options = {"tree": tree, "spec_max_factor": 4.0}
    loose = suffix(spec_min_prob=0.05, **options).draft(branching_context(), 99)
    strict = suffix(spec_min_prob=0.15, **options).draft(branching_context(), 99)
    # p(3) = 8/10; p(4) = 1/10; below 3 each of eight successors: 0.8 * 1/8
    assert strict.tree.tokens == (3,) and strict.probs == pytest.approx((0.8,))
    assert loose.tree.tokens[0] == 3 and len(loose.tree) == 8
    assert all(p >= 0.05 for p in loose.probs)
    assert (4 in loose.tree.tokens[:2]) == tree  # the tree keeps the sibling, the chain cannot
    assert loose.probs[:2] == pytest.approx((0.8, 0.1))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=120),
    st.integers(0, 20),
    st.booleans(),
    st.sampled_from(["request", "shared"]),
    st.integers(2, 8),
    st.integers(1, 16),
    st.sampled_from([0.0, 0.1, 0.4]),
)
def test_every_draft_is_a_valid_capped_tree(
    tokens, max_tokens, tree_mode, scope, depth, num_draft, min_prob
):
    options = SpecOptions(
        "suffix",
        tree=tree_mode,
        suffix_scope=scope,
        suffix_max_depth=depth,
        num_draft_tokens=num_draft,
        spec_min_prob=min_prob,
        suffix_cache_requests=2,
    )
    make = proposer_factory(options)
    other, proposer = make(), make()
    other.accepted(tokens[:1])
    other.accepted(tokens[::-1])
    for end in range(1, len(tokens) + 1, 5):
        draft = proposer.draft(tokens[:end], max_tokens)
        assert len(draft.tree) <= min(max_tokens, num_draft)
        assert tree_mode or draft.tree.is_chain
        assert len(draft.probs) == len(draft.tree) and all(p >= min_prob for p in draft.probs)
        depths = draft.tree.depths()
        for i, parent in enumerate(draft.tree.parents):
            assert parent < 0 or draft.probs[i] <= draft.probs[parent]
            assert draft.match_len + depths[i] <= depth
        proposer.accepted(tokens[:end])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(0, 30), st.integers(0, 10_000), st.booleans())
def test_repetition_best_path_is_the_true_continuation(period, extra, seed, tree_mode):
    block = np.random.default_rng(seed).permutation(1000)[:period].tolist()
    stream = block * (5 + 40 // period)
    length = period + 1 + extra
    best = suffix(tree=tree_mode).propose(stream[:length], 12).best_path()
    assert len(best) >= 1
    assert list(best.tokens) == stream[length : length + len(best)]


# ---- scopes --------------------------------------------------------------------------------------


def test_request_scope_shares_nothing():
    make = proposer_factory(SpecOptions("suffix"))
    first, second = make(), make()
    assert first.shared is None and first.local is not second.local
    first.accepted([7])
    first.accepted([7, *A])
    assert len(second.propose([9, *A[:5]], 12)) == 0


def test_shared_scope_holds_outputs_not_prompts():
    make = proposer_factory(SpecOptions("suffix", suffix_scope="shared"))
    first, second = make(), make()
    assert first.shared is second.shared
    first.accepted(B)  # the first context seen: the prompt
    first.accepted(B + A[:10])  # output
    assert first.shared.trie.find(B[:2]) is None and first.shared.trie.find(A[:10]) is not None
    draft = second.draft([9, *A[:4]], 12)
    assert draft.tree.tokens == tuple(A[4:8]) and draft.probs == (1.0,) * 4


def test_shared_scope_evicts_the_oldest_request_with_its_counts():
    shared = SharedSuffixes(depth=5, limit=2)
    streams = [shared.open() for _ in range(2)]
    shared.append(streams[0], A[:10])
    shared.append(streams[1], B)
    third = shared.open()  # the first is removed
    shared.append(third, A[20:30])
    shared.append(streams[0], A[10:20])  # evicted: no longer extended
    assert len(shared) == 2
    assert ngrams(shared.trie) == brute_ngrams([B, A[20:30]], 5)
    assert shared.trie.find(A[:2]) is None

    make = proposer_factory(SpecOptions("suffix", suffix_scope="shared", suffix_cache_requests=1))
    first, second = make(), make()
    first.accepted([1])
    first.accepted([1, *A[:10]])
    second.accepted([2])
    second.accepted([2, *B])  # opens the second stream: the first's output is gone
    assert len(second.shared) == 1 and second.shared.trie.find(A[:2]) is None
    assert len(make().propose([9, *A[:4]], 12)) == 0


def test_the_better_scoring_structure_wins():
    make = proposer_factory(SpecOptions("suffix", suffix_scope="shared"))
    teacher = make()
    teacher.accepted([1])
    teacher.accepted([1, *A[:8], *B, *A[:8], *B])  # shared: A[:4] -> A[4] twice, p = 1
    own = [*A[:4], 50, 51, 52, 53, 60, *A[:4]]  # local: A[:4] -> 50 once, p = 1/2
    draft = make().draft(own, 4)
    assert draft.tree.tokens == tuple(A[4:8]) and draft.score == 4.0

    own = [*A[:4], 50, 51, 52, 53] * 3 + A[:4]  # local: p = 3/4 each, and the longer match
    local = make().draft(own, 12)
    assert local.tree.tokens[:4] == (50, 51, 52, 53)
    alone = SuffixProposer(SpecOptions("suffix")).draft(own, 12)
    assert local == alone  # the shared draft scored lower: the request's own drafts stand


def test_a_proposal_leaves_its_match_length_for_the_acceptance_statistics():
    p = SuffixProposer.factory(SpecOptions("suffix", adaptive=False))()
    p.propose([5, 6, 7, 5, 6], 8)  # "5 6" seen before, followed by 7
    assert p.match_len == 2
    p.propose([1, 2, 3], 8)  # nothing repeats: no match
    assert p.match_len is None


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=2, max_size=150),
    st.integers(3, 10),
    st.integers(1, 24),
    st.sampled_from([0.5, 1.0, 4.0]),
    st.booleans(),
)
def test_skipping_matches_that_cannot_win_changes_no_draft(tokens, depth, cap, factor, tree):
    """In the request's own trie a match's draft is expanded only when its bound can beat the best
    so far: the drafts equal those of expanding every match."""
    options = SpecOptions(
        "suffix", tree=tree, suffix_max_depth=depth, spec_max_factor=factor, spec_min_prob=0.0
    )
    proposer = SuffixProposer(options)
    for end in range(2, len(tokens) + 1, 7):
        proposer.accepted(tokens[:end])
        tails, trie = proposer._tails, proposer.local
        longest = next((m for m in range(len(tails) - 1, 0, -1) if trie.continues(tails[m])), 0)
        pruned = best_draft(trie, tails.__getitem__, longest, cap, options, True)
        every = best_draft(trie, tails.__getitem__, longest, cap, options, False)
        assert pruned == every
