"""Every benchmark metric, defined once (docs/metrics.md says it in words).

Per request: token-bearing chunk i arrives at t_i with k_i tokens, n = sum k_i; times are ns after
the request's *intended* send, so client queueing counts (no coordinated omission).

    TTFT          = t_0
    E2E           = t_last
    TPOT          = (E2E - TTFT) / (n - 1)        needs n >= 2
    Output Speed  = 1 / TPOT
    chunk gap_i   = t_i - t_(i-1)                 vLLM/SGLang's ITL (i >= 1)
    ITL per token = gap_i / k_i for each token of chunk i, 0 for the k_0 - 1 extra tokens of the
                    first chunk: n - 1 values whose mean is exactly TPOT
    send lag      = actual send - intended send

Per scenario (measured requests; window = first intended send -> last end): requests/s and output
tokens/s of successful requests; goodput counts only those meeting every SLO. Distributions: mean,
std (population), p50/p90/p95/p99 (linear interpolation), min, max.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from roofline.errors import UserError

if TYPE_CHECKING:
    from roofline.bench.records import RequestRecord

NS_PER_S = 1_000_000_000
STAT_NAMES = ("mean", "std", "p50", "p90", "p95", "p99", "min", "max")

# SLO keys a user may give, and the per-request metric each one bounds (an upper limit).
SLO_METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s", "itl": "itl_max_s"}


def ttft_seconds(chunk_ns: Sequence[int]) -> float | None:
    return chunk_ns[0] / NS_PER_S if chunk_ns else None


def e2e_seconds(chunk_ns: Sequence[int]) -> float | None:
    return chunk_ns[-1] / NS_PER_S if chunk_ns else None


def tpot_seconds(ttft_s: float | None, e2e_s: float | None, output_tokens: int) -> float | None:
    """(E2E - TTFT) / (n - 1): the mean time per token after the first (vLLM's and MLPerf's
    TPOT)."""
    if ttft_s is None or e2e_s is None or output_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)


def output_speed_tok_per_s(tpot_s: float | None) -> float | None:
    """Tokens per second after the first token of one request (Artificial Analysis' Output
    Speed)."""
    if tpot_s is None or tpot_s <= 0:
        return None
    return 1.0 / tpot_s


def chunk_gaps_seconds(chunk_ns: Sequence[int]) -> list[float]:
    return [(b - a) / NS_PER_S for a, b in pairwise(chunk_ns)]


def itl_per_token_seconds(chunk_ns: Sequence[int], chunk_tokens: Sequence[int]) -> list[float]:
    """One gap per token after the first; a chunk's gap is split evenly over the tokens it
    carried."""
    if not chunk_ns:
        return []
    out = [0.0] * max(chunk_tokens[0] - 1, 0)
    for i in range(1, len(chunk_ns)):
        k = chunk_tokens[i]
        if k > 0:
            out.extend([(chunk_ns[i] - chunk_ns[i - 1]) / NS_PER_S / k] * k)
    return out


@dataclass(frozen=True)
class RequestMetrics:
    """The per-request metrics of one request (None where a metric is undefined)."""

    ttft_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    output_speed_tok_per_s: float | None = None
    itl_max_s: float | None = None
    send_lag_s: float | None = None
    output_tokens: int = 0
    chunks: int = 0
    tokens_per_chunk: float | None = None

    def value(self, name: str) -> float | None:
        """The metric called `name` (an SLO's, `SLO_METRICS`)."""
        return getattr(self, name)


def request_metrics(record: RequestRecord) -> RequestMetrics:
    """The per-request metrics of one request (a `requests.jsonl` line read back)."""
    chunk_ns = record.chunk_offsets_ns
    tokens = record.chunk_tokens
    n = int(record.output_tokens or sum(tokens))
    ttft = ttft_seconds(chunk_ns)
    e2e = e2e_seconds(chunk_ns)
    tpot = tpot_seconds(ttft, e2e, n)
    itl = itl_per_token_seconds(chunk_ns, tokens)
    sent = record.sent_offset_ns
    return RequestMetrics(
        ttft_s=ttft,
        e2e_s=e2e,
        tpot_s=tpot,
        output_speed_tok_per_s=output_speed_tok_per_s(tpot),
        itl_max_s=max(itl) if itl else None,
        send_lag_s=sent / NS_PER_S if sent is not None else None,
        output_tokens=n,
        chunks=len(chunk_ns),
        tokens_per_chunk=n / len(chunk_ns) if chunk_ns else None,
    )


def distribution(values: Iterable[float | None]) -> dict[str, float] | None:
    """mean, std, p50, p90, p95, p99, min, max and n of the values that are not None."""
    import numpy as np

    v = np.fromiter((x for x in values if x is not None), dtype=np.float64)
    if v.size == 0:
        return None
    p50, p90, p95, p99 = np.percentile(v, [50, 90, 95, 99])
    return {
        "n": int(v.size),
        "mean": float(v.mean()),
        "std": float(v.std()),
        "p50": float(p50),
        "p90": float(p90),
        "p95": float(p95),
        "p99": float(p99),
        "min": float(v.min()),
        "max": float(v.max()),
    }


def window_seconds(records: Sequence[RequestRecord]) -> float:
    """First intended send -> last end over the given requests (on one run's clock)."""
    if not records:
        return 0.0
    start = min(r.intended_ns for r in records)
    end = max(r.intended_ns if r.end_ns is None else r.end_ns for r in records)
    return max(end - start, 0) / NS_PER_S


def rate_per_s(count: float, window_s: float) -> float | None:
    return count / window_s if window_s > 0 else None


def meets_slo(metrics: RequestMetrics, slo_s: Mapping[str, float]) -> bool:
    """True when every bounded metric exists and is within its limit."""
    for key, limit in slo_s.items():
        value = metrics.value(SLO_METRICS[key])
        if key == "tpot" and value is None and metrics.output_tokens == 1:
            continue  # a one-token answer has no TPOT to miss
        if value is None or value > limit:
            return False
    return True


@dataclass(frozen=True)
class Goodput:
    """Rates of the successful requests that met every SLO (summary.json's "goodput")."""

    slo_s: Mapping[str, float]
    requests_meeting_slo: int
    fraction: float | None
    requests_per_s: float | None
    output_tok_per_s: float | None


def goodput(
    per_request: Sequence[RequestMetrics], slo_s: Mapping[str, float], window_s: float
) -> Goodput:
    """Rates counting only the successful requests that meet every SLO (per_request: their
    metrics)."""
    good = [m for m in per_request if meets_slo(m, slo_s)]
    return Goodput(
        slo_s=dict(slo_s),
        requests_meeting_slo=len(good),
        fraction=len(good) / len(per_request) if per_request else None,
        requests_per_s=rate_per_s(len(good), window_s),
        output_tok_per_s=rate_per_s(sum(m.output_tokens for m in good), window_s),
    )


def parse_slo(text: str) -> dict[str, float]:
    """'ttft=450ms,tpot=40ms' -> {'ttft': 0.45, 'tpot': 0.04} (seconds)."""
    from roofline.units import parse_seconds

    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in SLO_METRICS:
            known = ", ".join(SLO_METRICS)
            raise UserError(
                f"unknown SLO {part!r}: write KEY=TIME with KEY one of {known}, "
                "e.g. ttft=450ms,tpot=40ms"
            )
        seconds = parse_seconds(value, what=f"SLO {key}")
        if not math.isfinite(seconds) or seconds <= 0:
            raise UserError(f"SLO {key} must be a positive time (got {value!r})")
        out[key] = seconds
    if not out:
        raise UserError("--slo is empty: write e.g. ttft=450ms,tpot=40ms")
    return out
