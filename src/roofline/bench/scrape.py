"""The server's own prefix-cache figures: its Prometheus `/metrics`, read after a scenario's warm-up
and again after its measured requests, so the difference covers the measured requests only.

    hits           lookups that found a cached prefix (roofline: requests; vLLM: tokens)
    lookups        prefix-cache lookups (roofline: requests; vLLM: prompt tokens queried)
    hit rate       hits / lookups
    tokens reused  prompt tokens whose KV came from the cache instead of a prefill
    cache bytes    what the cache holds after the scenario (a gauge: not differenced)
    evictions      entries evicted to stay within the budget

Which names a server uses is one registry, `SOURCES` (the first whose names appear wins).
llama-server's `/metrics` (`--metrics`) has no cache counters (it reports a response's reused
prompt tokens only as `timings.cache_n`), so it reads as not exposed, as does a server without
`/metrics`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from roofline.bench.api import Endpoint
from roofline.bench.http1 import FetchError, fetch

FIGURES = ("hits", "lookups", "tokens_reused", "cache_bytes", "evictions")
GAUGES = ("cache_bytes",)


@dataclass(frozen=True)
class CacheSource:
    """One server's metric names for the figures (None: it has no such figure). A counter is
    found under its name or with `_total` added, as Prometheus clients write counters."""

    name: str
    unit: str  # what hits and lookups count
    hits: str | None = None
    lookups: str | None = None
    tokens_reused: str | None = None
    cache_bytes: str | None = None
    evictions: str | None = None


SOURCES: tuple[CacheSource, ...] = (
    CacheSource(
        "roofline",
        "requests",
        hits="roofline_prefix_cache_hits",
        lookups="roofline_prefix_cache_lookups",
        tokens_reused="roofline_prefix_cache_tokens_reused",
        cache_bytes="roofline_prefix_cache_bytes",
        evictions="roofline_prefix_cache_evictions",
    ),
    # vLLM V1 (docs.vllm.ai "Production Metrics"): both counters are in tokens
    CacheSource(
        "vllm",
        "tokens",
        hits="vllm:prefix_cache_hits",
        lookups="vllm:prefix_cache_queries",
        tokens_reused="vllm:prefix_cache_hits",
    ),
)

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {metric name: value summed over its label sets}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m:  # comments (# HELP, # TYPE) and blank lines
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


@dataclass(frozen=True)
class Reading:
    """One read of /metrics: the source found and its figures, or why there are none."""

    source: CacheSource | None = None
    values: Mapping[str, float] | None = None
    error: str | None = None


def reading_of(samples: Mapping[str, float]) -> Reading:
    for src in SOURCES:
        values = {}
        for figure in FIGURES:
            name = getattr(src, figure)
            if name is None:
                continue
            for key in (name, f"{name}_total"):
                if key in samples:
                    values[figure] = samples[key]
                    break
        if values:
            return Reading(src, values)
    return Reading(error="its /metrics holds no prefix-cache figures")


async def read_metrics(endpoint: Endpoint, timeout_s: float = 5.0) -> Reading:
    """GET /metrics at the server's root; never raises."""
    try:
        status, _, body = await fetch(
            endpoint, f"{endpoint.root_path}/metrics", timeout_s=timeout_s
        )
    except (TimeoutError, FetchError, OSError) as e:
        return Reading(error=f"GET /metrics failed ({e})")
    if status != 200:
        return Reading(error=f"GET /metrics answered HTTP {status}")
    return reading_of(parse_prometheus(body.decode("utf-8", "replace")))


@dataclass(frozen=True)
class PrefixCache:
    """A scenario's prefix-cache figures from the server (see the module docstring); exposed False
    with the reason in `note` when the server gives none."""

    exposed: bool = False
    source: str | None = None
    unit: str | None = None
    hits: float | None = None
    lookups: float | None = None
    tokens_reused: float | None = None
    cache_bytes: float | None = None
    evictions: float | None = None
    note: str | None = None

    @property
    def hit_rate(self) -> float | None:
        if self.hits is None or not self.lookups:
            return None
        return self.hits / self.lookups

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["hit_rate"] = self.hit_rate
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> PrefixCache | None:
        if not d:
            return None
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def difference(before: Reading, after: Reading) -> PrefixCache:
    """The measured requests' figures: counters after - before, the cache's bytes as after."""
    if after.source is None:
        return PrefixCache(note=after.error)
    if before.source is not after.source:
        return PrefixCache(note=f"no reading before the scenario ({before.error})")
    figures: dict[str, float | None] = {}
    for figure in FIGURES:
        a, b = after.values.get(figure), before.values.get(figure)
        if figure in GAUGES:
            figures[figure] = a
        else:
            figures[figure] = None if a is None or b is None else a - b
    return PrefixCache(True, after.source.name, after.source.unit, **figures)


def _count(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def cache_table(summary: Any) -> tuple[str, list[str], list[list[str]], list[str]] | None:
    """The server's prefix-cache figures per scenario of a `bench.summary.RunSummary`: shown when
    the server exposes them or the workload is about the cache (then "not exposed" says so)."""
    from roofline.bench.workloads import workload_of

    workload = workload_of(summary.provenance)
    wanted = workload is not None and workload.reports_cache
    caches = [(s.name, s.prefix_cache) for s in summary.scenarios]
    if not (wanted or any(c is not None and c.exposed for _, c in caches)):
        return None
    headers = ["scenario", "hits", "lookups", "hit rate", "tokens reused", "cache MB", "evictions"]
    rows, notes = [], []
    for scenario, c in caches:
        if c is None or not c.exposed:
            rows.append([scenario, "not exposed"] + ["-"] * (len(headers) - 2))
            if c is not None and c.note:
                notes.append(f"{scenario}: not exposed: {c.note}")
            continue
        rate = c.hit_rate
        rows.append(
            [
                scenario,
                _count(c.hits),
                _count(c.lookups),
                "-" if rate is None else f"{100 * rate:.1f}%",
                _count(c.tokens_reused),
                "-" if c.cache_bytes is None else f"{c.cache_bytes / 1e6:.1f}",
                _count(c.evictions),
            ]
        )
        notes.append(
            f"{scenario}: {c.source}'s /metrics; hits and lookups count {c.unit}; the measured "
            "requests only (cache MB: after them)"
        )
    return (
        "prefix cache (the server's figures)",
        headers,
        rows,
        sorted(set(notes), key=notes.index),
    )
