"""Choosing the next token from a row of logits: greedy, or temperature / top-k / top-p sampling.

With logits z and temperature T the sampling distribution is p_i = exp(z_i / T) / sum_j exp(z_j /
T). top-k keeps the k most likely tokens; top-p (nucleus) keeps the smallest set of most likely
tokens whose mass reaches p. Both renormalise what they keep. T == 0 means greedy: argmax, the
lowest index on ties.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Nucleus sampling looks at this many most likely tokens first (an O(vocab) partition instead of a
# full O(vocab log vocab) sort); only when their mass falls short of top_p does it sort the whole
# row.
_NUCLEUS_CANDIDATES = 256


@dataclass(frozen=True)
class SamplingParams:
    """How one request decodes. temperature 0 -> greedy; top_k 0 -> off; top_p 1 -> off."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {self.max_tokens}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        # Lists from JSON become tuples so the params stay hashable and immutable.
        object.__setattr__(self, "stop", tuple(s for s in self.stop if s))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def greedy_token(logits: np.ndarray) -> int:
    """argmax; numpy returns the first (lowest) index among equal maxima."""
    return int(np.argmax(logits))


def _candidates(logits: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest logits, most likely first (ties: lower index first)."""
    if k >= logits.shape[0]:
        return np.argsort(-logits, kind="stable")
    top = np.argpartition(-logits, k - 1)[:k]
    # Sort the survivors by (-logit, index) so the order, and hence the draw, is deterministic.
    return top[np.lexsort((top, -logits[top]))]


def _softmax(scaled: np.ndarray) -> np.ndarray:
    e = np.exp(scaled - scaled.max())
    return e / e.sum()


def sample(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """Next token id from float32 logits of shape (vocab,)."""
    if params.greedy:
        return greedy_token(logits)
    scaled = logits.astype(np.float64) / params.temperature
    vocab = scaled.shape[0]
    k = params.top_k if 0 < params.top_k < vocab else vocab
    if k == vocab and params.top_p >= 1.0:
        # Plain temperature sampling over the full vocabulary: inverse-CDF draw.
        probs = _softmax(scaled)
        return int(
            min(
                np.searchsorted(np.cumsum(probs), rng.random() * probs.sum(), side="right"),
                vocab - 1,
            )
        )
    # The candidates: top-k, or (nucleus only) a short list that usually holds the top_p mass.
    order = _candidates(scaled, min(k, _NUCLEUS_CANDIDATES) if k == vocab else k)
    top = scaled.max()
    weights = np.exp(scaled[order] - top)  # unnormalised probabilities of the candidates
    if params.top_p < 1.0:
        # Mass is measured against what top-k kept (renormalised, as HF and vLLM do) or the full
        # row.
        total = weights.sum() if k < vocab else np.exp(scaled - top).sum()
        if k == vocab and weights.sum() < params.top_p * total:
            order = _candidates(scaled, vocab)  # the short list fell short: sort everything
            weights = np.exp(scaled[order] - top)
        # Smallest prefix whose mass reaches top_p (the most likely token always stays).
        keep = int(np.searchsorted(np.cumsum(weights), params.top_p * total, side="left")) + 1
        order, weights = order[:keep], weights[:keep]
    cdf = np.cumsum(weights)
    pick = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return int(order[min(pick, order.shape[0] - 1)])


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The distribution `sample` draws from, as a dense float64 vector (vocab,): temperature, then
    top-k, then top-p over what top-k kept, renormalised; greedy is a point mass on the argmax.
    Speculative sampling needs the probabilities themselves (accept a draft token x with probability
    p(x))."""
    vocab = logits.shape[0]
    p = np.zeros(vocab, dtype=np.float64)
    if params.greedy:
        p[greedy_token(logits)] = 1.0
        return p
    scaled = logits.astype(np.float64) / params.temperature
    k = params.top_k if 0 < params.top_k < vocab else vocab
    order = _candidates(scaled, k)
    weights = np.exp(scaled[order] - scaled.max())
    if params.top_p < 1.0:
        keep = (
            int(np.searchsorted(np.cumsum(weights), params.top_p * weights.sum(), side="left")) + 1
        )
        order, weights = order[:keep], weights[:keep]
    p[order] = weights / weights.sum()
    return p


def sample_from(p: np.ndarray, rng: np.random.Generator) -> int:
    """A token drawn from a probability vector (inverse CDF)."""
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), p.shape[0] - 1))
