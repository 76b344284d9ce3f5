"""Draft-model proposer: a second, cheaper model that shares the tokenizer guesses k tokens greedily.

By default the draft is the target's own weights at int8 -- a quarter of the fp32 bytes, half of bf16 -- so
a draft pass costs about c = bytes(int8) / bytes(target) of a target pass, and on open prose, where n-grams
find nothing to copy, it still guesses most tokens right (the int8 copy rarely disagrees with its source).
The output stays the target's, bit for bit: verification keeps only what the target itself would choose.
`--draft-model other.gguf` drafts with another checkpoint of the same vocabulary instead (EAGLE heads,
DFLASH and other trained drafters belong to this family).

The draft runner has its own KV cache, one slot per request. Its cache holds a prefix of the request's
tokens; each proposal first rolls it back to the longest prefix it shares with the context (drafts that
were rejected go), feeds the rest in one pass (`extend`: usually the accepted tokens plus the target's
own), then decodes k - 1 more tokens one at a time:

    g_1 = argmax draft(context);   g_{i+1} = argmax draft(context + g_1..g_i)      k draft passes in all
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from roofline.engine.speculate.base import SpecOptions
from roofline.engine.speculate.tree import DraftTree
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
        n = min(self.k, max_tokens, self.runner.max_seq_len - len(context))
        if n <= 0 or not context:
            return DraftTree.empty()
        if self.slot is None:
            if not self._free:
                return DraftTree.empty()  # more requests than draft slots: this one decodes plainly
            self.slot = self._free.pop()
        context = [int(t) for t in context]
        shared = 0
        for a, b in zip(self.cached, context):
            if a != b:
                break
            shared += 1
        shared = min(shared, len(context) - 1)  # feed at least the root, to get the logits after it
        if shared == 0:
            logits = self.runner.prefill(self.slot, context)
        else:
            self.runner.truncate(self.slot, shared)
            logits = self.runner.extend(self.slot, context[shared:])[-1]
        self.passes += 1
        guesses = [int(np.argmax(logits))]
        while len(guesses) < n:
            logits = self.runner.decode([self.slot], [guesses[-1]])[0]
            self.passes += 1
            guesses.append(int(np.argmax(logits)))
        self.cached = context + guesses[:-1]
        return DraftTree.chain(guesses)

    def accepted(self, context: Sequence[int]) -> None:
        """Nothing to do: the next proposal rolls the draft cache back to what the context confirms."""

    def close(self) -> None:
        """Give the draft slot back (the request ended)."""
        if self.slot is not None:
            self.runner.release(self.slot)
            self._free.append(self.slot)
            self.slot = None
            self.cached = []


def draft_factory(options: SpecOptions, target) -> Callable[[], DraftModelProposer]:
    """Load the draft runner once (the target's own checkpoint at options.draft_dtype, or options.draft_model)
    with as many slots as the target; each call makes one request's proposer."""
    from roofline.engine.runner import load_runner

    source = options.draft_model or target.path
    runner = load_runner(source, dtype=options.draft_dtype, threads=target.threads, max_batch=target.max_batch,
                         max_seq_len=target.max_seq_len)
    if runner.config.vocab_size != target.config.vocab_size:
        raise UserError(f"the draft model {source} has a vocabulary of {runner.config.vocab_size} tokens and the target "
                        f"{target.config.vocab_size}: a draft must share the target's tokenizer")
    slots = list(range(runner.max_batch - 1, -1, -1))
    maker = lambda: DraftModelProposer(runner, slots, options.k)  # noqa: E731
    maker.runner = runner  # the draft's bytes per pass, for the cost model
    return maker
