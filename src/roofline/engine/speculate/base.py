"""What every draft proposer shares: one options object (the CLI flags map 1:1 onto its fields) and
the `Proposer` protocol the scheduler calls.

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
from dataclasses import dataclass
from typing import Any, Protocol

from roofline.engine.speculate.tree import DraftTree
from roofline.engine.weights import DTYPES

TRIE_SCOPES = ("request", "shared")


@dataclass(frozen=True)
class SpecOptions:
    """Speculative decoding settings for all proposers; field = CLI flag (`k` is --spec-k)."""

    method: str = "none"  # "none" or a name in roofline.engine.speculate.PROPOSERS
    k: int = 4  # tokens drafted per step by chain proposers (ngram, draft)
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 5
    max_bfs_breadth: int = 10  # SGLang's default
    min_bfs_breadth: int = 1
    max_trie_depth: int = 18
    num_draft_tokens: int = 12  # tree size cap (nodes; the root is not counted)
    trie_capacity: int = 1_000_000  # trie nodes; least recently used leaves are evicted beyond
    trie_scope: str = "request"  # "request" | "shared" (one trie for all requests of a server)
    tree: bool = True  # trie: False = chain mode (the best path only)
    draft_dtype: str = "int8"  # draft proposer (not implemented here; carried)
    draft_model: str | None = None
    adaptive: bool = True

    def __post_init__(self) -> None:
        from roofline.engine.speculate import PROPOSERS  # the registry imports this module

        if self.method != "none" and self.method not in PROPOSERS:
            known = ", ".join(["none", *PROPOSERS])
            raise ValueError(f"method must be one of {known}; got {self.method!r}")
        for name in ("k", "prompt_lookup_min", "min_bfs_breadth", "num_draft_tokens"):
            _check_int(name, getattr(self, name), 1)
        _check_int(
            "prompt_lookup_max",
            self.prompt_lookup_max,
            self.prompt_lookup_min,
            "prompt_lookup_min must be <= prompt_lookup_max",
        )
        _check_int(
            "max_bfs_breadth",
            self.max_bfs_breadth,
            self.min_bfs_breadth,
            "min_bfs_breadth must be <= max_bfs_breadth",
        )
        _check_int(
            "max_trie_depth",
            self.max_trie_depth,
            2,
            "max_trie_depth must be >= 2 (a match of one token plus one drafted token)",
        )
        floor = min_trie_capacity(self.max_trie_depth)
        _check_int(
            "trie_capacity",
            self.trie_capacity,
            floor,
            f"trie_capacity must be >= max_trie_depth * (max_trie_depth + 1) / 2 = {floor} "
            "(the nodes one insertion step may pin)",
        )
        if self.trie_scope not in TRIE_SCOPES:
            raise ValueError(
                f"trie_scope must be one of {', '.join(TRIE_SCOPES)}; got {self.trie_scope!r}"
            )
        for name in ("tree", "adaptive"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool; got {getattr(self, name)!r}")
        if self.draft_dtype not in DTYPES:
            raise ValueError(
                f"draft_dtype must be one of {', '.join(DTYPES)}; got {self.draft_dtype!r}"
            )
        if self.draft_model is not None and (
            not isinstance(self.draft_model, str) or not self.draft_model
        ):
            raise ValueError(
                f"draft_model must be None or a non-empty string; got {self.draft_model!r}"
            )


def min_trie_capacity(max_trie_depth: int) -> int:
    """Smallest trie pool that always has an evictable leaf: the suffixes of length <=
    max_trie_depth that one insertion step touches span at most 1 + 2 + ... + max_trie_depth
    nodes."""
    return max_trie_depth * (max_trie_depth + 1) // 2


def _check_int(name: str, value: object, low: int, message: str | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int; got {value!r}")
    if value < low:
        raise ValueError(message or f"{name} must be >= {low}; got {value}")


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
