"""How long a runner's weight passes take, and what is chosen from it: the thread count each pass
runs on (each pass timed and told to `threads.ThreadChooser`, the candidates timed side by side at
warmup: `seed_threads`) and the speculation cost model (`pass_cost`: a pass over k rows of one slot
relative to a one-row pass, `measure_pass_costs`).

`PassTiming` is a mixin of `ModelRunner`: it reads the runner's `threads`, `thread_chooser`,
`max_seq_len`, `_timed_passes` and `_pass_costs`, and times its passes (prefill, decode, step).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence as Seq

# row counts timed for the speculation cost model: every count to 9, since the kernels take x rows
# in groups (4 for float32 tiles, up to 8 for stored rows) and the cost steps where a group ends
PASS_COST_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17, 25)


class PassTiming:
    """Thread counts and pass costs of a `ModelRunner`, from timed passes."""

    # set by the scheduler before each step: the requests' own thread limit (None: the chooser's
    # or the given count). Such passes are not the chooser's: not told to it
    pass_threads: int | None = None

    def _use_threads(self) -> int:
        """Set the thread count for the next pass and return it. numba's count is per calling
        thread, so it is checked on every call, from the calling thread."""
        import numba

        chooser, asked = self.thread_chooser, self.pass_threads
        if asked is not None:
            n = min(asked, self.threads)
        else:
            n = self.threads if chooser is None else chooser.threads_for_pass()
        if numba.get_num_threads() != n:
            numba.set_num_threads(n)
        return n

    def _record_pass(self, threads: int, rows: int, seconds: float) -> None:
        """Tell the chooser how long a kernel pass took (the first pass may have compiled: not
        counted)."""
        self._timed_passes += 1
        chosen = self.pass_threads is None  # else the requests' limit, not the chooser's choice
        if self.thread_chooser is not None and self._timed_passes > 1 and chosen:
            self.thread_chooser.record(threads, rows, seconds)

    def measure_pass_costs(self, rows: Seq[int] = PASS_COST_ROWS, reps: int = 7) -> None:
        """Time weight passes over several row counts of one slot, relative to a one-row pass: what
        a speculative verify of k drafted tokens costs (`pass_cost`). Once per runner.

        A round times every row count once; a first round warms up (not kept), then `reps` rounds,
        the fastest of each count kept: the work is fixed, so anything slower is the host's noise,
        and interleaved rounds let a drift hit every count alike. (Medians of 3 back to back read
        2 rows at 0.92x to 1.52x of one row on the same server build.)"""
        import time

        if self._pass_costs is not None:
            return
        n = max(rows)
        if self.max_seq_len < n + 2:
            self._pass_costs = {1: 1.0}
            self._cost_of.clear()
            self.one_row_pass_s = None
            return
        chooser = self.thread_chooser
        if chooser is not None:  # every count on the chooser's current threads, not its probes
            chooser.pinned = chooser.current
        self.prefill(0, [0])
        seconds: dict[int, float] = {}
        try:
            for round_ in range(reps + 1):
                for r in rows:
                    t0 = time.perf_counter()
                    self.step([(0, [0] * r, None)])
                    took = time.perf_counter() - t0
                    self.truncate(0, 1)
                    if round_:
                        seconds[r] = min(seconds.get(r, took), took)
        finally:
            if chooser is not None:
                chooser.pinned = None
            self.release(0)
        self._pass_costs = {r: seconds[r] / seconds[1] for r in rows}
        self._cost_of.clear()
        self.one_row_pass_s = seconds[1]

    @property
    def pass_costs(self) -> dict[int, float] | None:
        """The measured table (rows -> cost relative to one row); None before
        `measure_pass_costs`."""
        return dict(self._pass_costs) if self._pass_costs else None

    def pass_cost(self, rows: int) -> float:
        """Time of a pass over `rows` rows of one slot relative to one row (linear between measured
        counts, extrapolated past the last); 1 + 0.1 per extra row before `measure_pass_costs`
        ran."""
        known = self._cost_of.get(rows)  # the budget asks for up to 25 counts every step
        if known is not None:
            return known
        cost = self._cost_of[rows] = self._interpolated_cost(rows)
        return cost

    def _interpolated_cost(self, rows: int) -> float:
        table = self._pass_costs
        if not table or len(table) < 2:
            return 1.0 + 0.1 * (rows - 1)
        points = sorted(table.items())
        for (r0, c0), (r1, c1) in itertools.pairwise(points):
            if rows <= r1:
                return c0 + (c1 - c0) * (rows - r0) / (r1 - r0)
        (r0, c0), (r1, c1) = points[-2], points[-1]
        return c1 + (c1 - c0) * (rows - r1) / (r1 - r0)

    def seed_threads(self, rounds: int = 4) -> None:
        """Time one-row passes on each candidate thread count, side by side, and start the adaptive
        choice from the fastest (nothing to do for a given thread count)."""
        chooser = self.thread_chooser
        if chooser is None or len(chooser.candidates) < 2 or self.max_seq_len < 2:
            return
        self.prefill(0, [0])
        seconds: dict[int, list[float]] = {n: [] for n in chooser.candidates}
        try:
            for _ in range(rounds):
                for n in chooser.candidates:
                    chooser.pinned = n
                    started = time.perf_counter()
                    self.decode([0], [0])
                    seconds[n].append(time.perf_counter() - started)
                    self.truncate(0, 1)
        finally:
            chooser.pinned = None
            self.release(0)
        chooser.seed(seconds)
