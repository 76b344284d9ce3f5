"""Prometheus exposition of the scheduler's counters (read at scrape time, nothing global).

Names follow Prometheus conventions (`_total` counters, `_seconds` histograms). A step's time is
one batched decode plus any prefills it admitted; mean batch = decode tokens / decode steps;
acceptance rate = accepted / verified draft tokens; prefix-cache hit rate = hits / lookups.
Requests the HTTP layer refused (bad input, auth, limits, stopping) are counted by status, apart
from the scheduler's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from roofline.engine.runtime.prefix_cache import PrefixCacheStats
from roofline.engine.runtime.scheduler import Scheduler
from roofline.engine.runtime.scheduler_stats import Histogram


def _histogram(name: str, doc: str, h: Histogram) -> HistogramMetricFamily:
    buckets = [(repr(float(b)), c) for b, c in zip(h.bounds, h.counts)] + [("+Inf", h.count)]
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=h.sum)


class SchedulerCollector:
    """A prometheus_client collector: register it on an app's own `CollectorRegistry`."""

    def __init__(self, scheduler: Scheduler, prefix: str = "roofline"):
        self.scheduler = scheduler
        self.prefix = prefix

    def collect(self) -> Iterator[Metric]:
        s, p = self.scheduler.stats(), self.prefix
        yield CounterMetricFamily(
            f"{p}_requests", "Requests accepted by the scheduler.", value=s.requests_total
        )
        finished = CounterMetricFamily(
            f"{p}_requests_finished",
            "Requests that finished, by finish reason.",
            labels=["finish_reason"],
        )
        for reason in sorted(set(s.finished) | {"stop", "length"}):
            finished.add_metric([reason], s.finished.get(reason, 0))
        yield finished
        yield CounterMetricFamily(
            f"{p}_requests_cancelled",
            "Requests cancelled (client gone) before they finished.",
            value=s.cancelled,
        )
        yield CounterMetricFamily(
            f"{p}_requests_failed", "Requests that ended with an engine error.", value=s.failed
        )
        yield CounterMetricFamily(
            f"{p}_prompt_tokens", "Prompt tokens prefilled.", value=s.prompt_tokens_total
        )
        yield CounterMetricFamily(
            f"{p}_generation_tokens", "Tokens generated.", value=s.generation_tokens_total
        )
        yield GaugeMetricFamily(
            f"{p}_requests_running", "Requests holding a slot.", value=s.running
        )
        yield GaugeMetricFamily(
            f"{p}_requests_queued", "Requests waiting for a slot.", value=s.queued
        )
        yield GaugeMetricFamily(
            f"{p}_max_batch",
            "Slots (sequences decoded together at most).",
            value=self.scheduler.max_batch,
        )
        yield _histogram(
            f"{p}_step_seconds",
            "Wall time of one scheduler step (prefills admitted + one batched decode).",
            s.step_seconds,
        )
        yield _histogram(
            f"{p}_prefill_seconds", "Wall time of one request's prefill.", s.prefill_seconds
        )
        yield CounterMetricFamily(
            f"{p}_decode_steps", "Batched decode calls.", value=s.decode_steps
        )
        yield CounterMetricFamily(
            f"{p}_decode_batch_tokens",
            "Sequences decoded, summed over decode calls "
            "(divide by decode_steps for the mean batch).",
            value=s.decode_batch_total,
        )
        yield CounterMetricFamily(
            f"{p}_decode_rows",
            "Rows of all decode passes: one per sequence plus its draft tokens when it speculates.",
            value=s.decode_rows_total,
        )
        yield CounterMetricFamily(
            f"{p}_request_weight_passes",
            "Weight passes of finished requests (prefill and "
            "decode steps; divide generated tokens by it for tokens per pass).",
            value=s.spec.passes,
        )
        yield CounterMetricFamily(
            f"{p}_spec_draft_tokens",
            "Draft tokens verified (finished requests).",
            value=s.spec.drafted,
        )
        yield CounterMetricFamily(
            f"{p}_spec_accepted_tokens",
            "Draft tokens accepted (finished requests); acceptance rate = accepted / draft.",
            value=s.spec.accepted,
        )
        rate = s.spec.acceptance_rate
        yield GaugeMetricFamily(
            f"{p}_spec_acceptance_rate",
            "Accepted / drafted tokens so far (NaN before any draft).",
            value=float("nan") if rate is None else rate,
        )
        yield from self._positions(p)
        yield from self._prefix_cache(p, s.prefix_cache or PrefixCacheStats())

    @staticmethod
    def _prefix_cache(p: str, c: PrefixCacheStats) -> Iterator[Metric]:
        """The prefix cache's counters and size (all 0 when the server has none: budget 0)."""
        yield CounterMetricFamily(
            f"{p}_prefix_cache_lookups", "Requests looked up in the prefix cache.", value=c.lookups
        )
        yield CounterMetricFamily(
            f"{p}_prefix_cache_hits",
            "Requests that reused at least one cached prefill granule.",
            value=c.hits,
        )
        yield CounterMetricFamily(
            f"{p}_prefix_cache_tokens_reused",
            "Prompt tokens loaded from the prefix cache instead of prefilled.",
            value=c.tokens_reused,
        )
        yield CounterMetricFamily(
            f"{p}_prefix_cache_evictions",
            "Granules evicted from the prefix cache (least recently used first).",
            value=c.evictions,
        )
        yield GaugeMetricFamily(
            f"{p}_prefix_cache_bytes", "K/V bytes held by the prefix cache.", value=c.bytes
        )
        yield GaugeMetricFamily(
            f"{p}_prefix_cache_budget_bytes",
            "The prefix cache's budget in bytes (0: no prefix cache).",
            value=c.budget_bytes,
        )
        yield GaugeMetricFamily(
            f"{p}_prefix_cache_entries", "Granules held by the prefix cache.", value=c.entries
        )

    def _positions(self, p: str) -> Iterator[Metric]:
        """Per draft position: offered and reached by the accepted path, by proposer and match
        length bucket (survival = survived / offered; the adaptive budget's s_i)."""
        table = getattr(self.scheduler.speculation, "acceptance", None)
        labels = ["proposer", "match", "position"]
        offered = CounterMetricFamily(
            f"{p}_spec_position_offered",
            "Verify steps that offered this draft position.",
            labels=labels,
        )
        survived = CounterMetricFamily(
            f"{p}_spec_position_survived",
            "Verify steps whose accepted path reached this draft position.",
            labels=labels,
        )
        for row in table.rows() if table is not None else ():
            key = [row.proposer, row.match, str(row.position)]
            offered.add_metric(key, row.offered)
            survived.add_metric(key, row.survived)
        yield offered
        yield survived


class RefusalCollector:
    """Requests answered with an error before the scheduler saw them (400 bad input, 401 key, 404
    model, 408 slow body, 413 big body, 431 big headers, 503 stopping), by status; `counts` is the
    server's."""

    STATUSES = (400, 401, 404, 408, 413, 431, 503)

    def __init__(self, counts: Counter, prefix: str = "roofline"):
        self.counts = counts
        self.prefix = prefix

    def collect(self) -> Iterator[Metric]:
        fam = CounterMetricFamily(
            f"{self.prefix}_http_refused",
            "Requests refused before reaching the scheduler, by HTTP status.",
            labels=["status"],
        )
        for status in sorted(set(self.counts) | set(self.STATUSES)):
            fam.add_metric([str(status)], self.counts.get(status, 0))
        yield fam
