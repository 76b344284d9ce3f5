"""How long a runner's weight passes take, and what is chosen from it: the speculation cost model
(`PassCosts`: a pass over k rows of one slot relative to a one-row pass, `measure_pass_costs`) and
the thread count the adaptive choice starts from (`seed_threads`: the candidates timed side by
side at warmup). Both run passes through the runner's public calls (prefill, step, decode,
truncate, release)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

from roofline.speculation import pass_cost_between

# row counts timed for the speculation cost model: every count to 9, since the kernels take x rows
# in groups (4 for float32 tiles, up to 8 for stored rows) and the cost steps where a group ends
PASS_COST_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17, 25)


@dataclass
class PassCosts:
    """rows -> time of a pass over that many rows of one slot relative to one row (`table`; None
    before it was measured), and the one-row pass in seconds."""

    table: dict[int, float] | None = None
    one_row_s: float | None = None
    _cost_of: dict[int, float] = field(default_factory=dict, repr=False)  # answers so far

    def cost(self, rows: int) -> float:
        """Linear between measured counts, extrapolated past the last; 1 + 0.1 per extra row
        before the table was measured."""
        known = self._cost_of.get(rows)  # the budget asks for up to 25 counts every step
        if known is not None:
            return known
        cost = self._cost_of[rows] = self._interpolated(rows)
        return cost

    def to_json(self) -> dict[str, object]:
        return {
            "table": None if self.table is None else {str(r): c for r, c in self.table.items()},
            "one_row_s": self.one_row_s,
        }

    @classmethod
    def from_json(cls, d: object) -> PassCosts:
        """The costs of a `to_json` object of a measured table; ValueError when it is not one."""
        table = d.get("table") if isinstance(d, dict) else None
        one_row_s = d.get("one_row_s") if isinstance(d, dict) else None
        if (
            not isinstance(table, dict)
            or not table
            or not all(isinstance(c, int | float) and c > 0 for c in table.values())
            or not isinstance(one_row_s, int | float)
            or one_row_s <= 0
        ):
            raise ValueError(f"not a table of pass costs: {d!r}")
        try:
            rows = {int(r): float(c) for r, c in table.items()}
        except ValueError:
            raise ValueError(f"not a table of pass costs: {d!r}") from None
        if rows.get(1) != 1.0:
            raise ValueError(f"not a table of pass costs relative to one row: {d!r}")
        return cls(rows, float(one_row_s))

    def _interpolated(self, rows: int) -> float:
        table = self.table
        if not table or len(table) < 2:
            return 1.0 + 0.1 * (rows - 1)
        return pass_cost_between(sorted(table.items()), rows)


@contextlib.contextmanager
def timing_slot(runner) -> Iterator[None]:
    """Slot 0 holding one position for timed passes (`pass_seconds`), every pass on the thread
    chooser's current count; afterwards the slot is empty and the chooser free again."""
    chooser = runner.thread_chooser
    if chooser is not None:
        chooser.pinned = chooser.current
    runner.prefill(0, [0])
    try:
        yield
    finally:
        if chooser is not None:
            chooser.pinned = None
        runner.release(0)


def pass_seconds(runner, rows: int) -> float:
    """Seconds of one weight pass over `rows` rows of slot 0 (inside `timing_slot`), the slot then
    rolled back to its one position."""
    t0 = time.perf_counter()
    runner.step([(0, [0] * rows, None)])
    took = time.perf_counter() - t0
    runner.truncate(0, 1)
    return took


def measure_pass_costs(runner, rows: Seq[int] = PASS_COST_ROWS, reps: int = 7) -> PassCosts:
    """Time weight passes over several row counts of slot 0, relative to a one-row pass: what a
    speculative verify of k drafted tokens costs.

    A round times every row count once; a first round warms up (not kept), then `reps` rounds, the
    fastest of each count kept: the work is fixed, so anything slower is the host's noise, and
    interleaved rounds let a drift hit every count alike. (Medians of 3 back to back read 2 rows at
    0.92x to 1.52x of one row on the same server build.)"""
    if runner.max_seq_len < max(rows) + 2:
        return PassCosts({1: 1.0})
    seconds: dict[int, float] = {}
    with timing_slot(runner):  # every count on the chooser's current threads, not its probes
        for round_ in range(reps + 1):
            for r in rows:
                took = pass_seconds(runner, r)
                if round_:
                    seconds[r] = min(seconds.get(r, took), took)
    return PassCosts({r: seconds[r] / seconds[1] for r in rows}, seconds[1])


def seed_threads(runner, rounds: int = 4) -> None:
    """Time one-row passes on each candidate thread count, side by side, and start the runner's
    adaptive choice from the fastest (nothing to do for a given thread count)."""
    chooser = runner.thread_chooser
    if chooser is None or len(chooser.candidates) < 2 or runner.max_seq_len < 2:
        return
    seconds: dict[int, list[float]] = {n: [] for n in chooser.candidates}
    with timing_slot(runner):
        for _ in range(rounds):
            for n in chooser.candidates:
                chooser.pinned = n
                seconds[n].append(pass_seconds(runner, 1))
    chooser.seed(seconds)
