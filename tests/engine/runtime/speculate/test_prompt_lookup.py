"""Prompt lookup (vLLM-style n-gram proposer): longest n-gram, earliest occurrence, caps."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline.engine.runtime.speculate import PromptLookupProposer, SpecOptions
from roofline.engine.runtime.speculate.prompt_lookup import lookup_continuation


def lookup(tokens, min_n, max_n, k) -> list[int]:
    return lookup_continuation(np.array(tokens, dtype=np.int64), min_n, max_n, k).tolist()


def reference(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """Brute force: longest n in [min_n, max_n], earliest earlier occurrence, up to k tokens after
    it."""
    length = len(tokens)
    for n in range(max_n, min_n - 1, -1):
        if n >= length:
            continue
        suffix = tokens[length - n :]
        # occurrence tokens[start:start+n], ending before the last token
        for start in range(0, length - n):
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + k][: max(k, 0)]
    return []


def test_longest_ngram_wins():
    tokens = [1, 2, 9, 0, 1, 2, 7, 5, 0, 1, 2]
    assert lookup(tokens, 2, 3, 1) == [7]  # [0, 1, 2] occurs at 3..5
    assert lookup(tokens, 2, 2, 1) == [9]  # only bigrams: [1, 2] first occurs at 0..1


def test_max_n_caps_the_match_length():
    tokens = [9, 2, 3, 4, 5, 1, 2, 3, 4, 6, 1, 2, 3, 4]
    assert lookup(tokens, 1, 4, 1) == [6]  # [1, 2, 3, 4] at 5..8
    assert lookup(tokens, 1, 3, 1) == [5]  # [2, 3, 4] first at 1..3


def test_min_n_is_respected():
    tokens = [5, 6, 7, 5]
    assert lookup(tokens, 2, 5, 3) == []  # only the 1-gram [5] recurs
    assert lookup(tokens, 1, 5, 3) == [6, 7, 5]


def test_earliest_occurrence_is_used():
    # vLLM keeps the earliest of equally long matches; the most recent would give [6].
    assert lookup([1, 2, 5, 1, 2, 6, 1, 2], 2, 2, 1) == [5]
    assert lookup([1, 2, 5, 1, 2, 6, 1, 2], 2, 2, 3) == [5, 1, 2]


def test_no_match_and_short_contexts():
    assert lookup([1, 2, 3, 4, 5], 1, 5, 4) == []
    assert lookup([], 1, 5, 4) == []
    assert lookup([7], 1, 5, 4) == []
    assert lookup([7, 7], 1, 5, 4) == [7]
    assert lookup([7, 7], 2, 5, 4) == []  # a 2-gram needs a third token to recur


def test_k_caps_and_the_context_end_cuts():
    tokens = [1, 2, 3, 4, 5, 6, 1, 2]
    assert lookup(tokens, 2, 5, 2) == [3, 4]
    assert lookup(tokens, 2, 5, 0) == []
    assert lookup([1, 2, 3, 1, 2], 2, 5, 5) == [3, 1, 2]  # only three tokens follow the occurrence


def test_proposer_caps_at_k_and_max_tokens():
    proposer = PromptLookupProposer(SpecOptions(method="ngram", k=3, prompt_lookup_min=1))
    context = [1, 2, 3, 4, 5, 6, 7, 1]
    assert proposer.propose(context, 10).tokens == (2, 3, 4)
    assert proposer.propose(context, 2).tokens == (2, 3)
    assert proposer.propose(context, 0).tokens == ()
    assert proposer.propose(context, 10).is_chain


def test_proposer_follows_growing_and_replaced_contexts():
    options = SpecOptions(method="ngram", k=4, prompt_lookup_min=1, prompt_lookup_max=4)
    proposer = PromptLookupProposer(options)
    rng = np.random.default_rng(0)
    stream = rng.integers(0, 6, 600).tolist()
    for end in range(1, 600, 7):  # growing, as a decode loop
        got = proposer.propose(stream[:end], 8)
        assert list(got.tokens) == reference(stream[:end], 1, 4, 4)
        proposer.accepted(stream[:end])
    other = [9, 8, 9, 8, 9]  # not an extension: the buffer is rebuilt
    assert list(proposer.propose(other, 8).tokens) == reference(other, 1, 4, 4)
    as_array = np.array(stream[:300])
    assert list(proposer.propose(as_array, 8).tokens) == reference(stream[:300], 1, 4, 4)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 4), max_size=60),
    st.integers(1, 4),
    st.integers(0, 3),
    st.integers(0, 6),
)
def test_matches_brute_force(tokens, min_n, extra, k):
    max_n = min_n + extra
    assert lookup(tokens, min_n, max_n, k) == reference(tokens, min_n, max_n, k)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(0, 40),
    st.integers(1, 5),
    st.integers(1, 8),
    st.integers(0, 10_000),
)
def test_exact_repetition_proposes_the_true_continuation(period, extra, min_n, k, seed):
    block = np.random.default_rng(seed).permutation(1000)[:period].tolist()  # distinct tokens
    length = period + min_n + extra  # >= one period plus an n-gram: the suffix recurs
    stream = block * (length // period + k + 2)
    context = stream[:length]
    got = lookup(context, min_n, 5 + min_n, k)
    assert 1 <= len(got) <= k
    assert got == stream[length : length + len(got)]


def test_long_context_is_fast():
    """A loose sanity bound (about 100x what it takes): prompt lookup is called every decode
    step."""
    rng = np.random.default_rng(1)
    proposer = PromptLookupProposer(SpecOptions(method="ngram"))
    context = rng.integers(0, 50, 8192).tolist()
    proposer.propose(context, 4)
    start = time.perf_counter()
    for _ in range(100):
        proposer.propose(context, 4)
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("tokens", [[3, 1, 3, 1, 3], [0, 0, 0, 0]])
def test_overlapping_occurrences(tokens):
    assert lookup(tokens, 1, 5, 4) == reference(tokens, 1, 5, 4)
