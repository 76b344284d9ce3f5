"""What the scheduler counts: a Prometheus-style histogram and the counters `/metrics` exposes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

from roofline.engine.runtime.prefix_cache import PrefixCacheStats
from roofline.engine.runtime.speculate.adaptive import SpecStats

# Step-time buckets (seconds), about doubling: from a fast decode step of a small model up to a long
# prefill.
STEP_BUCKETS_SECONDS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
)


class Histogram:
    """Cumulative-bucket histogram (Prometheus semantics): counts[i] = observations <= bounds[i]."""

    def __init__(self, bounds: Seq[float] = STEP_BUCKETS_SECONDS):
        self.bounds = tuple(bounds)
        self.counts = [0] * len(self.bounds)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        for i, b in enumerate(self.bounds):
            if value <= b:
                self.counts[i] += 1

    def copy(self) -> Histogram:
        h = Histogram(self.bounds)
        h.counts, h.count, h.sum = list(self.counts), self.count, self.sum
        return h


@dataclass
class SchedulerStats:
    """Counters since start plus the gauges of the last step; `Scheduler.stats()` returns a copy."""

    requests_total: int = 0  # accepted by submit
    finished: dict[str, int] = field(default_factory=dict)  # by finish reason ("stop", "length")
    cancelled: int = 0
    failed: int = 0
    prompt_tokens_total: int = 0  # of requests whose prefill finished
    # prefill chunks run (a prompt takes ceil(length / the runner's chunk) of them)
    prefill_chunks: int = 0
    generation_tokens_total: int = 0
    running: int = 0  # holding a slot: prefilling or decoding
    queued: int = 0
    step_seconds: Histogram = field(default_factory=Histogram)
    prefill_seconds: Histogram = field(default_factory=Histogram)  # one request's chunks, summed
    # sum over decode steps of the batch size: mean batch = this / decode steps
    decode_batch_total: int = 0
    decode_steps: int = 0
    decode_rows_total: int = 0  # rows of all decode passes (batch + draft nodes)
    # summed over finished requests (passes of all; drafts of those that speculated)
    spec: SpecStats = field(default_factory=SpecStats)
    prefix_cache: PrefixCacheStats | None = None  # None: the scheduler has no prefix cache

    def copy(self) -> SchedulerStats:
        return dataclasses.replace(
            self,
            finished=dict(self.finished),
            step_seconds=self.step_seconds.copy(),
            prefill_seconds=self.prefill_seconds.copy(),
            spec=dataclasses.replace(self.spec),
        )
