"""How a `Scheduler` hands a request's output to its sink: each step's final tokens as an
`Event`, and its end (finished, cancelled or failed) with its usage and speculation counts, its
slot and prefix-cache references released."""

from __future__ import annotations

import contextlib
import dataclasses
import logging

from roofline.engine.runtime.requests import Event, Usage
from roofline.engine.runtime.sampling import sample
from roofline.engine.runtime.scheduler_prefill import PrefillWork
from roofline.engine.runtime.speculate.adaptive import SpecStats

_log = logging.getLogger("roofline.engine.runtime.scheduler")


class RequestOutput:
    """The output half of a `Scheduler` (a mixin: it reads the scheduler's queues, slots, runner,
    statistics and lock)."""

    def _accept(self, w: PrefillWork, logits) -> None:
        """Sample the first token from the prefill's logits and emit what became final."""
        w.passes += 1
        try:
            token = int(sample(logits, w.seq.params, w.seq.rng))
            text = w.seq.append(token)
            if w.seq.done:
                text += w.seq.flush()
        except Exception as e:
            _log.exception("request %d failed", w.handle.request_id)
            self._finish(w, "error", error=f"sampling failed: {type(e).__name__}: {e}")
            return
        self._emit_tokens(w, (token,), text)

    def _emit_tokens(self, w: PrefillWork, tokens: tuple[int, ...], text: str) -> None:
        with self._cv:
            self._stats.generation_tokens_total += len(tokens)
        if w.seq.done:
            self._finish(w, w.seq.finish_reason or "stop", text=text, token_ids=tokens)
        else:
            self._emit(w, Event(text, tokens))

    def _finish(
        self,
        w: PrefillWork,
        reason: str,
        *,
        text: str = "",
        token_ids: tuple[int, ...] = (),
        error: str | None = None,
    ) -> None:
        self._release_prefix(w)
        if w.slot is not None:
            try:
                self.runner.release(w.slot)
            finally:
                self._free_slots.append(w.slot)
                w.slot = None
        if w in self._running:
            self._running.remove(w)
        if w in self._prefilling:
            self._prefilling.remove(w)
        stats = SpecStats(passes=w.passes)
        if w.spec is not None:
            w.spec.close()
            stats = dataclasses.replace(w.spec.stats, passes=w.passes)
        with self._cv:
            self._stats.spec.add(stats)
            if reason == "abort":
                self._stats.cancelled += 1
            elif reason == "error":
                self._stats.failed += 1
            else:
                self._stats.finished[reason] = self._stats.finished.get(reason, 0) + 1
        usage = Usage(len(w.seq.prompt_ids), len(w.seq.output_ids))
        self._emit(w, Event(text, token_ids, reason, usage, error, stats))

    @staticmethod
    def _emit(w: PrefillWork, event: Event) -> None:
        # a broken sink is the caller's problem, never the scheduler's
        with contextlib.suppress(Exception):
            w.sink(event)

    def _fail_all(self, message: str) -> None:
        with self._cv:
            pending = [w for w, *_ in self._inbox]
            self._inbox.clear()
        for w in pending + list(self._waiting) + list(self._prefilling) + list(self._running):
            self._finish(w, "error", error=message)
        self._waiting.clear()
