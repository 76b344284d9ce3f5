"""Timing passes of a kernel and turning seconds into rates (shared by every probe kernel)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

Stats = dict[str, Any]


def rate_stats(amount: float, seconds: Sequence[float]) -> Stats:
    """Rates (amount per second) of each run, with their median, min and max."""
    return stats_of_rates([amount / s for s in seconds])


def stats_of_rates(rates: Sequence[float]) -> Stats:
    rates = list(rates)
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "runs": rates}


def time_passes_seconds(run_pass: Callable[[], Any], repeats: int, warmup: int) -> list[float]:
    """Wall seconds of `repeats` calls of `run_pass`, after `warmup` untimed ones (CPU work)."""
    for _ in range(warmup):
        run_pass()
    return [time_one_pass_seconds(run_pass) for _ in range(repeats)]


def time_one_pass_seconds(run_pass: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    run_pass()
    return time.perf_counter() - t0


def cuda_time_passes_seconds(
    torch: Any,
    run_pass: Callable[[], Any],
    repeats: int,
    warmup: int,
    min_run_seconds: float = 1e-3,
) -> list[float]:
    """Device seconds per pass from CUDA events, which leave out the host's launch latency. Short
    passes are timed `inner` at a time, so that one timed run lasts at least min_run_seconds."""

    def per_pass_seconds(inner: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            run_pass()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / inner  # elapsed_time is in milliseconds

    inner = 1
    for _ in range(max(warmup, 1)):  # the warm-up passes also size the batch
        inner = max(inner, math.ceil(min_run_seconds / max(per_pass_seconds(inner), 1e-7)))
    return [per_pass_seconds(inner) for _ in range(repeats)]


# the longest a CPU matmul pass should take: a bf16 GEMM on a CPU without bf16 instructions is
# slow enough that the default n would keep the probe busy for minutes
MATMUL_PASS_SECONDS = 0.5
MIN_MATMUL_N = 256


def matmul_n_within(
    n_max: int,
    pass_at: Callable[[int], Callable[[], Any]],
    budget_seconds: float = MATMUL_PASS_SECONDS,
) -> int:
    """The matmul size to time: n_max, or less where one pass would take over budget_seconds,
    judged from the faster of two passes of `pass_at(MIN_MATMUL_N)`, time growing as n^3. A
    multiple of 64, never below MIN_MATMUL_N (n_max when it is already that small).
    """
    if n_max <= MIN_MATMUL_N:
        return n_max
    run_pass = pass_at(MIN_MATMUL_N)
    t = max(min(time_one_pass_seconds(run_pass) for _ in range(2)), 1e-9)
    n = int(MIN_MATMUL_N * (budget_seconds / t) ** (1.0 / 3.0)) // 64 * 64
    return max(MIN_MATMUL_N, min(n_max, n))
