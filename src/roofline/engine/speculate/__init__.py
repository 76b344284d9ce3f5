"""Speculative decoding: draft proposers and draft trees.

A proposer guesses the next tokens (`DraftTree`, a chain or tree after the last chosen token); the
target verifies them in one pass. `PROPOSERS` maps each name of `roofline.speculation.PROPOSERS`
(names and traits, read by the CLI and the launcher) to its `ProposerFactory`; both name the same
proposers (checked at import). ngram: prompt lookup (vLLM); trie: suffix-trie n-grams (SGLang);
draft: a cheaper model.

    make = proposer_factory(SpecOptions(method="trie"), runner)  # None for method "none"
    proposer = make()                                            # one per request
    tree = proposer.propose(context, max_tokens)                 # context[-1] is the root
    proposer.accepted(new_context)                               # after the verify step
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

from roofline import speculation
from roofline.engine.speculate.base import Proposer, ProposerFactory, SpecOptions
from roofline.engine.speculate.prompt_lookup import PromptLookupProposer
from roofline.engine.speculate.tree import DraftTree, ancestor_positions, tree_mask
from roofline.engine.speculate.trie import TrieProposer, bfs_breadth
from roofline.engine.weights import DTYPES


def _draft_model(options: SpecOptions, target: object) -> Callable[[], Proposer]:
    # loads a runner: only when asked for
    from roofline.engine.speculate.draft_model import draft_factory

    return draft_factory(options, target)


PROPOSERS: MappingProxyType[str, ProposerFactory] = MappingProxyType(
    {
        "ngram": PromptLookupProposer.factory,
        "trie": TrieProposer.factory,
        "draft": _draft_model,
    }
)

if tuple(PROPOSERS) != tuple(speculation.PROPOSERS):
    raise ImportError(
        f"engine proposers {list(PROPOSERS)} differ from roofline.speculation's "
        f"{list(speculation.PROPOSERS)}: register a proposer in both"
    )
if speculation.DRAFT_DTYPES != DTYPES:
    raise ImportError(
        f"roofline.speculation.DRAFT_DTYPES must equal engine.weights.DTYPES {DTYPES}"
    )


def proposer_factory(options: SpecOptions, target: object = None) -> Callable[[], Proposer] | None:
    """A maker of one proposer per request for `options.method`; None for "none". `target` is the
    target model's runner (the n-gram proposers ignore it). Proposers from one returned maker share
    what the method shares (the trie, under trie_scope "shared")."""
    if options.method == "none":
        return None
    return PROPOSERS[options.method](options, target)


__all__ = [
    "PROPOSERS",
    "DraftTree",
    "PromptLookupProposer",
    "Proposer",
    "ProposerFactory",
    "SpecOptions",
    "TrieProposer",
    "ancestor_positions",
    "bfs_breadth",
    "proposer_factory",
    "tree_mask",
]
