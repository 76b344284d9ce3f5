"""One sequence, start to finish, gpt-fast style: prefill the prompt, then decode_one_token until done.

    first = sample(prefill(prompt));  then repeatedly  next = sample(decode(last))

Timings: TTFT here is the prefill plus the first sample (the engine's share of time to first token);
decode tok/s counts only the tokens that came out of decode steps, over the time those steps took.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from collections.abc import Sequence as Seq
from dataclasses import dataclass

import numpy as np

from roofline.engine.sampling import SamplingParams, sample
from roofline.engine.sequence import Sequence, fit_to_context


@dataclass
class GenerationTimings:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_seconds: float = 0.0  # prefill + first sample = time to first token inside the engine
    decode_seconds: float = 0.0  # all decode steps (forward + sample)

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


def decode_one_token(runner, slot: int, token: int, params: SamplingParams, rng: np.random.Generator) -> int:
    """Feed `token` at the slot's next position and sample the token after it."""
    logits = runner.decode([slot], [token])[0]
    return sample(logits, params, rng)


class Generation:
    """Iterating yields token ids; `text()` yields the text as it becomes final instead. Either way the
    loop runs once; afterwards `sequence` holds the ids and finish reason, `timings` the timings."""

    def __init__(self, runner, prompt_ids: Seq[int], params: SamplingParams, *, slot: int = 0) -> None:
        self.runner = runner
        self.slot = slot
        self.params = fit_to_context(len(prompt_ids), params, runner.max_seq_len)  # ContextLengthError if no room
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
        try:
            while True:
                text = seq.append(token)
                self.timings.generated_tokens += 1
                if seq.done:
                    yield token, text + seq.flush()
                    return
                yield token, text
                start = time.perf_counter()
                token = decode_one_token(runner, self.slot, token, params, seq.rng)
                self.timings.decode_seconds += time.perf_counter() - start
        finally:
            runner.release(self.slot)

    def __iter__(self) -> Iterator[int]:
        for token, _ in self._steps():
            yield token

    def text(self) -> Iterator[str]:
        for _, text in self._steps():
            if text:
                yield text


def generate(runner, prompt_ids: Seq[int], params: SamplingParams | None = None, *, slot: int = 0) -> Generation:
    """Decode one sequence: `for token in generate(...)`, or `.text()` for streamed text; then `.timings`."""
    return Generation(runner, list(prompt_ids), params or SamplingParams(), slot=slot)
