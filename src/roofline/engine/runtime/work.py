"""One request inside the scheduler (`Work`: its sequence, sink, slot, prefill progress,
prefix-cache path and speculation) and the scheduler's requests by state (`Queues`)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from roofline.engine.runtime.prefix_cache import PrefixCache, PrefixNode
from roofline.engine.runtime.requests import RequestHandle, Sink
from roofline.engine.runtime.sequence import Sequence
from roofline.engine.runtime.speculate.step import RequestSpeculation
from roofline.kernel_modes import KernelsMode
from roofline.speculation import SpecOptions


@dataclass(eq=False)
class Work:
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
    kernels: KernelsMode | None = None  # the request's kernel shapes (None: the server's choice)

    def release_prefix(self, cache: PrefixCache | None) -> None:
        """Give back its prefix-cache references (its prefill finished, failed or was cancelled)."""
        self.caching = False
        if self.cached and cache is not None:
            cache.release(self.cached)
        self.cached = []


@dataclass(eq=False)
class Queues:
    """The requests by state. The inbox is shared with submitting threads (under the scheduler's
    lock); the rest belong to the scheduler thread."""

    max_batch: int
    # submitted, not yet seen by the scheduler thread: (work, speculate, its own options)
    inbox: deque[tuple[Work, bool, SpecOptions | None]] = field(default_factory=deque)
    waiting: deque[Work] = field(default_factory=deque)
    prefilling: deque[Work] = field(default_factory=deque)  # holding a slot, prompt not done
    running: list[Work] = field(default_factory=list)
    free_slots: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.free_slots = list(range(self.max_batch - 1, -1, -1))  # pop() hands out slot 0 first

    def live(self) -> tuple[Work, ...]:
        """Every request the scheduler thread holds (not the inbox)."""
        return (*self.waiting, *self.prefilling, *self.running)

    def remove(self, w: Work) -> None:
        """Take w out of the prefilling and running requests."""
        if w in self.running:
            self.running.remove(w)
        if w in self.prefilling:
            self.prefilling.remove(w)
