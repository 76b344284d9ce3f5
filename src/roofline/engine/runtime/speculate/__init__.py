"""Speculative decoding: draft proposers and draft trees.

A proposer guesses the next tokens (`DraftTree`, a chain or tree after the last chosen token); the
target verifies them in one pass. The one registry is `roofline.speculation.PROPOSERS` (names,
traits, and where each factory lives: `factory_of`). ngram: prompt lookup (vLLM); trie:
suffix-trie n-grams (SGLang); suffix: Suffix Decoding (ArcticInference); draft: a cheaper model.

    make = proposer_factory(SpecOptions(method="trie"), runner)  # None for method "none"
    proposer = make()                                            # one per request
    tree = proposer.propose(context, max_tokens)                 # context[-1] is the root
    proposer.accepted(new_context)                               # after the verify step
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from roofline import speculation
from roofline.engine.runtime.speculate.base import Proposer, ProposerFactory, SpecOptions
from roofline.engine.runtime.speculate.prompt_lookup import PromptLookupProposer
from roofline.engine.runtime.speculate.tree import DraftTree, ancestor_positions, tree_mask
from roofline.engine.runtime.speculate.trie import TrieProposer, bfs_breadth


def factory_of(method: str) -> ProposerFactory:
    """The engine's factory of a proposer of roofline.speculation.PROPOSERS, imported from the
    "module:attribute" its entry names (the draft model's module loads a second runner: only
    when asked)."""
    module, _, attribute = speculation.PROPOSERS[method].factory.partition(":")
    found: object = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    if not callable(found):
        raise TypeError(f"proposer {method!r}: {attribute} in {module} is not callable")
    return found  # type: ignore[return-value]


def proposer_factory(options: SpecOptions, target: object = None) -> Callable[[], Proposer] | None:
    """A maker of one proposer per request for `options.method`; None for "none". `target` is the
    target model's runner (the n-gram proposers ignore it). Proposers from one returned maker share
    what the method shares (the trie, under trie_scope "shared")."""
    if options.method == "none":
        return None
    return factory_of(options.method)(options, target)


__all__ = [
    "DraftTree",
    "PromptLookupProposer",
    "Proposer",
    "ProposerFactory",
    "SpecOptions",
    "TrieProposer",
    "ancestor_positions",
    "bfs_breadth",
    "factory_of",
    "proposer_factory",
    "tree_mask",
]
