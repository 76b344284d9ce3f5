"""The static KV cache: one preallocated region per slot (sequence), never resized on the hot path.

Layouts, float32: keys (slots, layers, kv_heads, head_dim, max_seq_len) -- transposed, so that the scores
q . k_t of consecutive positions t come from contiguous memory (vectorised over t) -- and values
(slots, layers, kv_heads, max_seq_len, head_dim), so that sum_t p_t v_t is vectorised over head_dim.
Bytes per cached token:

    kv_bytes_per_token = 2 (K and V) * layers * kv_heads * head_dim * 4

The arrays come from np.zeros, which maps untouched pages lazily: a long max_seq_len costs address space,
not memory, until positions are written. `lengths[slot]` is the number of positions written (the next
token's position).
"""

from __future__ import annotations

import numpy as np

from roofline.engine.config import ModelConfig

BYTES_PER_VALUE = 4  # float32


def kv_bytes_per_token(config: ModelConfig) -> int:
    return 2 * config.n_layers * config.n_kv_heads * config.head_dim * BYTES_PER_VALUE


class KVCache:
    """K and V for `n_slots` sequences of up to `max_seq_len` positions each."""

    def __init__(self, config: ModelConfig, n_slots: int, max_seq_len: int) -> None:
        if n_slots < 1 or max_seq_len < 1:
            raise ValueError(f"need at least one slot and one position (got {n_slots} slots, {max_seq_len} positions)")
        c = config
        self.k = np.zeros((n_slots, c.n_layers, c.n_kv_heads, c.head_dim, max_seq_len), dtype=np.float32)
        self.v = np.zeros((n_slots, c.n_layers, c.n_kv_heads, max_seq_len, c.head_dim), dtype=np.float32)
        self.lengths = np.zeros(n_slots, dtype=np.int64)
        self.n_slots = n_slots
        self.max_seq_len = max_seq_len

    def check_slot(self, slot: int) -> int:
        slot = int(slot)
        if not 0 <= slot < self.n_slots:
            raise ValueError(f"slot {slot} is out of range: this runner has {self.n_slots} slots (max_batch)")
        return slot

    def check_room(self, slot: int, n_new: int) -> None:
        """Raise when `n_new` more positions do not fit in the slot."""
        if self.lengths[slot] + n_new > self.max_seq_len:
            raise ValueError(
                f"slot {slot} holds {int(self.lengths[slot])} positions; {n_new} more exceed max_seq_len {self.max_seq_len}"
            )

    def torch_views(self, slot: int):
        """(k, v) of one slot as torch tensors sharing this memory: k (layers, kv_heads, head_dim, max_seq_len),
        v (layers, kv_heads, max_seq_len, head_dim)."""
        import torch

        return torch.from_numpy(self.k[slot]), torch.from_numpy(self.v[slot])

    def truncate(self, slot: int, length: int) -> None:
        """Forget positions >= length (e.g. rejected speculative tokens); their values are overwritten later."""
        if not 0 <= length <= self.lengths[slot]:
            raise ValueError(f"cannot truncate slot {slot} of length {int(self.lengths[slot])} to {length}")
        self.lengths[slot] = length

    def release(self, slot: int) -> None:
        self.lengths[slot] = 0
