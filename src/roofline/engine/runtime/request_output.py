"""How the scheduler hands a request's output to its sink: each step's final tokens as an
`Event`, and its end (finished, cancelled or failed) with its usage and speculation counts, its
slot and prefix-cache references released."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading

from roofline.engine.runtime.prefix_cache import PrefixCache
from roofline.engine.runtime.requests import Event, Usage
from roofline.engine.runtime.sampling import sample
from roofline.engine.runtime.scheduler_stats import SchedulerStats
from roofline.engine.runtime.speculate.adaptive import SpecStats
from roofline.engine.runtime.work import Queues, Work

_log = logging.getLogger("roofline.engine.runtime.scheduler")  # failures log as the scheduler's


@dataclasses.dataclass(eq=False)
class RequestOutput:
    """The scheduler's output side: it samples a prompt's first token, emits tokens, and ends
    requests, counting them in `stats` (under `lock`, which readers of the stats share)."""

    runner: object  # the ModelRunner (or a test's stand-in): slots are released through it
    queues: Queues
    stats: SchedulerStats
    lock: threading.Condition
    prefix_cache: PrefixCache | None

    def accept(self, w: Work, logits) -> None:
        """Sample the first token from the prefill's logits and emit what became final."""
        w.passes += 1
        try:
            token = int(sample(logits, w.seq.params, w.seq.rng))
            text = w.seq.append(token)
            if w.seq.done:
                text += w.seq.flush()
        except Exception as e:
            _log.exception("request %d failed", w.handle.request_id)
            self.finish(w, "error", error=f"sampling failed: {type(e).__name__}: {e}")
            return
        self.emit_tokens(w, (token,), text)

    def emit_tokens(self, w: Work, tokens: tuple[int, ...], text: str) -> None:
        """A step's final tokens of w: an event, or its end when the sequence is done."""
        with self.lock:
            self.stats.generation_tokens_total += len(tokens)
        if w.seq.done:
            self.finish(w, w.seq.finish_reason or "stop", text=text, token_ids=tokens)
        else:
            emit(w, Event(text, tokens))

    def finish(
        self,
        w: Work,
        reason: str,
        *,
        text: str = "",
        token_ids: tuple[int, ...] = (),
        error: str | None = None,
    ) -> None:
        """End w: its prefix references, slot and speculation released, counted, its last event."""
        w.release_prefix(self.prefix_cache)
        if w.slot is not None:
            try:
                self.runner.release(w.slot)
            finally:
                self.queues.free_slots.append(w.slot)
                w.slot = None
        self.queues.remove(w)
        stats = SpecStats(passes=w.passes)
        if w.spec is not None:
            w.spec.close()
            stats = dataclasses.replace(w.spec.stats, passes=w.passes)
        with self.lock:
            self.stats.spec.add(stats)
            if reason == "abort":
                self.stats.cancelled += 1
            elif reason == "error":
                self.stats.failed += 1
            else:
                self.stats.finished[reason] = self.stats.finished.get(reason, 0) + 1
        usage = Usage(len(w.seq.prompt_ids), len(w.seq.output_ids))
        emit(w, Event(text, token_ids, reason, usage, error, stats))

    def fail_all(self, message: str) -> None:
        """End every request, the inbox's too, with `message` (the scheduler is stopping)."""
        with self.lock:
            pending = [w for w, *_ in self.queues.inbox]
            self.queues.inbox.clear()
        for w in pending + list(self.queues.live()):
            self.finish(w, "error", error=message)
        self.queues.waiting.clear()


def emit(w: Work, event: Event) -> None:
    """Hand w's sink an event: a broken sink is the caller's problem, never the scheduler's."""
    with contextlib.suppress(Exception):
        w.sink(event)
