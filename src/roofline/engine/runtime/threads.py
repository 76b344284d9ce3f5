"""How many threads a weight pass runs on, chosen from measured pass times (the adaptive default).

Beside a busy neighbour, a pass split over every core waits at each phase change for the thread
whose core was taken, so all cores can be slower than one, and nothing predicts it. So the runner
times its passes and now and then probes another count (all cores, half, ..., one) on a pass of the
same rows: two wins in a row switch; a loss doubles the wait, up to `LONGEST_INTERVAL` passes.
When `CHANGE_PASSES` passes in a row differ by `CHANGE_RATIO` from their count's history,
conditions changed: the history is cut and probing restarts at once. Kernels sum in a fixed order
whatever the count, so switching never changes a result.

Bookkeeping only (no clock, no threads): the runner passes in its times.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from statistics import median

OMP_WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")

FIRST_INTERVAL = 8  # passes between probes right after a switch
LONGEST_INTERVAL = 64  # passes between probes once the current count keeps winning
# ... while fewer than all cores run: one thread's passes look the same whether the neighbour left
# or not, so only a probe of the larger counts can tell, and it must come often
FEWER_THREADS_LONGEST_INTERVAL = 16
HISTORY = 8  # recent pass times kept per (threads, rows)
WIN_MARGIN = 0.97  # a probe wins when it takes under this fraction of the current count's median
# the current count's passes this much slower (or faster) than its history: a change
CHANGE_RATIO = 1.25
CHANGE_PASSES = 3  # ... for this many passes in a row (a single slow pass is noise)


def prefer_passive_omp_waits(environ=os.environ, modules=sys.modules) -> bool:
    """Set OMP_WAIT_POLICY=PASSIVE unless a wait policy or spin count is set already, or torch is
    loaded (its OpenMP runtime has read the environment by then). True when it set it.

    Idle OpenMP workers of torch and numba otherwise spin before sleeping, taking the core the
    others wait for; the engine package calls this on import, before either starts threads."""
    if any(name in environ for name in OMP_WAIT_VARIABLES) or "torch" in modules:
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def candidate_thread_counts(most: int) -> tuple[int, ...]:
    """most, most // 2, ..., 1 (distinct, falling)."""
    counts, n = [], max(1, int(most))
    while True:
        counts.append(n)
        if n == 1:
            return tuple(counts)
        n = max(1, n // 2)


class ThreadChooser:
    """The thread count for the next pass (`threads_for_pass`), learned from `record`ed pass
    times."""

    def __init__(
        self,
        most: int,
        *,
        first_interval: int = FIRST_INTERVAL,
        longest_interval: int = LONGEST_INTERVAL,
    ):
        self.candidates = candidate_thread_counts(most)
        self.current = self.candidates[0]
        self.first_interval = max(1, int(first_interval))
        self.longest_interval = max(self.first_interval, int(longest_interval))
        self.interval = self.first_interval
        self.switches = 0
        self.changes = 0  # times the current count's own passes showed that conditions had changed
        self.passes_by_threads: dict[int, int] = dict.fromkeys(self.candidates, 0)
        self._times: dict[tuple[int, int], deque[float]] = {}
        self._since_probe = 0
        self._next_probe = 0  # index into candidates, round robin over the others
        self._pending: int | None = None  # a probe (or its confirmation) runs on the next pass
        self._wins = 0
        # set: every pass runs on this count and nothing is learned (`seed`)
        self.pinned: int | None = None

    def threads_for_pass(self) -> int:
        if self.pinned is not None:
            return self.pinned
        if (
            self._pending is None
            and len(self.candidates) > 1
            and self._since_probe >= self.interval
        ):
            others = [c for c in self.candidates if c != self.current]
            self._pending = others[self._next_probe % len(others)]
            self._next_probe += 1
        return self.current if self._pending is None else self._pending

    def record(self, threads: int, rows: int, seconds: float) -> None:
        """A pass over `rows` token rows took `seconds` on `threads` threads."""
        if self.pinned is not None:
            return
        self.passes_by_threads[threads] = self.passes_by_threads.get(threads, 0) + 1
        if threads != self._pending:
            self._since_probe += 1
            self._remember(threads, rows, seconds)
            if threads == self.current and self._conditions_changed(self._times[(threads, rows)]):
                self.interval = self.first_interval
                self._since_probe = self.interval  # probe the other counts from the next pass on
                self.changes += 1
            return
        reference = self._times.get((self.current, rows))
        self._remember(threads, rows, seconds)
        if not reference:  # nothing comparable (another row count): no verdict, probe again later
            self._pending, self._wins, self._since_probe = None, 0, 0
            return
        base = median(reference)
        if seconds < WIN_MARGIN * base:
            self._wins += 1
            if self._wins >= 2:
                self.current, self.interval = threads, self.first_interval
                self.switches += 1
                self._end_probe(won=True)
            # else: leave _pending set, so that the next pass confirms
        else:
            self._end_probe(won=False)

    @staticmethod
    def _conditions_changed(history: deque[float]) -> bool:
        """True (and the history cut to its newest CHANGE_PASSES) when those all lie CHANGE_RATIO or
        more above, or all below, the median of the passes before them."""
        if len(history) < 2 * CHANGE_PASSES:
            return False
        times = list(history)
        before, latest = median(times[:-CHANGE_PASSES]), times[-CHANGE_PASSES:]
        if not (
            all(t > CHANGE_RATIO * before for t in latest)
            or all(t * CHANGE_RATIO < before for t in latest)
        ):
            return False
        history.clear()
        history.extend(latest)
        return True

    def _remember(self, threads: int, rows: int, seconds: float) -> None:
        self._times.setdefault((threads, rows), deque(maxlen=HISTORY)).append(float(seconds))

    def _end_probe(self, *, won: bool) -> None:
        self._pending, self._wins, self._since_probe = None, 0, 0
        if not won:
            longest = (
                self.longest_interval
                if self.current == self.candidates[0]
                else min(
                    self.longest_interval, max(self.first_interval, FEWER_THREADS_LONGEST_INTERVAL)
                )
            )
            self.interval = min(longest, self.interval * 2)

    def seed(self, seconds_by_threads: dict[int, list[float]]) -> None:
        """Start from the candidate with the shortest median of these passes (timed side by side,
        same rows)."""
        medians = {
            n: median(v) for n, v in seconds_by_threads.items() if v and n in self.candidates
        }
        if not medians:
            return
        self.current = min(medians, key=lambda n: (medians[n], -n))
