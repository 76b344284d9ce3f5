"""Sampling: greedy is argmax (lowest index on ties), seeds reproduce, top-k / top-p keep the right
tokens with the right renormalised probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from roofline.engine.runtime.sampling import SamplingParams, sample

# probs at T=1
LOGITS = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15], dtype=np.float64)).astype(np.float32)


def frequencies(params: SamplingParams, logits=LOGITS, n=20000, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.bincount([sample(logits, params, rng) for _ in range(n)], minlength=logits.shape[0])
    return counts / n


def test_greedy_is_argmax_with_lowest_index_on_ties():
    logits = np.array([0.0, 3.0, -1.0, 3.0, 3.0], np.float32)
    rng = np.random.default_rng(0)
    assert sample(logits, SamplingParams(temperature=0), rng) == 1
    # greedy ignores top-k / top-p and consumes no randomness
    state = rng.bit_generator.state
    assert sample(logits, SamplingParams(temperature=0, top_k=2, top_p=0.1), rng) == 1
    assert rng.bit_generator.state == state


def test_same_seed_same_tokens_different_seed_different_tokens():
    logits = np.random.default_rng(5).standard_normal(1000).astype(np.float32)
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=7)

    def draw(seed):
        rng = np.random.default_rng(seed)
        return [sample(logits, params, rng) for _ in range(50)]

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_temperature_one_follows_the_softmax():
    freq = frequencies(SamplingParams(temperature=1.0))
    np.testing.assert_allclose(freq, [0.05, 0.4, 0.1, 0.3, 0.15], atol=0.015)


def test_low_temperature_concentrates_on_the_argmax():
    freq = frequencies(SamplingParams(temperature=0.05), n=2000)
    assert freq[1] > 0.99


def test_top_k_keeps_the_k_most_likely_renormalised():
    freq = frequencies(SamplingParams(temperature=1.0, top_k=2))
    assert freq[[0, 2, 4]].sum() == 0
    np.testing.assert_allclose(freq[[1, 3]], [0.4 / 0.7, 0.3 / 0.7], atol=0.015)


def test_top_p_keeps_the_smallest_prefix_reaching_the_mass():
    # sorted probs 0.4, 0.3, 0.15, 0.1, 0.05: cumulative 0.4, 0.7, 0.85 -> top_p 0.8 keeps three
    # tokens
    freq = frequencies(SamplingParams(temperature=1.0, top_p=0.8))
    assert freq[[0, 2]].sum() == 0
    np.testing.assert_allclose(freq[[1, 3, 4]], np.array([0.4, 0.3, 0.15]) / 0.85, atol=0.015)
    # a mass the first token already reaches keeps only it
    assert set(np.nonzero(frequencies(SamplingParams(top_p=0.3), n=500))[0]) == {1}


def test_top_p_over_a_large_vocabulary_matches_a_full_sort():
    """The short-candidate-list shortcut and the full-sort fallback keep the same set as a
    brute-force nucleus."""
    rng = np.random.default_rng(3)
    for flat in (False, True):  # peaked (mass in few tokens) and flat (mass spread over thousands)
        logits = (rng.standard_normal(50000) * (0.2 if flat else 4.0)).astype(np.float32)
        probs = np.exp(logits.astype(np.float64) - logits.max())
        probs /= probs.sum()
        order = np.argsort(-probs, kind="stable")
        keep = np.searchsorted(np.cumsum(probs[order]), 0.9) + 1
        allowed = set(order[:keep].tolist())
        draws = {sample(logits, SamplingParams(top_p=0.9), rng) for _ in range(100)}
        assert draws <= allowed, f"flat={flat}: sampled outside the nucleus"


def test_top_k_and_top_p_combine():
    # top_k=3 keeps 0.4, 0.3, 0.15 (mass 0.85); top_p 0.8 of that renormalised mass keeps 0.4 and
    # 0.3
    freq = frequencies(SamplingParams(top_k=3, top_p=0.8))
    assert freq[[0, 2, 4]].sum() == 0
    np.testing.assert_allclose(freq[[1, 3]], [0.4 / 0.7, 0.3 / 0.7], atol=0.015)


@pytest.mark.parametrize(
    "bad",
    [dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(top_k=-1), dict(max_tokens=-2)],
)
def test_invalid_params_are_rejected(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad)


def test_stop_lists_become_tuples():
    p = SamplingParams(stop=["a", "", "b"], stop_token_ids=[3, 4])
    assert p.stop == ("a", "b") and p.stop_token_ids == (3, 4)
    hash(p)
