"""Chunked prefill in the scheduler: the record of one request inside it (`PrefillWork`: its slot,
how much of its prompt the slot's cache holds, its prefix-cache path, its speculation and passes)
and the prefill half of a step (`PrefillChunks`, a mixin of `Scheduler`; the policy is in
scheduler.py's docstring).

A turn (the prefill half of one step) runs a request's granules, as many as fit, in one
`runner.prefill` call: a prefill row's bits do not depend on the rows beside it
(prefill_chunks.py), so the arithmetic of a prompt is the same whatever the budget. The budget is a
time target: a granule runs when the turn's elapsed time plus its predicted time (a + b tokens,
fitted to the chunks timed so far: `PrefillCost`) stays within `prefill_chunk_s`; before any chunk
was timed, one granule per turn. A granule loaded from the prefix cache runs while the turn's
elapsed time is under the target (a load is cheap but not free: into a fresh slot it faults in
memory, and loads without a limit once kept 16 streams waiting seconds, docs/measured.md). A fixed
token budget (`prefill_token_budget`) replaces the target when given; loads are then free.

`PrefillChunks` reads the scheduler's queues (`_waiting`, `_prefilling`, `_running`), free slots,
budget, runner, prefix cache, clock and stats, and hands a finished prompt to its `_accept`, a
failed one to its `_finish`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from roofline.engine.runtime.prefill_chunks import PrefillCost, chunk_end
from roofline.engine.runtime.prefix_cache import PrefixCache, PrefixNode
from roofline.engine.runtime.requests import RequestHandle, Sink
from roofline.engine.runtime.sequence import Sequence
from roofline.engine.runtime.speculate.step import RequestSpeculation

_log = logging.getLogger("roofline.engine.runtime.scheduler")  # failures log as the scheduler's


@dataclass(eq=False)
class PrefillWork:
    handle: RequestHandle
    seq: Sequence
    sink: Sink
    slot: int | None = None
    spec: RequestSpeculation | None = None
    passes: int = 0
    prefilled: int = 0  # prompt positions already in the slot's cache
    prefill_seconds: float = 0.0  # summed over the request's chunks
    # prefix-cache nodes of granules 0.. of its prompt, referenced while it prefills
    cached: list[PrefixNode] = field(default_factory=list)
    caching: bool = True  # its path may still grow (False once a node did not fit, or done)
    reused: int = 0  # prompt tokens loaded from the prefix cache
    threads: int | None = None  # the request's own thread limit (None: the server's choice)


class PrefillChunks:
    """The prefill half of a `Scheduler` step: granules of new and unfinished prompts."""

    prefix_cache: PrefixCache | None
    prefill_token_budget: int | None
    prefill_chunk_s: float
    _prefill_cost: PrefillCost  # seconds of a computation of n tokens, measured
    _turn_start: float
    _turn_tokens: int

    def _granule(self, w: PrefillWork) -> int:
        """The runner's prefill granule (a runner without one: the whole prompt)."""
        return getattr(self.runner, "prefill_chunk_tokens", None) or len(w.seq.prompt_ids)

    def _chunk_tokens(self, w: PrefillWork) -> int:
        """Prompt tokens of the request's next prefill chunk."""
        return chunk_end(w.prefilled, len(w.seq.prompt_ids), self._granule(w)) - w.prefilled

    def _fits(self, n: int) -> bool:
        """Whether a chunk of n tokens fits what is left of this turn's budget."""
        if self.prefill_token_budget is not None:
            return self._turn_tokens + n <= self.prefill_token_budget
        seconds = self._prefill_cost.seconds(n)
        if seconds is None:
            return False
        return self._clock() - self._turn_start + seconds <= self.prefill_chunk_s

    def _compute_end(self, w: PrefillWork) -> int:
        """End of w's next computation: the rest of its granule, then each next granule while the
        whole still fits (`_fits`)."""
        n = len(w.seq.prompt_ids)
        end, size = w.prefilled + self._chunk_tokens(w), self._granule(w)
        while end < n and self._fits(chunk_end(end, n, size) - w.prefilled):
            end = chunk_end(end, n, size)
        return end

    def _next_fits(self, w: PrefillWork) -> bool:
        """Whether w's next granule fits this turn: a cached one while time is left, a computed one
        when its predicted time fits (`_fits`)."""
        if self._cached_node(w) is None:
            return self._fits(self._chunk_tokens(w))
        if self.prefill_token_budget is not None:
            return True
        return self._clock() - self._turn_start < self.prefill_chunk_s

    def _prefill_chunks(self) -> bool:
        """This turn's granules, within the budget: new requests (FIFO, into free slots; the
        turn's first granule always runs), then the prefills in progress, head first (it always
        gets one, so arrivals cannot starve it), each moving to the back of the line. A request
        runs as many granules in a row as fit. Returns whether any ran."""
        self._turn_start, self._turn_tokens = self._clock(), 0
        ran = 0
        in_progress = len(self._prefilling)
        while self._waiting and self._free_slots:
            if ran and not self._next_fits(self._waiting[0]):
                break
            w = self._waiting.popleft()
            w.slot = self._free_slots.pop()
            self._lookup(w)
            ran += self._run_granules(w, must=not ran)
        for i in range(in_progress):
            w = self._prefilling[0]
            # hung up since the step began: free the slot before another chunk
            if w.handle.cancelled:
                self._prefilling.popleft()
                self._finish(w, "abort")
                continue
            if i and not self._next_fits(w):
                break
            self._prefilling.popleft()
            ran += self._run_granules(w, must=not i)
        return ran > 0

    def _run_granules(self, w: PrefillWork, *, must: bool) -> int:
        """Granules of w, loaded from the prefix cache or computed, while they fit (the first one
        when `must`); w goes to the back of the prefills in progress unless it finished, failed or
        was cancelled. Returns the granules run."""
        ran = 0
        while True:
            if w.handle.cancelled:
                self._finish(w, "abort")
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
        self._prefilling.append(w)
        return ran

    def _run_chunk(self, w: PrefillWork) -> bool:
        """One prefill chunk of w; after the last, w joins the running requests with its first token
        sampled. Returns whether w is still prefilling."""
        prompt = w.seq.prompt_ids
        start, end = w.prefilled, self._compute_end(w)
        last = end == len(prompt)
        t0 = self._clock()
        try:
            logits = self.runner.prefill(w.slot, prompt[start:end], start=start, logits=last)
        except Exception as e:  # a failed request must not take the others down
            _log.exception("request %d failed", w.handle.request_id)
            self._finish(w, "error", error=f"prefill failed: {type(e).__name__}: {e}")
            return False
        seconds = self._clock() - t0
        w.prefilled = end
        w.prefill_seconds += seconds
        self._turn_tokens += end - start
        if seconds > 0:
            self._prefill_cost.observe(end - start, seconds)
        self._store(w, end, logits if last else None)
        with self._cv:
            self._stats.prefill_chunks += 1
        if not last:
            return True
        self._prefill_done(w, logits)
        return False

    def _prefill_done(self, w: PrefillWork, logits) -> None:
        """w's prompt is in its slot: it joins the running requests with its first token sampled
        from `logits` (its last position's)."""
        with self._cv:
            self._stats.prefill_seconds.observe(w.prefill_seconds)
            self._stats.prompt_tokens_total += len(w.seq.prompt_ids)
        self._release_prefix(w)
        self._running.append(w)
        self._accept(w, logits)

    # ---- the prefix cache -----------------------------------------------------------------------
    def _lookup(self, w: PrefillWork) -> None:
        """Count a new request's lookup (its granules load in `_load_cached`)."""
        if self.prefix_cache is not None:
            self.prefix_cache.count_lookup()
            self._publish_cache()

    def _next_granule(self, w: PrefillWork) -> bool:
        """Whether w's next chunk is a whole granule that extends its cached path and leaves at
        least the prompt's last token to compute (its logits come from a prefill)."""
        cache = self.prefix_cache
        if cache is None or not w.caching or w.prefilled != len(w.cached) * cache.granule:
            return False
        return w.prefilled + cache.granule <= len(w.seq.prompt_ids) - 1

    def _cached_node(self, w: PrefillWork) -> tuple[PrefixNode, int] | None:
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

    def _load_cached(self, w: PrefillWork, node: PrefixNode, rows: int) -> bool:
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

    def _at_tail(self, w: PrefillWork) -> bool:
        """Whether w's cached path reaches its last chunk (a granule or less to go)."""
        cache = self.prefix_cache
        left = len(w.seq.prompt_ids) - w.prefilled
        return (
            cache is not None
            and w.caching
            and w.prefilled == len(w.cached) * cache.granule
            and 0 < left <= cache.granule
        )

    def _store(self, w: PrefillWork, end: int, logits) -> None:
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

    def _release_prefix(self, w: PrefillWork) -> None:
        """Give back w's references (its prefill finished, failed or was cancelled)."""
        w.caching = False
        if w.cached and self.prefix_cache is not None:
            self.prefix_cache.release(w.cached)
        w.cached = []

    def _publish_cache(self) -> None:
        with self._cv:
            self._stats.prefix_cache = self.prefix_cache.stats()
