"""Draft-model proposer: a second, cheaper model sharing the tokenizer guesses k tokens greedily.

By default the draft is the target's own weights at int8: a pass costs about c = bytes(int8) /
bytes(target) of a target pass, and on open prose, where n-grams find nothing to copy, the int8 copy
rarely disagrees with its source. `--draft-model other.gguf` drafts with another checkpoint of the
same vocabulary (trained drafters belong here). Output stays the target's, bit for bit.

The draft runner has its own KV cache, a slot per request, holding a prefix of the request's
tokens. A proposal rolls it back to the longest prefix shared with the context (rejected drafts go),
feeds the rest in one pass (`extend`), then decodes k - 1 more tokens one at a time:

    g_1 = argmax draft(context);   g_{i+1} = argmax draft(context + g_1..g_i)    (k passes in all)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from roofline.engine.runtime.speculate.base import SpecOptions
from roofline.engine.runtime.speculate.tree import DraftTree
from roofline.errors import UserError


class DraftModelProposer:
    """One request's drafter over a shared draft runner (`slots` hands out its KV slots)."""

    def __init__(self, runner, slots: list[int], k: int) -> None:
        self.runner = runner
        self._free = slots
        self.k = k
        self.slot: int | None = None
        self.cached: list[int] = []  # the tokens whose K/V the draft slot holds, in order
        self.passes = 0  # draft weight passes so far

    @property
    def passes_per_token(self) -> int:
        return 1  # one draft pass per drafted token (for the adaptive budget)

    def propose(self, context: Sequence[int], max_tokens: int) -> DraftTree:
        return draft_together([self], [context], [max_tokens])[0]

    def _sync(self, context: list[int]) -> list[int] | None:
        """Roll the draft slot back to the longest prefix it shares with `context` and return the
        tokens still to feed (at least the root, whose logits give the first guess); None when the
        slot must be prefilled."""
        shared = 0
        for a, b in zip(self.cached, context):
            if a != b:
                break
            shared += 1
        shared = min(shared, len(context) - 1)
        if shared == 0:
            return None
        self.runner.truncate(self.slot, shared)
        return context[shared:]

    def accepted(self, context: Sequence[int]) -> None:
        """Nothing to do: the next proposal rolls the draft cache back to what the context
        confirms."""

    def close(self) -> None:
        """Give the draft slot back (the request ended)."""
        if self.slot is not None:
            self.runner.release(self.slot)
            self._free.append(self.slot)
            self.slot = None
            self.cached = []


def draft_together(
    proposers: list[DraftModelProposer],
    contexts: Sequence[Sequence[int]],
    max_tokens: Sequence[int],
) -> list[DraftTree]:
    """Draft for several requests that share one draft runner, their passes batched: the catch-up
    rows of every request in one pass (`ModelRunner.step`), then one batched one-token pass per
    further guess."""
    trees = [DraftTree.empty()] * len(proposers)
    runner, live, guesses, wanted = None, [], {}, {}
    feeds = []
    for i, (p, context, m) in enumerate(zip(proposers, contexts, max_tokens)):
        n = min(p.k, m, p.runner.max_seq_len - len(context))
        if n <= 0 or not context:
            continue
        if p.slot is None:
            if not p._free:
                continue  # more requests than draft slots: this one decodes plainly
            p.slot = p._free.pop()
        runner = p.runner
        context = [int(t) for t in context]
        feed = p._sync(context)
        if feed is None:  # a new request (or nothing shared): prefill its whole context
            guesses[i] = [int(np.argmax(runner.prefill(p.slot, context)))]
            p.passes += 1
        else:
            feeds.append((i, feed))
        live.append(i)
        wanted[i] = n
        p.cached = context
    if feeds:
        rows = runner.step([(proposers[i].slot, feed, None) for i, feed in feeds])
        for (i, _), logits in zip(feeds, rows):
            guesses[i] = [int(np.argmax(logits[-1]))]
            proposers[i].passes += 1
    while True:
        more = [i for i in live if len(guesses[i]) < wanted[i]]
        if not more:
            break
        logits = runner.decode([proposers[i].slot for i in more], [guesses[i][-1] for i in more])
        for i, row in zip(more, logits):
            guesses[i].append(int(np.argmax(row)))
            proposers[i].passes += 1
    for i in live:
        proposers[i].cached = proposers[i].cached + guesses[i][:-1]
        trees[i] = DraftTree.chain(guesses[i])
    return trees


def draft_factory(options: SpecOptions, target) -> Callable[[], DraftModelProposer]:
    """Load the draft runner once (the target's own checkpoint at options.draft_dtype, or
    options.draft_model) with as many slots as the target; each call makes one request's
    proposer."""
    from roofline.engine.runtime.model_runner import load_runner

    source = options.draft_model or target.path
    runner = load_runner(
        source,
        dtype=options.draft_dtype,
        threads=target.threads,
        max_batch=target.max_batch,
        max_seq_len=target.max_seq_len,
    )
    if runner.config.vocab_size != target.config.vocab_size:
        raise UserError(
            f"the draft model {source} has a vocabulary of {runner.config.vocab_size} tokens "
            f"and the target {target.config.vocab_size}: a draft must share the target's tokenizer"
        )
    slots = list(range(runner.max_batch - 1, -1, -1))
    maker = lambda: DraftModelProposer(runner, slots, options.k)  # noqa: E731
    maker.runner = runner  # the draft's bytes per pass, for the cost model
    return maker
