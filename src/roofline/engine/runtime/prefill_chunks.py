"""Where a prompt's prefill is cut, and how long a cut takes.

Granules (multiples of the chunk size) are the scheduler's unit of a turn and the prefix cache's
unit of reuse; `ModelRunner.prefill` runs what it is given in passes of the decode kernels
(`prefill_passes`). Every row of a pass sums in the order a one-row decode does (decode.py), so
none of these cuts changes a bit: a prompt prefilled in one call, a chunk at a time between other
requests' steps, from the middle of a granule the prefix cache held in part, or in passes of any
length gives the logits and K/V of decoding it one token at a time. Pure arithmetic: no numpy.
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


# Rows of one prefill pass at most: a pass reads every weight once for all its rows, and past a
# few hundred rows that gains little (docs/measured.md) while the buffers grow with the rows.
PREFILL_PASS_MAX_ROWS = 256
# Bytes of attention partials one pass may hold: per row, chunk of ATTN_CHUNK keys and q head,
# ATTN_CHUNK scores, head_dim outputs, a maximum and a sum (attention.attention_scratch).
PREFILL_PASS_SCRATCH_BYTES = 64 << 20


def prefill_passes(
    start: int, end: int, *, n_heads: int, head_dim: int, attn_chunk: int
) -> list[tuple[int, int]]:
    """Positions start..end-1 cut into passes [a, b) of at most PREFILL_PASS_MAX_ROWS rows, fewer
    where the rows' attention partials would pass PREFILL_PASS_SCRATCH_BYTES (they grow with the
    context). Where the cuts fall changes no bit (module docstring), only the memory and time."""
    per_unit = 4 * n_heads * (attn_chunk + head_dim + 2)
    passes, a = [], start
    while a < end:
        b = min(end, a + PREFILL_PASS_MAX_ROWS)
        while b - a > 1 and (b - a) * (b // attn_chunk + 1) * per_unit > PREFILL_PASS_SCRATCH_BYTES:
            b = a + (b - a) // 2
        passes.append((a, b))
        a = b
    return passes


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
