"""Continuous batching: one background thread owns the `ModelRunner` and steps every live request.

A step (1) drops cancelled requests, (2) runs a prefill turn: granules of prompts within a
time target (`prefill_chunk_ms`, from measured prefill times; or a fixed token budget, vLLM's
`max_num_batched_tokens`), (3) runs one batched pass for all decoding sequences (with speculation:
last token plus draft, speculate/step.py) and hands each request's output to its sink as an `Event`.

Granules are cut at fixed positions (prefill_chunks.py); a request's logits do not depend on how
they interleaved with others', nor on the budget, since every prefill row sums in the order of a
one-row decode whatever rows run beside it. Per turn: new
requests first (FIFO; the turn's first granule always runs), then prefills in progress in turn (the
head always gets a granule, so arrivals cannot starve it); each runs as many granules in a row as
fit. So a short request waits about one turn behind a long prefill; decodes about a turn.

With a prefix cache (prefix_cache.py), a prompt's granules already cached (an exact token prefix),
and the shared first rows of a cached granule that differs further on, are loaded instead of
computed (within the turn's time, as computed ones), and the granules it
computes are offered to the cache; its last chunk goes in with its logits, so the same prompt again
computes nothing.

The scheduler has a prefill planner (the prefill half of a step: prefill_planner.py) and a request
output (how a request's tokens and its end become events: request_output.py); the record each
request carries and the queues by state are in work.py.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from collections.abc import Sequence as Seq

from roofline.engine.runtime.prefill_chunks import (
    DEFAULT_PREFILL_CHUNK_MS,
    DEFAULT_PREFILL_CHUNK_TOKENS,
)
from roofline.engine.runtime.prefill_planner import PrefillPlanner
from roofline.engine.runtime.prefix_cache import PrefixCache
from roofline.engine.runtime.request_output import RequestOutput
from roofline.engine.runtime.requests import Event, RequestHandle, Sink, Usage, asyncio_sink
from roofline.engine.runtime.sampling import SamplingParams
from roofline.engine.runtime.scheduler_stats import SchedulerStats
from roofline.engine.runtime.sequence import Sequence, fit_to_context
from roofline.engine.runtime.speculate.step import (
    RequestSpeculation,
    draft_all,
    room_for_draft,
    settle,
    speculation_factory,
    verify_rows,
)
from roofline.engine.runtime.work import Queues, Work
from roofline.kernel_modes import KernelsMode
from roofline.speculation import SpecOptions

__all__ = [
    "DEFAULT_PREFILL_TOKEN_BUDGET",
    "Event",
    "RequestHandle",
    "Scheduler",
    "Sink",
    "Usage",
    "asyncio_sink",
]

# A fixed budget of prompt tokens per turn, when one is given instead of the time target: one
# default granule (a turn may add the head of the prefills in progress).
DEFAULT_PREFILL_TOKEN_BUDGET = DEFAULT_PREFILL_CHUNK_TOKENS
# makers of requests' own speculation options kept (the least recently asked is dropped beyond:
# its shared draft state with it)
MAX_OPTION_MAKERS = 8
_log = logging.getLogger(__name__)


class Scheduler:
    """Continuous batching over one runner. Use as a context manager, or `start()` then
    `close()`."""

    def __init__(
        self,
        runner,
        *,
        prefill_token_budget: int | None = None,
        prefill_chunk_ms: float = DEFAULT_PREFILL_CHUNK_MS,
        prefix_cache_mb: float = 0.0,
        clock: Callable[[], float] = time.perf_counter,
        speculation: Callable[[], RequestSpeculation] | None = None,
    ):
        """prefill_token_budget: prompt tokens per turn (None: the `prefill_chunk_ms` target).
        prefix_cache_mb: the prefix cache's budget (0: none; it needs a runner that prefills in
        granules and saves and loads K/V)."""
        if prefill_chunk_ms <= 0 or prefix_cache_mb < 0:
            raise ValueError(
                f"need prefill_chunk_ms > 0 and prefix_cache_mb >= 0, "
                f"got {prefill_chunk_ms}, {prefix_cache_mb}"
            )
        self.runner = runner
        # maker of one request's speculation (None: the server never drafts)
        self.speculation = speculation
        # a request's own options -> their maker (scheduler thread only); the server's own options
        # map to its maker, so a request naming them shares its state
        self._makers: dict[SpecOptions, Callable[[], RequestSpeculation] | None] = {}
        self._default_options = getattr(speculation, "options", None)
        self.max_batch = int(runner.max_batch)
        self.max_seq_len = int(runner.max_seq_len)
        granule = getattr(runner, "prefill_chunk_tokens", None)
        self.prefix_cache = (
            PrefixCache(granule, int(prefix_cache_mb * 2**20))
            if prefix_cache_mb and granule and hasattr(runner, "save_kv")
            else None
        )
        self._clock = clock
        self._cv = threading.Condition()
        self._queues = Queues(self.max_batch)
        self._ids = itertools.count(1)
        self._stats = SchedulerStats()
        if self.prefix_cache is not None:
            self._stats.prefix_cache = self.prefix_cache.stats()
        self.output = RequestOutput(runner, self._queues, self._stats, self._cv, self.prefix_cache)
        self.prefill = PrefillPlanner(
            runner,
            self._queues,
            self.output,
            self.prefix_cache,
            prefill_token_budget,
            prefill_chunk_ms / 1000.0,
            clock,
            self._stats,
            self._cv,
        )
        self._stopping = False
        self._thread: threading.Thread | None = None

    @classmethod
    def loading(
        cls,
        load: Callable[[], object],
        speculation: Callable[[object], object] | None = None,
        **kwargs,
    ) -> Scheduler:
        """Load the runner on the scheduler's own thread (and `speculation(runner)`, the maker of
        each request's speculation: it may load a draft runner and times verify passes), then step
        there; returns once it is loaded (re-raising whatever the load raised).

        Why: numba's OpenMP runtime keeps a thread team per calling thread; with weights loaded
        (torch ops, when the loader used torch) on one thread, the decode kernels on another ran
        at about one thread's speed. Loading and decoding on one thread keeps one team."""
        box: dict = {}
        ready = threading.Event()

        def boot() -> None:
            try:
                runner = load()
                scheduler = cls(
                    runner, speculation=speculation(runner) if speculation else None, **kwargs
                )
                scheduler._thread = threading.current_thread()
                box["scheduler"] = scheduler
            except BaseException as e:  # handed to the caller, which re-raises it
                box["error"] = e
                return
            finally:
                ready.set()
            scheduler._loop()

        threading.Thread(target=boot, name="roofline-scheduler", daemon=True).start()
        ready.wait()
        if "error" in box:
            raise box["error"]
        return box["scheduler"]

    # ---- caller side (any thread) -------------------------------------------------------------
    def start(self) -> Scheduler:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="roofline-scheduler", daemon=True
            )
            self._thread.start()
        return self

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop after the current step; requests still queued or running get an "error" event."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        else:
            self.output.fail_all("the server is shutting down")

    def __enter__(self) -> Scheduler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(
        self,
        prompt_ids: Seq[int],
        params: SamplingParams,
        sink: Sink,
        *,
        speculate: bool = True,
        options: SpecOptions | None = None,
        threads: int | None = None,
        kernels: KernelsMode | None = None,
    ) -> RequestHandle:
        """Queue one request; `max_tokens` is trimmed to the context left after the prompt.
        speculate=False: this request decodes without drafts even when the server speculates.
        options: this request's own speculation options instead of the server's; their maker is
        made once per distinct options, on the scheduler thread (it may time passes or load a draft
        model), and kept for later requests with the same options. threads: at most this many
        threads for the passes that hold this request (`pass_threads`); kernels: their kernel
        shapes (`pass_kernels`).

        Raises sequence.ContextLengthError when the prompt leaves no room, RuntimeError after
        close()."""
        prompt_ids = list(prompt_ids)
        params = fit_to_context(len(prompt_ids), params, self.max_seq_len)
        seq = Sequence(prompt_ids, params, self.runner.tokenizer)
        with self._cv:
            if self._stopping:
                raise RuntimeError("the scheduler is shut down")
            handle = RequestHandle(next(self._ids), self._wake)
            self._queues.inbox.append(
                (Work(handle, seq, sink, threads=threads, kernels=kernels), speculate, options)
            )
            self._stats.requests_total += 1
            self._stats.queued += 1
            self._cv.notify_all()
        return handle

    @property
    def max_threads(self) -> int:
        """The most threads a request may ask (`roofline_threads`): the runner's."""
        return int(getattr(self.runner, "threads", 1))

    @property
    def alive(self) -> bool:
        """True while the scheduler thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def stats(self) -> SchedulerStats:
        with self._cv:
            return self._stats.copy()

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    # ---- scheduler thread -----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not (
                    self._stopping
                    or self._queues.inbox
                    or self._queues.waiting
                    or self._queues.prefilling
                    or self._queues.running
                ):
                    self._cv.wait()
                if self._stopping:
                    break
                arrived = list(self._queues.inbox)
                self._queues.inbox.clear()
            for w, speculate, options in arrived:
                if self._speculate(w, speculate, options):
                    self._queues.waiting.append(w)
            self._step()
        self.output.fail_all("the server is shutting down")

    def _speculate(self, w: Work, speculate: bool, options: SpecOptions | None) -> bool:
        """Give an arrived request its speculation; False (the request failed) when its own
        options' maker could not be made."""
        if not speculate:
            return True
        try:
            maker = self.speculation if options is None else self._maker(options)
            w.spec = maker() if maker is not None else None
        except Exception as e:
            _log.exception("speculation for request %d failed", w.handle.request_id)
            self.output.finish(w, "error", error=f"speculation failed: {type(e).__name__}: {e}")
            return False
        return True

    def _maker(self, options: SpecOptions) -> Callable[[], RequestSpeculation] | None:
        """The maker of `options` (made on first use; at most MAX_OPTION_MAKERS kept)."""
        if options == self._default_options:
            return self.speculation
        if options in self._makers:
            self._makers[options] = self._makers.pop(options)  # most recently asked last
        else:
            if len(self._makers) >= MAX_OPTION_MAKERS:
                self._makers.pop(next(iter(self._makers)))
            self._makers[options] = speculation_factory(options, self.runner)
        return self._makers[options]

    def _step(self) -> None:
        t0 = self._clock()
        self._drop_cancelled()
        self.runner.pass_threads = self._pass_threads()
        self.runner.pass_kernels = self._pass_kernels()
        try:
            worked = self.prefill.turn()
            if self._queues.running:
                self._decode()
                worked = True
        finally:  # passes outside a step (a maker timing its costs) are the server's own
            self.runner.pass_threads = None
            self.runner.pass_kernels = None
        with self._cv:
            if worked:
                self._stats.step_seconds.observe(self._clock() - t0)
            self._stats.running = len(self._queues.running) + len(self._queues.prefilling)
            self._stats.queued = len(self._queues.waiting) + len(self._queues.inbox)

    def _pass_threads(self) -> int | None:
        """The fewest threads any live request asks (None: none asks): kernels sum in a fixed order
        whatever the count, so a request's limit changes its neighbours' speed, never their ids."""
        return min((w.threads for w in self._queues.live() if w.threads), default=None)

    def _pass_kernels(self) -> KernelsMode | None:
        """The kernel shapes the live requests ask, when those that ask agree (None: the server's
        own): any shape gives the same bits, so this too changes speed only."""
        asked = {w.kernels for w in self._queues.live() if w.kernels}
        return asked.pop() if len(asked) == 1 else None

    def _drop_cancelled(self) -> None:
        for queue in (self._queues.waiting, self._queues.prefilling):
            for w in [w for w in queue if w.handle.cancelled]:
                queue.remove(w)
                self.output.finish(w, "abort")
        for w in [w for w in self._queues.running if w.handle.cancelled]:
            self.output.finish(w, "abort")

    def _decode(self) -> None:
        """One pass for every running request: its last token, plus its draft when it speculates."""
        batch = list(self._queues.running)
        try:
            trees = draft_all(
                [
                    (
                        w.spec,
                        w.seq.prompt_ids + w.seq.output_ids,
                        room_for_draft(w.seq, self.runner, w.slot),
                    )
                    for w in batch
                ]
            )
            rows = [
                (w.slot, *verify_rows(w.seq.output_ids[-1], tree)) for w, tree in zip(batch, trees)
            ]
            starts = [self.runner.position(w.slot) for w in batch]
            logits = self.runner.step(rows)
        except Exception as e:
            _log.exception("batched decode of %d requests failed", len(batch))
            for w in batch:
                self.output.finish(w, "error", error=f"decode failed: {type(e).__name__}: {e}")
            return
        with self._cv:
            self._stats.decode_steps += 1
            self._stats.decode_batch_total += len(batch)
            self._stats.decode_rows_total += sum(len(r[1]) for r in rows)
        for w, tree, start, row_logits in zip(batch, trees, starts, logits):
            w.passes += 1
            try:
                tokens, text = settle(self.runner, w.slot, start, tree, row_logits, w.seq, w.spec)
            except Exception as e:
                _log.exception("request %d failed", w.handle.request_id)
                self.output.finish(
                    w, "error", error=f"verification failed: {type(e).__name__}: {e}"
                )
                continue
            self.output.emit_tokens(w, tuple(tokens), text)
