"""Where a prompt's prefill is cut: at every multiple of the granule (the chunk size), whoever runs
it.

The scheduler runs a prompt's granules a few per turn between decode steps (as many as fit its time
target); `ModelRunner.prefill` runs all the granules of what it is given in a row. Both cut at the
same fixed positions (never at "what this step's budget had left") and run each granule as its own
computation, or several merged where the runner found prefill rows invariant to their neighbours
(`prefill_runs`, prefill_probe.py), so a request's logits do not depend on what else was running,
on the budget, or on which granules came from the prefix cache. Pure arithmetic: no torch, no
numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

# Granule (tokens) of the default runner. It is the floor of a prefill turn (a turn runs at least
# one), so it must fit the turn's time target on a small CPU; it is also the prefix cache's unit of
# reuse. Smaller granules cost GEMM efficiency: on the default model the prefill rate per core at
# 64 rows is about four fifths of that at 128-256 rows, at 32 rows about two thirds; a 64-token
# granule takes about the 150 ms target on two cores, a 128-token one about twice that
# (docs/measured.md).
DEFAULT_PREFILL_CHUNK_TOKENS = 64

# Granules up to this length prefill through the decode kernels: below it they beat torch's small-M
# GEMMs (figures in docs/measured.md).
KERNEL_PREFILL_MAX_TOKENS = 24

# Target time (ms) of one scheduler turn of prefill: granules run while they fit it (`PrefillCost`),
# so a decode step or a new request waits about this long behind a long prompt, on any host.
DEFAULT_PREFILL_CHUNK_MS = 150.0


def chunk_end(position: int, total: int, chunk_tokens: int) -> int:
    """End (exclusive) of the chunk that holds `position` in a prompt of `total` tokens: the next
    multiple of chunk_tokens after position, or the prompt's end."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}")
    return min(total, (position // chunk_tokens + 1) * chunk_tokens)


def chunk_bounds(start: int, end: int, chunk_tokens: int) -> list[tuple[int, int]]:
    """The chunks [a, b) that cover positions start..end-1, cut at the multiples of chunk_tokens."""
    bounds, p = [], start
    while p < end:
        b = chunk_end(p, end, chunk_tokens)
        bounds.append((p, b))
        p = b
    return bounds


def granule_start(position: int, chunk_tokens: int) -> int:
    """Start of the granule that holds `position`."""
    return position // chunk_tokens * chunk_tokens


# Most tokens one merged run computes (its GEMM buffers grow with it; past a few granules the GEMMs
# gain little).
MERGE_MAX_TOKENS = 512


def prefill_runs(
    start: int, end: int, chunk_tokens: int, kernel_max_tokens: int, *, merge: bool
) -> list[tuple[list[tuple[int, int]], bool]]:
    """Positions start..end-1 as runs of granule pieces, each run one computation:
    (pieces [a, b), whether the decode kernels run it). A piece's way is its whole granule's: the
    kernels when the granule (up to the prompt's end) has at most kernel_max_tokens tokens, so a
    piece that starts inside a granule (the rest of a granule the prefix cache held in part) runs
    as the whole granule would. With `merge`, consecutive pieces of one way form one run of at most
    MERGE_MAX_TOKENS (for torch: its GEMMs over all rows, attention per piece; the same bits where
    rows are invariant, see prefill_probe.py); else each piece is its own run."""
    runs: list[tuple[list[tuple[int, int]], bool]] = []
    for a, b in chunk_bounds(start, end, chunk_tokens):
        kernels = b - granule_start(a, chunk_tokens) <= kernel_max_tokens
        last = runs[-1] if runs else None
        if merge and last and last[1] == kernels and b - last[0][0][0] <= MERGE_MAX_TOKENS:
            last[0].append((a, b))
        else:
            runs.append(([(a, b)], kernels))
    return runs


@dataclass
class PrefillCost:
    """Seconds a prefill computation of n tokens takes, predicted as a + b n from the computations
    timed so far: least squares over exponentially weighted moments (the newest weighs `weight`).
    A run's fixed costs (every weight streamed, a pass over the layers) dominate small runs, so a
    plain tokens / rate would price the few rows left after a prefix-cache match at many times
    their cost. With runs of one size only (or a fit that makes no sense) it is n / rate."""

    weight: float = 0.3
    runs: int = 0
    n: float = 0.0  # weighted means of n, t, n^2, n t
    t: float = 0.0
    nn: float = 0.0
    nt: float = 0.0

    def observe(self, tokens: int, seconds: float) -> None:
        w = 1.0 if self.runs == 0 else self.weight
        self.runs += 1
        self.n += w * (tokens - self.n)
        self.t += w * (seconds - self.t)
        self.nn += w * (tokens * tokens - self.nn)
        self.nt += w * (tokens * seconds - self.nt)

    def seconds(self, tokens: int) -> float | None:
        """Predicted seconds for `tokens` (None before any run was timed)."""
        if self.runs == 0:
            return None
        var = self.nn - self.n * self.n
        if var > 1.0:
            b = (self.nt - self.n * self.t) / var
            a = self.t - b * self.n
            if b > 0 and a >= 0:
                return a + b * tokens
        return tokens * self.t / self.n
