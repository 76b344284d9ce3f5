"""Whether prefill rows are invariant to the rows computed beside them, checked on this host.

The prefix cache and the scheduler keep a prompt's bits fixed by running the same granules at the
same positions (prefill_chunks.py). Two things would go faster if a row's K/V and logits did not
depend on the other rows of its computation: several granules in one GEMM (bigger GEMMs run
nearer the CPU's peak), and a granule started where the prefix cache's match ends, inside it (a
prompt that shares 1,000 tokens with a cached one computes its last ~50, not ~90).

Row by row everything in a prefill is independent except the GEMMs and attention. In MKL's strict
reproducible mode (threads.prefer_strict_blas) a GEMM's row has measured the same bits whatever the
row count; attention is run once per granule piece, over the keys its whole granule would see, and
torch's attention has given a piece's rows the same bits whatever rows came before it
(docs/measured.md). Neither is documented, so the runner checks it on its own kernels before it
relies on it: a prompt of one granule and a tail prefilled granule by granule against the same
prompt continued, in merged runs, from inside its first and its last granule. Any differing bit,
and the runner keeps the granules apart.
"""

from __future__ import annotations

import numpy as np

from roofline.engine.prefill_chunks import KERNEL_PREFILL_MAX_TOKENS

__all__ = ["rows_invariant"]


def rows_invariant(runner) -> bool:
    """Whether `runner` (a ModelRunner with slot 0 free) gives the same logits and K/V with merged
    runs started inside granules as granule by granule. Leaves slot 0 empty and the runner's
    `merge_prefill` as it was."""
    g = runner.prefill_chunk_tokens
    n = g + KERNEL_PREFILL_MAX_TOKENS + 6  # a whole granule, then a tail prefilled by torch
    if n > runner.max_seq_len or g <= KERNEL_PREFILL_MAX_TOKENS:
        return False
    ids = ((np.arange(n) * 7919 + 13) % runner.config.vocab_size).tolist()
    was = runner.merge_prefill
    try:
        runner.merge_prefill = False
        logits = runner.prefill(0, ids)
        k, v = runner.save_kv(0, 0, n)
        runner.merge_prefill = True
        for p in (5, g + 3):  # inside the first granule (merged with the tail), inside the tail
            runner.load_kv(0, 0, (k[:, :, :p], v[:, :, :p]))
            out = runner.prefill(0, ids[p:], start=p)
            k2, v2 = runner.save_kv(0, 0, n)
            if not all(np.array_equal(a, b) for a, b in ((out, logits), (k2, k), (v2, v))):
                return False
        return True
    finally:
        runner.merge_prefill = was
        runner.release(0)
