"""The prefill half of a scheduler step (`PrefillPlanner`; the policy is in scheduler.py's
docstring): which prompts' granules run this turn, loaded from the prefix cache or computed.

A turn runs a request's granules, as many as fit, in one `runner.prefill` call: a prefill row's
bits do not depend on the rows beside it (prefill_chunks.py), so the arithmetic of a prompt is the
same whatever the budget. The budget is a time target: a granule runs when the turn's elapsed time
plus its predicted time (a + b tokens, fitted to the chunks timed so far: `PrefillCost`) stays
within `prefill_chunk_s`; before any chunk was timed, one granule per turn. A granule loaded from
the prefix cache runs while the turn's elapsed time is under the target (a load is cheap but not
free: into a fresh slot it faults in memory, and loads without a limit once kept 16 streams waiting
seconds, docs/measured.md). A fixed token budget (`prefill_token_budget`) replaces the target when
given; loads are then free.

A finished prompt goes to the running requests and its first token to `RequestOutput.accept`; a
failed or cancelled one to `RequestOutput.finish`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from roofline.engine.runtime.prefill_chunks import PrefillCost, chunk_end
from roofline.engine.runtime.prefix_cache import PrefixCache, PrefixNode
from roofline.engine.runtime.request_output import RequestOutput
from roofline.engine.runtime.scheduler_stats import SchedulerStats
from roofline.engine.runtime.work import Queues, Work

_log = logging.getLogger("roofline.engine.runtime.scheduler")  # failures log as the scheduler's


@dataclass(eq=False)
class PrefillPlanner:
    """Granules of new and unfinished prompts, one turn at a time (`turn`)."""

    runner: object  # the ModelRunner (or a test's stand-in)
    queues: Queues
    output: RequestOutput
    prefix_cache: PrefixCache | None
    prefill_token_budget: int | None  # prompt tokens per turn (None: the time target)
    prefill_chunk_s: float  # the time target of a turn
    clock: Callable[[], float]
    stats: SchedulerStats
    lock: threading.Condition
    cost: PrefillCost = field(default_factory=PrefillCost)  # seconds of n tokens, measured
    turn_start: float = 0.0
    turn_tokens: int = 0

    def _granule(self, w: Work) -> int:
        """The runner's prefill granule (a runner without one: the whole prompt)."""
        return getattr(self.runner, "prefill_chunk_tokens", None) or len(w.seq.prompt_ids)

    def _chunk_tokens(self, w: Work) -> int:
        """Prompt tokens of the request's next prefill chunk."""
        return chunk_end(w.prefilled, len(w.seq.prompt_ids), self._granule(w)) - w.prefilled

    def _fits(self, n: int) -> bool:
        """Whether a chunk of n tokens fits what is left of this turn's budget."""
        if self.prefill_token_budget is not None:
            return self.turn_tokens + n <= self.prefill_token_budget
        seconds = self.cost.seconds(n)
        if seconds is None:
            return False
        return self.clock() - self.turn_start + seconds <= self.prefill_chunk_s

    def _compute_end(self, w: Work) -> int:
        """End of w's next computation: the rest of its granule, then each next granule while the
        whole still fits (`_fits`)."""
        n = len(w.seq.prompt_ids)
        end, size = w.prefilled + self._chunk_tokens(w), self._granule(w)
        while end < n and self._fits(chunk_end(end, n, size) - w.prefilled):
            end = chunk_end(end, n, size)
        return end

    def _next_fits(self, w: Work) -> bool:
        """Whether w's next granule fits this turn: a cached one while time is left, a computed one
        when its predicted time fits (`_fits`)."""
        if self._cached_node(w) is None:
            return self._fits(self._chunk_tokens(w))
        if self.prefill_token_budget is not None:
            return True
        return self.clock() - self.turn_start < self.prefill_chunk_s

    def turn(self) -> bool:
        """This turn's granules, within the budget: new requests (FIFO, into free slots; the
        turn's first granule always runs), then the prefills in progress, head first (it always
        gets one, so arrivals cannot starve it), each moving to the back of the line. A request
        runs as many granules in a row as fit. Returns whether any ran."""
        self.turn_start, self.turn_tokens = self.clock(), 0
        ran = 0
        in_progress = len(self.queues.prefilling)
        while self.queues.waiting and self.queues.free_slots:
            if ran and not self._next_fits(self.queues.waiting[0]):
                break
            w = self.queues.waiting.popleft()
            w.slot = self.queues.free_slots.pop()
            self._lookup(w)
            ran += self._run_granules(w, must=not ran)
        for i in range(in_progress):
            w = self.queues.prefilling[0]
            # hung up since the step began: free the slot before another chunk
            if w.handle.cancelled:
                self.queues.prefilling.popleft()
                self.output.finish(w, "abort")
                continue
            if i and not self._next_fits(w):
                break
            self.queues.prefilling.popleft()
            ran += self._run_granules(w, must=not i)
        return ran > 0

    def _run_granules(self, w: Work, *, must: bool) -> int:
        """Granules of w, loaded from the prefix cache or computed, while they fit (the first one
        when `must`); w goes to the back of the prefills in progress unless it finished, failed or
        was cancelled. Returns the granules run."""
        ran = 0
        while True:
            if w.handle.cancelled:
                self.output.finish(w, "abort")
                return ran
            if not (must and not ran) and not self._next_fits(w):
                break
            ran += 1
            found = self._cached_node(w)
            if found is not None and self._load_cached(w, *found):
                if w.prefilled == len(w.seq.prompt_ids):  # a whole prompt cached: it runs now
                    return ran
                continue
            if not self._run_chunk(w):
                return ran
        self.queues.prefilling.append(w)
        return ran

    def _run_chunk(self, w: Work) -> bool:
        """One prefill chunk of w; after the last, w joins the running requests with its first token
        sampled. Returns whether w is still prefilling."""
        prompt = w.seq.prompt_ids
        start, end = w.prefilled, self._compute_end(w)
        last = end == len(prompt)
        t0 = self.clock()
        try:
            logits = self.runner.prefill(w.slot, prompt[start:end], start=start, logits=last)
        except Exception as e:  # a failed request must not take the others down
            _log.exception("request %d failed", w.handle.request_id)
            self.output.finish(w, "error", error=f"prefill failed: {type(e).__name__}: {e}")
            return False
        seconds = self.clock() - t0
        w.prefilled = end
        w.prefill_seconds += seconds
        self.turn_tokens += end - start
        if seconds > 0:
            self.cost.observe(end - start, seconds)
        self._store(w, end, logits if last else None)
        with self.lock:
            self.stats.prefill_chunks += 1
        if not last:
            return True
        self._prefill_done(w, logits)
        return False

    def _prefill_done(self, w: Work, logits) -> None:
        """w's prompt is in its slot: it joins the running requests with its first token sampled
        from `logits` (its last position's)."""
        with self.lock:
            self.stats.prefill_seconds.observe(w.prefill_seconds)
            self.stats.prompt_tokens_total += len(w.seq.prompt_ids)
        w.release_prefix(self.prefix_cache)
        self.queues.running.append(w)
        self.output.accept(w, logits)

    # ---- the prefix cache -----------------------------------------------------------------------
    def _lookup(self, w: Work) -> None:
        """Count a new request's lookup (its granules load in `_load_cached`)."""
        if self.prefix_cache is not None:
            self.prefix_cache.count_lookup()
            self._publish_cache()

    def _next_granule(self, w: Work) -> bool:
        """Whether w's next chunk is a whole granule that extends its cached path and leaves at
        least the prompt's last token to compute (its logits come from a prefill)."""
        cache = self.prefix_cache
        if cache is None or not w.caching or w.prefilled != len(w.cached) * cache.granule:
            return False
        return w.prefilled + cache.granule <= len(w.seq.prompt_ids) - 1

    def _cached_node(self, w: Work) -> tuple[PrefixNode, int] | None:
        """The prefix cache's node for w's next granule, or for its last chunk with the logits, and
        its rows to load (all); else a node that starts alike and its shared rows, short of the
        chunk's last (computed, with its logits when the prompt ends there); None when the cache
        holds neither."""
        tail = self._at_tail(w)
        if not (tail or self._next_granule(w)):
            return None
        node = self.prefix_cache.child(w.cached, w.seq.prompt_ids)
        if node is not None and (node.logits is not None or not tail):
            return node, len(node.tokens)
        length = self._chunk_tokens(w)
        found = self.prefix_cache.partial_child(w.cached, w.seq.prompt_ids, length)
        rows = 0 if found is None else min(found[1], length - 1)
        return (found[0], rows) if rows else None

    def _load_cached(self, w: Work, node: PrefixNode, rows: int) -> bool:
        """Load the first `rows` of a node (`_cached_node`) into w's slot; whether it did. A whole
        node joins w's path, and when it is the prompt's last chunk, w runs; part of one does not
        (w computes and caches its own granule)."""
        cache = self.prefix_cache
        whole = rows == len(node.tokens)
        try:
            self.runner.load_kv(w.slot, w.prefilled, node.kv, rows)
        except Exception:  # never fatal: compute the granule instead
            _log.exception("request %d: loading cached K/V failed", w.handle.request_id)
            w.caching = False
            return False
        cache.count_reuse(rows, first=not w.reused)
        w.prefilled += rows
        w.reused += rows
        self._publish_cache()
        if not whole:
            return True
        cache.acquire(node)
        w.cached.append(node)
        if w.prefilled == len(w.seq.prompt_ids):
            self._prefill_done(w, node.logits.copy())
        return True

    def _at_tail(self, w: Work) -> bool:
        """Whether w's cached path reaches its last chunk (a granule or less to go)."""
        cache = self.prefix_cache
        left = len(w.seq.prompt_ids) - w.prefilled
        return (
            cache is not None
            and w.caching
            and w.prefilled == len(w.cached) * cache.granule
            and 0 < left <= cache.granule
        )

    def _store(self, w: Work, end: int, logits) -> None:
        """Offer the granules w's slot now holds whole past its cached path to the prefix cache:
        each whole granule up to `end`, and its prompt's last chunk with the logits (a tail)."""
        cache = self.prefix_cache
        if cache is None:
            return
        n, slot = len(w.seq.prompt_ids), w.slot
        while w.caching:
            start = len(w.cached) * cache.granule
            stop = min(start + cache.granule, n)
            last = stop == n
            kept = logits.copy() if last and logits is not None else None
            if stop > end or (stop - start != cache.granule and kept is None):
                break  # not all in the slot yet, or a tail without its logits
            node = cache.insert(
                w.cached,
                w.seq.prompt_ids,
                lambda a=start, b=stop: self.runner.save_kv(slot, a, b),
                kept,
            )
            if node is None:
                w.caching = False
            else:
                w.cached.append(node)
            if last:
                break
        self._publish_cache()

    def _publish_cache(self) -> None:
        with self.lock:
            self.stats.prefix_cache = self.prefix_cache.stats()
