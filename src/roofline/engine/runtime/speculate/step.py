"""One speculative decode step of one request, shared by `generate` and the scheduler (a batch).

    tree = speculation.draft(context)            propose, cut to what pays (adaptive.py)
    rows = [last token, *tree tokens]            one pass scores them all (ModelRunner.step)
    kept, tokens = accept(tree, logits)          verify.py
    runner.keep(slot, start, kept)               the accepted path stays in the KV cache
    for t in tokens: sequence.append(t)          until done, as without a draft

Without speculation: the same step with an empty tree (one row, one token).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from roofline.engine.runtime.speculate.adaptive import AcceptanceTable, DraftBudget, SpecStats
from roofline.engine.runtime.speculate.base import SpecOptions
from roofline.engine.runtime.speculate.tree import DraftTree
from roofline.engine.runtime.speculate.verify import accept


class RequestSpeculation:
    """A request's proposer and its adaptive budget."""

    def __init__(self, proposer, budget: DraftBudget, chain_cost_first: bool) -> None:
        self.proposer = proposer
        self.budget = budget
        # a draft model pays per drafted token: size before drafting
        self.chain_cost_first = chain_cost_first

    @property
    def stats(self) -> SpecStats:
        return self.budget.stats

    def draft(self, context: list[int], room: int) -> DraftTree:
        if room <= 0:
            return DraftTree.empty()
        if self.chain_cost_first:
            n = self.budget.chain_length(min(room, self.proposer.k))
            return self.proposer.propose(context, n) if n else DraftTree.empty()
        tree = self.proposer.propose(context, room)
        return self.budget.cut(tree, getattr(self.proposer, "match_len", None))

    def verified(self, context: list[int], tree: DraftTree, accepted: int) -> None:
        self.budget.record(tree, accepted)
        self.proposer.accepted(context)

    def close(self) -> None:
        close = getattr(self.proposer, "close", None)
        if close is not None:
            close()


def speculation_factory(options: SpecOptions, runner) -> Callable[[], RequestSpeculation] | None:
    """A maker of one RequestSpeculation per request (None when options.method is "none"). Measures
    the runner's pass costs once (the adaptive budget's unit) and, for "draft", loads the draft
    runner. The maker's `cross_request` says whether one request's drafts learn from earlier
    requests (the server reports it: `ServerStats.cross_request_memory`); its `acceptance` is the
    per-position table all its requests record into and size their drafts by (adaptive.py)."""
    from roofline.engine.runtime.speculate import proposer_factory

    make_proposer = proposer_factory(options, runner)
    if make_proposer is None:
        return None
    if options.adaptive:
        runner.measure_pass_costs()
    draft_runner = getattr(make_proposer, "runner", None)
    draft_cost = (
        draft_runner.bytes_per_token / runner.bytes_per_token if draft_runner is not None else 0.0
    )

    table = AcceptanceTable(options.method)  # every request's drafts, by position

    def make() -> RequestSpeculation:
        budget = DraftBudget(
            runner.pass_cost, draft_pass_cost=draft_cost, adaptive=options.adaptive, table=table
        )
        return RequestSpeculation(
            make_proposer(), budget, chain_cost_first=draft_runner is not None
        )

    make.cross_request = bool(getattr(make_proposer, "cross_request", False))  # type: ignore
    make.acceptance = table  # type: ignore
    make.options = options  # type: ignore  # a request naming these options shares this maker
    return make


def draft_all(items: list[tuple[RequestSpeculation | None, list[int], int]]) -> list[DraftTree]:
    """Each request's draft for one batched step: (speculation or None, context, room) -> tree.
    Requests that draft with a draft model share its passes (`draft_model.draft_together`); the
    others draft alone."""
    from roofline.engine.runtime.speculate.draft_model import draft_together

    trees = [DraftTree.empty()] * len(items)
    together = []
    for i, (spec, context, room) in enumerate(items):
        if spec is None or room <= 0:
            continue
        if spec.chain_cost_first:
            n = spec.budget.chain_length(min(room, spec.proposer.k))
            if n:
                together.append((i, spec.proposer, context, n))
        else:
            trees[i] = spec.draft(context, room)
    if together:
        drafted = draft_together(
            [p for _, p, _, _ in together],
            [c for _, _, c, _ in together],
            [n for _, _, _, n in together],
        )
        for (i, *_), tree in zip(together, drafted):
            trees[i] = tree
    return trees


def verify_rows(last_token: int, tree: DraftTree) -> tuple[list[int], list[int] | None]:
    """The rows of a verify pass: (tokens, parents) -- the root, then the nodes (parents None for a
    chain)."""
    tokens = [int(last_token), *tree.tokens]
    if tree.is_chain:
        return tokens, None
    return tokens, [-1, *(p + 1 for p in tree.parents)]


def room_for_draft(sequence, runner, slot: int) -> int:
    """Draft nodes a step may verify: the accepted path plus the target's token must stay within
    max_tokens, and every row of the pass must fit the slot's context."""
    left = sequence.params.max_tokens - len(sequence.output_ids) - 1
    return max(0, min(left, runner.max_seq_len - runner.position(slot) - 1))


def settle(
    runner,
    slot: int,
    start: int,
    tree: DraftTree,
    logits: np.ndarray,
    sequence,
    speculation: RequestSpeculation | None,
) -> tuple[list[int], str]:
    """After the pass: accept, keep the accepted path in the cache, feed the sequence. Returns the
    tokens the sequence took (it stops taking them when it is done) and the text that became
    final."""
    rows, tokens = accept(tree, logits, sequence.params, sequence.rng)
    runner.keep(slot, start, rows)
    taken, text = [], ""
    for token in tokens:
        text += sequence.append(token)
        taken.append(token)
        if sequence.done:
            text += sequence.flush()
            break
    if speculation is not None:
        speculation.verified(sequence.prompt_ids + sequence.output_ids, tree, len(rows) - 1)
    return taken, text
