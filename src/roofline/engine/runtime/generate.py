"""One sequence, start to finish, gpt-fast style: prefill the prompt, then decode steps until done.

    first = sample(prefill(prompt));  then repeatedly  next = sample(decode(last))

With speculation a decode step verifies a draft in the same pass and may yield several tokens
(`speculative_decode`; speculate/step.py): tokens = accepted drafts + the target's own next token.

Timings: TTFT here is the prefill plus the first sample (the engine's share of time to first token);
decode tok/s counts only the tokens that came out of decode steps, over the time those steps took.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from collections.abc import Sequence as Seq
from dataclasses import dataclass

import numpy as np

from roofline.engine.runtime.sampling import SamplingParams, sample
from roofline.engine.runtime.sequence import Sequence, fit_to_context
from roofline.engine.runtime.speculate.step import (
    RequestSpeculation,
    room_for_draft,
    settle,
    verify_rows,
)
from roofline.engine.runtime.speculate.tree import DraftTree


@dataclass
class GenerationTimings:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_seconds: float = 0.0  # prefill + first sample = time to first token inside the engine
    decode_seconds: float = 0.0  # all decode steps (forward + sample)
    passes: int = 0  # weight passes: the prefill and every decode step (a verify pass is one)
    # a mixture of experts: experts the decode passes read, summed over layers and passes (each
    # pass the union of its rows' routes, layer by layer; `ModelRunner.bytes_per_pass`)
    expert_reads: int = 0

    @property
    def decode_tokens(self) -> int:
        """Tokens produced by decode steps (the first token comes from prefill)."""
        return max(self.generated_tokens - 1, 0)

    @property
    def decode_tok_per_s(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def prefill_tok_per_s(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else 0.0


def decode_one_token(
    runner, slot: int, token: int, params: SamplingParams, rng: np.random.Generator
) -> int:
    """Feed `token` at the slot's next position and sample the token after it."""
    logits = runner.decode([slot], [token])[0]
    return sample(logits, params, rng)


def speculative_decode(
    runner, slot: int, token: int, seq: Sequence, speculation: RequestSpeculation | None
) -> tuple[list[int], str]:
    """One pass: `token` plus whatever the proposer drafts after it; the sequence takes the accepted
    drafts and the target's own next token (stopping when it is done). Returns those tokens and the
    text made final."""
    tree = DraftTree.empty()
    if speculation is not None:
        tree = speculation.draft(seq.prompt_ids + seq.output_ids, room_for_draft(seq, runner, slot))
    start = runner.position(slot)
    rows, parents = verify_rows(token, tree)
    logits = runner.step([(slot, rows, parents)])[0]
    return settle(runner, slot, start, tree, logits, seq, speculation)


class Generation:
    """Iterating yields token ids; `text()` yields the text as it becomes final instead. Either way
    the loop runs once; afterwards `sequence` holds the ids and finish reason, `timings` the
    timings."""

    def __init__(
        self,
        runner,
        prompt_ids: Seq[int],
        params: SamplingParams,
        *,
        slot: int = 0,
        speculation: RequestSpeculation | None = None,
    ) -> None:
        self.runner = runner
        self.slot = slot
        self.speculation = speculation
        # ContextLengthError if no room
        self.params = fit_to_context(len(prompt_ids), params, runner.max_seq_len)
        self.sequence = Sequence(prompt_ids, self.params, runner.tokenizer)
        self.timings = GenerationTimings(prompt_tokens=len(prompt_ids))
        self._started = False

    def _steps(self) -> Iterator[tuple[int, str]]:
        if self._started:
            raise RuntimeError("a Generation runs once")
        self._started = True
        seq, params, runner = self.sequence, self.params, self.runner
        if seq.done:  # max_tokens == 0
            return
        start = time.perf_counter()
        token = sample(runner.prefill(self.slot, seq.prompt_ids), params, seq.rng)
        self.timings.prefill_seconds = time.perf_counter() - start
        self.timings.passes = 1
        try:
            text = seq.append(token)
            self.timings.generated_tokens += 1
            if seq.done:
                text += seq.flush()
            yield token, text
            while not seq.done:
                start = time.perf_counter()
                tokens, text = speculative_decode(runner, self.slot, token, seq, self.speculation)
                self.timings.decode_seconds += time.perf_counter() - start
                self.timings.passes += 1
                self.timings.expert_reads += runner.last_expert_reads
                self.timings.generated_tokens += len(tokens)
                for i, token in enumerate(tokens):
                    yield token, text if i == len(tokens) - 1 else ""
        finally:
            runner.release(self.slot)
            if self.speculation is not None:
                self.speculation.close()

    def __iter__(self) -> Iterator[int]:
        for token, _ in self._steps():
            yield token

    def text(self) -> Iterator[str]:
        for _, text in self._steps():
            if text:
                yield text


def generate(
    runner,
    prompt_ids: Seq[int],
    params: SamplingParams | None = None,
    *,
    slot: int = 0,
    speculation: RequestSpeculation | None = None,
) -> Generation:
    """Decode one sequence: `for token in generate(...)`, or `.text()` for streamed text; then
    `.timings`. speculation: one request's proposer (`speculate.step.speculation_factory(options,
    runner)()`)."""
    return Generation(
        runner, list(prompt_ids), params or SamplingParams(), slot=slot, speculation=speculation
    )
