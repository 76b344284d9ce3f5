"""What every draft proposer shares: one options object (`roofline.speculation.SpecOptions`, which
the CLI flags and the launcher's knobs are generated from) and the `Proposer` protocol the scheduler
calls.

A proposer guesses the tokens that follow the current context; the target model then verifies the
guess in one pass (greedy verification keeps the output exactly that of plain decoding), so a
proposer only changes speed, never the text. One proposer is made per request by the maker that
`roofline.engine.speculate.proposer_factory(options, runner)` returns; the scheduler thread alone
drives it:

    propose(context, max_tokens) -> DraftTree   # context = prompt + output so far; its last token is the root
    accepted(context)                           # after each verify step, with the new full context

Contexts only grow between calls for one request (the scheduler appends the accepted tokens and the
bonus token); proposers may keep incremental state on that assumption and check it cheaply.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from roofline.engine.speculate.tree import DraftTree
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
# model) lives in the closure the entry returns.
ProposerFactory = Callable[[SpecOptions, Any], Callable[[], Proposer]]
