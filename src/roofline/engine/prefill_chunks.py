"""Where a prompt's prefill is cut: at every multiple of the granule (the chunk size), whoever runs
it.

The scheduler runs a prompt's granules a few per turn between decode steps (as many as fit its time
target); `ModelRunner.prefill` runs all the granules of what it is given in a row. Both cut at the
same fixed positions (never at "what this step's budget had left") and run each granule as its own
computation (torch GEMMs' bits may depend on their row count), so the same granules run in the same
order on the same data, and a request's logits do not depend on what else was running, on the
budget, or on which granules came from the prefix cache. Pure arithmetic: no torch, no numpy.
"""

from __future__ import annotations

# Granule (tokens) of the default runner. It is the floor of a prefill turn (a turn runs at least
# one), so it must fit the turn's time target on a small CPU; it is also the prefix cache's unit of
# reuse. Smaller granules cost GEMM efficiency: on the default model the prefill rate per core at
# 64 rows is about four fifths of that at 128-256 rows, at 32 rows about two thirds; a 64-token
# granule takes about the 150 ms target on two cores, a 128-token one about twice that
# (docs/measured.md).
DEFAULT_PREFILL_CHUNK_TOKENS = 64

# Target time (ms) of one scheduler turn of prefill: granules run while they fit it (measured rate),
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
