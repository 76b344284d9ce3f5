"""Paired comparisons: is a candidate faster than the configuration it must beat, beyond noise?

Two trials run the same prompts the same number of times, so their measurements pair up by unit:
one (prompt, repetition) request for a one-stream objective, one repetition of the whole workload
for a concurrent one. Per pair j, in the objective's direction (> 1: the candidate is better)

    r_j = candidate_j / incumbent_j          (maximize; incumbent_j / candidate_j to minimize)
    R   = exp(mean_j log r_j)                the geometric mean: a prompt 2x faster and one 2x
                                             slower cancel, whatever their absolute speeds

and a 95% interval for R from a bootstrap, seeded so a run repeats its own decisions. The
prompts are the workload, not a sample of it: under greedy decoding a proposer's acceptance on each
prompt is fixed, so how prompts differ is the answer, and the noise is how a prompt's repetitions
disagree. So the bootstrap resamples repetitions within each prompt (stratified; R = exp of the
mean over prompts of each prompt's mean log ratio) whenever every prompt has two or more; with one
repetition per prompt, or per-repetition units, the spread between pairs is all there is to
measure and it resamples the pairs. With the handful of pairs a trial has (12 by default)
percentiles are too narrow, so the interval is widened about R by Hesterberg's expanded-percentile
factor sqrt(m / (m - 1)) * t(0.975, n - k) / z(0.975) (n pairs in k strata of m = n / k): without
it a step with no gain is called worse in 3-5% of simulated runs instead of 2.5%. Drift that moves
both members of a pair cancels in r_j. A step is kept only when the interval's low end clears
1 + TIE_RATIO; otherwise it is a tie and the simpler configuration (the incumbent) stays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from roofline.bench.records import RequestRecord

TIE_RATIO = 0.02  # a kept step must be at least 2% faster at the interval's low end
RESAMPLES = 2000
CONFIDENCE = 0.95  # the interval; t975 and Z975 below are its quantiles
Z975 = 1.959964


@dataclass(frozen=True)
class PairedRatio:
    """Candidate against incumbent over `pairs` paired units: R and its bootstrap interval."""

    ratio: float
    low: float
    high: float
    pairs: int

    @property
    def verdict(self) -> str:
        """ "better" (low end clears 1 + TIE_RATIO), "worse" (high end below 1) or "tie"."""
        if self.low > 1.0 + TIE_RATIO:
            return "better"
        if self.high < 1.0:
            return "worse"
        return "tie"

    def describe(self) -> str:
        return f"{self.ratio:.3f}x [{self.low:.3f}, {self.high:.3f}] over {self.pairs} pairs"

    def to_json(self) -> dict:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "pairs": self.pairs}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> PairedRatio | None:
        if not d:
            return None
        return cls(float(d["ratio"]), float(d["low"]), float(d["high"]), int(d["pairs"]))


def unit_key(record: RequestRecord, per_request: bool) -> str:
    """The pairing unit of a measured request: its prompt and repetition, or its repetition."""
    return f"{record.prompt}#{record.rep}" if per_request else f"rep {record.rep}"


def unit_values(
    records: Sequence[RequestRecord],
    value: Callable[[Sequence[RequestRecord]], float | None],
    per_request: bool,
) -> dict[str, float]:
    """The objective (`value` of a group of requests) on each pairing unit of the measured
    requests."""
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        if not r.warmup:
            groups.setdefault(unit_key(r, per_request), []).append(r)
    out = {}
    for key, group in groups.items():
        v = value(group)
        if v is not None and v > 0 and math.isfinite(v):
            out[key] = float(v)
    return out


_T975_SMALL = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776}  # Student's t, 97.5th percentile


def t975(df: int) -> float:
    """Student's t 97.5th percentile: a table below 5 degrees of freedom, else Cornish-Fisher's
    expansion about the normal's (within 0.1% from df = 5 up)."""
    if df in _T975_SMALL:
        return _T975_SMALL[df]
    z = Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def expansion(n: int, strata: int = 1) -> float:
    """How much wider than the plain percentile interval a small sample's must be: n pairs in
    `strata` groups resampled apart (n > strata)."""
    m = n / strata
    return math.sqrt(m / (m - 1)) * t975(n - strata) / Z975


def stratum(key: str) -> str:
    """A unit's prompt ("a#1" -> "a"); per-repetition units ("rep 1") are all one."""
    return key.rsplit("#", 1)[0] if "#" in key else ""


def _mean_of_means(groups: Sequence[Sequence[float]]) -> float:
    return math.exp(sum(sum(g) / len(g) for g in groups) / len(groups))


def paired_ratio(
    candidate: Mapping[str, float],
    incumbent: Mapping[str, float],
    maximize: bool = True,
    seed: int = 0,
    resamples: int = RESAMPLES,
) -> PairedRatio | None:
    """R and its bootstrap interval over the units both measured (None when none are shared)."""
    keys = sorted(set(candidate) & set(incumbent))
    if not keys:
        return None
    sign = 1.0 if maximize else -1.0
    by_prompt: dict[str, list[float]] = {}
    for k in keys:
        by_prompt.setdefault(stratum(k), []).append(
            sign * (math.log(candidate[k]) - math.log(incumbent[k]))
        )
    groups = list(by_prompt.values())
    if min(len(g) for g in groups) < 2:  # a prompt measured once: resample the pairs
        groups = [[x for g in groups for x in g]]
    n = len(keys)
    ratio = _mean_of_means(groups)
    if n <= len(groups):  # one pair proves nothing
        return PairedRatio(ratio, 0.0, math.inf, n)
    # all resamples at once (drawn one value at a time in Python, the bootstrap took 0.08 s a
    # call, and a ladder's decisions call it thousands of times): per prompt, `resamples` rows of
    # len(g) draws with replacement; the statistic is _mean_of_means of each row
    import numpy as np  # here: `roofline ceiling` and report pages read this module without it

    rng = np.random.default_rng(seed)
    log_means = np.zeros(resamples)
    for g in groups:
        values = np.asarray(g)
        log_means += values[rng.integers(len(g), size=(resamples, len(g)))].mean(axis=1)
    stats = np.sort(np.exp(log_means / len(groups))).tolist()
    tail = (1.0 - CONFIDENCE) / 2.0
    low = stats[int(tail * (resamples - 1))]
    high = stats[math.ceil((1.0 - tail) * (resamples - 1))]
    if low == high == ratio:  # every pair agrees: nothing to widen
        return PairedRatio(ratio, low, high, n)
    f = expansion(n, len(groups))
    low, high = ratio * (low / ratio) ** f, ratio * (high / ratio) ** f
    return PairedRatio(ratio, low, high, n)


CLEARLY_SLOWER = 0.85  # ... and at most this ratio: a challenger stopped after its first round


def clearly_worse(
    candidate: Mapping[str, float], incumbent: Mapping[str, float], maximize: bool = True
) -> PairedRatio | None:
    """The paired ratio when the candidate is clearly worse after a first round (the whole
    widened interval below 1 and R at most CLEARLY_SLOWER): no later round could make it a
    kept step, so it need not run them. None otherwise."""
    pr = paired_ratio(candidate, incumbent, maximize)
    return pr if pr is not None and pr.high < 1.0 and pr.ratio <= CLEARLY_SLOWER else None
