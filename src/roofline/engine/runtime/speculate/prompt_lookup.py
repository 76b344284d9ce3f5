"""Prompt lookup (vLLM's `ngram` method): guess that the text repeats itself.

Context a[0..L-1]: find the largest n in [min_n, max_n] whose suffix a[L-n..L-1] also ends earlier,
at some j <= L-2, and draft the (up to) k tokens after it, a[j+1 .. j+k]; none -> no draft. Of the
longest matches take the EARLIEST, as vLLM does: in a periodic context it leaves the most tokens
before the end, where the latest (one period back) may run into it.

Search, O(L) numpy work, then work proportional to the surviving candidates:

    cand_1 = { j <= L-2 : a[j] == a[L-1] }
    cand_{m+1} = { j in cand_m : j >= m and a[j-m] == a[L-1-m] }    (matching m+1 tokens)

The longest match is the last non-empty cand_m with m <= max_n; j = min(cand_m).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from roofline.engine.runtime.speculate.base import SpecOptions
from roofline.engine.runtime.speculate.tree import DraftTree


def longest_match(tokens: np.ndarray, min_n: int, max_n: int) -> tuple[int, int]:
    """(end, n): the earliest earlier occurrence of the longest suffix n-gram of `tokens` with
    min_n <= n <= max_n ends at `end`; (-1, 0) when there is none."""
    length = len(tokens)
    if length < min_n + 1:  # an earlier occurrence of an n-gram needs n + 1 tokens
        return -1, 0
    cand = np.flatnonzero(tokens[: length - 1] == tokens[length - 1])
    best_end, best_n = -1, 0
    m = 1
    while cand.size:
        if m >= min_n:
            best_end, best_n = int(cand[0]), m
        if m == max_n:
            break
        cand = cand[cand >= m]
        cand = cand[tokens[cand - m] == tokens[length - 1 - m]]
        m += 1
    return best_end, best_n


def lookup_continuation(tokens: np.ndarray, min_n: int, max_n: int, k: int) -> np.ndarray:
    """The (up to) k tokens after the earliest earlier occurrence of the longest suffix n-gram of
    `tokens` with min_n <= n <= max_n; an empty array when there is none (or k <= 0)."""
    if k <= 0:
        return tokens[:0]
    end, _ = longest_match(tokens, min_n, max_n)
    return tokens[:0] if end < 0 else tokens[end + 1 : end + 1 + k]


class PromptLookupProposer:
    """vLLM-style n-gram (prompt lookup) proposer for one request: drafts a chain of up to k
    tokens."""

    def __init__(self, options: SpecOptions) -> None:
        self.min_n = options.prompt_lookup_min
        self.max_n = options.prompt_lookup_max
        self.k = options.k
        self._buf = np.zeros(256, dtype=np.int64)
        self._len = 0
        self.match_len: int | None = None  # of the last proposal

    @classmethod
    def factory(
        cls, options: SpecOptions, target: object = None
    ) -> Callable[[], PromptLookupProposer]:
        """The registry entry: a maker of one proposer per request (`target`, the runner, is
        unused)."""
        return lambda: cls(options)

    def propose(self, context: Sequence[int], max_tokens: int) -> DraftTree:
        self._sync(context)
        k, tokens = min(self.k, max_tokens), self._buf[: self._len]
        end, n = longest_match(tokens, self.min_n, self.max_n)
        if k <= 0 or end < 0:
            self.match_len = None
            return DraftTree.empty()
        self.match_len = n  # the acceptance statistics' bucket (adaptive.py)
        return DraftTree.chain(tokens[end + 1 : end + 1 + k].tolist())

    def accepted(self, context: Sequence[int]) -> None:
        """Nothing to learn: the next `propose` reads the context it is given."""

    def _sync(self, context: Sequence[int]) -> None:
        """Make the buffer equal the context, converting only what is new when the context extends
        it."""
        n = len(context)
        extends = self._len <= n and (
            self._len == 0 or int(context[self._len - 1]) == self._buf[self._len - 1]
        )
        start = self._len if extends else 0
        if n > len(self._buf):
            grown = np.zeros(max(n, 2 * len(self._buf)), dtype=np.int64)
            grown[:start] = self._buf[:start]
            self._buf = grown
        if n > start:
            self._buf[start:n] = np.asarray(context[start:n], dtype=np.int64)
        self._len = n
