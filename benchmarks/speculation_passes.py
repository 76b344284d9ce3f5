"""What a verify pass costs, two ways: `pass_costs`, each row count timed on its own after a prefill
(round robin, rolled back after each pass), and `TimedSteps`, through which `speculation.py`'s
decode loops run, timing every weight pass where it runs, plain decoding's apart from speculation's.

Why: the verify-cost table (`pass_costs`) times each row count on its own, round robin; in
generation a pass follows passes of other sizes, and a pass right after a heavier one runs slow for
a while (docs/measured.md). The ratio speculation pays is a k-row pass as it runs among the
speculative loop's passes against plain decoding's one-row pass as it runs among its own.
"""

from __future__ import annotations

import statistics
import time

MIN_PASSES = 5  # row counts seen fewer times in generation are not reported


class TimedSteps:
    """The runner, every `step` timed into `seconds[loop][rows]`; `loop` ("plain" or "spec") is
    set by the caller before each generation."""

    def __init__(self, runner) -> None:
        self._runner = runner
        self.loop = "plain"
        self.seconds: dict[str, dict[int, list[float]]] = {"plain": {}, "spec": {}}

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def step(self, batch):
        t0 = time.perf_counter()
        out = self._runner.step(batch)
        took = time.perf_counter() - t0
        rows = sum(len(ids) for _, ids, _ in batch)
        self.seconds[self.loop].setdefault(rows, []).append(took)
        return out


def pass_costs(runner, ks, reps, prompt_ids) -> dict[int, dict]:
    """Median seconds of a k-row pass on one slot after a prefill, reps interleaved over k."""
    ids = (prompt_ids * 4)[:100]
    runner.prefill(0, ids)
    base = runner.position(0)
    times = {k: [] for k in ks}
    for rep in range(reps):
        order = list(ks[rep % len(ks) :]) + list(ks[: rep % len(ks)])
        for k in order:
            t0 = time.perf_counter()
            runner.step([(0, ids[:k], None)])
            times[k].append(time.perf_counter() - t0)
            runner.truncate(0, base)
    runner.release(0)
    one = statistics.median(times[1])
    return {
        k: {"ms": 1e3 * statistics.median(v), "relative": statistics.median(v) / one}
        for k, v in times.items()
    }


def in_generation_costs(timed: TimedSteps) -> dict[int, dict]:
    """rows -> {"ms": median seconds of the speculative loops' passes of that many rows, in ms,
    "relative": that over the median one-row pass of plain decoding, "passes": how many}, for
    counts seen at least MIN_PASSES times; {} when plain decoding ran no pass."""
    plain = timed.seconds["plain"].get(1)
    if not plain:
        return {}
    one = statistics.median(plain)
    return {
        k: {"ms": 1e3 * statistics.median(v), "relative": statistics.median(v) / one,
            "passes": len(v)}
        for k, v in sorted(timed.seconds["spec"].items())
        if len(v) >= MIN_PASSES
    }  # fmt: skip
