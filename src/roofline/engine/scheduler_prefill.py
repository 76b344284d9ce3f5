"""Chunked prefill in the scheduler: the record of one request inside it (`_Work`: its slot, how
much of its prompt the slot's cache holds, its speculation and passes) and the prefill half of a
step (`PrefillChunks`, a mixin of `Scheduler`; the policy is in scheduler.py's docstring).

`PrefillChunks` reads the scheduler's queues (`_waiting`, `_prefilling`, `_running`), free slots,
budget, runner, clock and stats, and hands a finished prompt to its `_accept`, a failed one to its
`_finish`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from roofline.engine.prefill_chunks import chunk_end
from roofline.engine.requests import RequestHandle, Sink
from roofline.engine.sequence import Sequence
from roofline.engine.speculate.step import RequestSpeculation

_log = logging.getLogger("roofline.engine.scheduler")  # prefill failures log as the scheduler


@dataclass(eq=False)
class _Work:
    handle: RequestHandle
    seq: Sequence
    sink: Sink
    slot: int | None = None
    spec: RequestSpeculation | None = None
    passes: int = 0
    prefilled: int = 0  # prompt positions already in the slot's cache
    prefill_seconds: float = 0.0  # summed over the request's chunks


class PrefillChunks:
    """The prefill half of a `Scheduler` step: chunks of new and unfinished prompts."""

    def _chunk_tokens(self, w: _Work) -> int:
        """Prompt tokens of the request's next prefill chunk."""
        n = len(w.seq.prompt_ids)
        size = getattr(self.runner, "prefill_chunk_tokens", None) or n
        return chunk_end(w.prefilled, n, size) - w.prefilled

    def _prefill_chunks(self) -> bool:
        """This step's prefill chunks, within the prompt-token budget: new requests' first chunks
        (FIFO, into free slots), then one chunk each for the prefills in progress, head first (it
        always runs), each moving to the back of the line. Returns whether any chunk ran."""
        budget, ran = self.prefill_token_budget, 0
        in_progress = len(self._prefilling)
        while self._waiting and self._free_slots:
            n = self._chunk_tokens(self._waiting[0])
            if ran and n > budget:
                break
            w = self._waiting.popleft()
            w.slot = self._free_slots.pop()
            budget -= n
            ran += 1
            self._run_chunk(w)
        for i in range(in_progress):
            w = self._prefilling[0]
            # hung up since the step began: free the slot before another chunk
            if w.handle.cancelled:
                self._prefilling.popleft()
                self._finish(w, "abort")
                continue
            n = self._chunk_tokens(w)
            if i and n > budget:
                break
            self._prefilling.popleft()
            budget -= n
            ran += 1
            self._run_chunk(w)
        return ran > 0

    def _run_chunk(self, w: _Work) -> None:
        """One prefill chunk of w; after the last, w joins the running requests with its first token
        sampled."""
        prompt = w.seq.prompt_ids
        start, end = w.prefilled, w.prefilled + self._chunk_tokens(w)
        last = end == len(prompt)
        t0 = self._clock()
        try:
            logits = self.runner.prefill(w.slot, prompt[start:end], start=start, logits=last)
        except Exception as e:  # a failed request must not take the others down
            _log.exception("request %d failed", w.handle.request_id)
            self._finish(w, "error", error=f"prefill failed: {type(e).__name__}: {e}")
            return
        w.prefilled = end
        w.prefill_seconds += self._clock() - t0
        with self._cv:
            self._stats.prefill_chunks += 1
            if last:
                self._stats.prefill_seconds.observe(w.prefill_seconds)
                self._stats.prompt_tokens_total += len(prompt)
        if not last:
            self._prefilling.append(w)
            return
        self._running.append(w)
        self._accept(w, logits)
