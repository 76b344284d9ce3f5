"""Where a prompt's prefill is cut: at every multiple of the chunk size, whoever runs it.

The scheduler runs a prompt one chunk per turn between decode steps; `ModelRunner.prefill` runs all
the chunks of what it is given in a row. Both cut at the same fixed positions (never at "what this
step's budget had left"), so the same chunks run in the same order on the same data, and a request's
logits do not depend on what else was running. Pure arithmetic: no torch, no numpy.
"""

from __future__ import annotations

# Chunk size (tokens) of the default runner: small enough that a chunk holds the other requests'
# next decode step back by well under a second on a small CPU, large enough that GEMMs of this many
# rows run near the machine's peak (see benchmarks/prefill.py and docs/measured.md).
DEFAULT_PREFILL_CHUNK_TOKENS = 256

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
