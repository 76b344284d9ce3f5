"""What every draft proposer shares: one options object (`roofline.speculation.SpecOptions`, from
which the CLI flags and the launcher's knobs are generated) and the `Proposer` protocol.

A proposer changes speed, never the text (the target verifies). One is made per request by
`proposer_factory(options, runner)`'s maker; only the scheduler thread calls it:

    propose(context, max_tokens) -> DraftTree   # context = prompt + output; context[-1] is the root
    accepted(context)                           # after each verify step, the new full context

A request's context only grows between calls, so proposers may keep incremental state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from roofline.engine.runtime.speculate.tree import DraftTree
from roofline.speculation import TRIE_SCOPES, SpecOptions, min_trie_capacity

__all__ = ["TRIE_SCOPES", "Proposer", "ProposerFactory", "SpecOptions", "min_trie_capacity"]


class Proposer(Protocol):
    """One per request (made by the registry's factory). Not thread-safe; the scheduler thread calls
    it."""

    def propose(self, context: Sequence[int], max_tokens: int) -> DraftTree:
        """Draft tokens to follow context[-1] (the root): at most max_tokens nodes (0 -> the empty
        tree)."""
        ...

    def accepted(self, context: Sequence[int]) -> None:
        """The new full context after a verify step (prompt + output so far). Cheap."""
        ...


# A registry entry: given the options and the target model's runner, a maker of one proposer per
# request. Everything the proposers of one maker share (the trie under trie_scope "shared", a draft
# model) lives in the closure the entry returns; a maker whose proposers learn from one request for
# the next (the shared trie) carries `cross_request = True`, which the server reports (a benchmark
# that repeats a prompt then measures that memory).
ProposerFactory = Callable[[SpecOptions, Any], Callable[[], Proposer]]
