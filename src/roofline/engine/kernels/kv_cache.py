"""The static KV cache: one preallocated region per slot (sequence), never resized on the hot path.

Layouts, float32 (B = KEY_BLOCK):
    keys   (slots, layers, kv_heads, S / B, head_dim, B): transposed within blocks of B positions,
           so the scores q . k_t of B positions come from one contiguous row, a chunk is one
           contiguous stretch, and writing a key touches one 4 KiB block (not head_dim rows)
    values (slots, layers, kv_heads, S, head_dim): sum_t p_t v_t vectorised over head_dim

S is max_seq_len rounded up to whole ATTN_CHUNKs, so kernels may read any chunk whole. Bytes per
cached token: 2 * layers * kv_heads * head_dim * 4. The arrays are anonymous memory mapped lazily in
small pages (`lazy_mapped`), so a long max_seq_len costs address space, not memory, until written.
`lengths[slot]` is the number of positions written (the next token's position).

A sliding-window layer never reads a position again once every later row's window starts past its
chunk: `forget_outside_windows` hands those pages back to the system (`forgotten[slot]`: the
positions below it are released in the sliding layers), so a long sequence holds about a window of
each sliding layer, not the whole context.
"""

from __future__ import annotations

import mmap

import numpy as np

from roofline.engine.loading.config import ModelConfig

KEY_BLOCK = 16  # positions per key block: one AVX-512 register of float32 scores
# positions per attention work unit of the decode kernels (a multiple of KEY_BLOCK)
ATTN_CHUNK = 128


class KVCache:
    """K and V for `n_slots` sequences of up to `max_seq_len` positions each."""

    def __init__(self, config: ModelConfig, n_slots: int, max_seq_len: int) -> None:
        if n_slots < 1 or max_seq_len < 1:
            raise ValueError(
                "need at least one slot and one position "
                f"(got {n_slots} slots, {max_seq_len} positions)"
            )
        c = config
        n_blocks = -(-max_seq_len // ATTN_CHUNK) * (ATTN_CHUNK // KEY_BLOCK)
        k_shape = (n_slots, c.n_layers, c.n_kv_heads, n_blocks, c.head_dim, KEY_BLOCK)
        v_shape = (n_slots, c.n_layers, c.n_kv_heads, n_blocks * KEY_BLOCK, c.head_dim)
        (self.k, self._k_map), (self.v, self._v_map) = lazy_mapped(k_shape), lazy_mapped(v_shape)
        self.lengths = np.zeros(n_slots, dtype=np.int64)
        self.forgotten = np.zeros(n_slots, dtype=np.int64)
        self.n_slots = n_slots
        self.max_seq_len = max_seq_len
        self.sliding_layers = tuple(i for i, w in enumerate(c.windows) if w > 0)
        self.widest_window = max(c.windows, default=0)

    def check_slot(self, slot: int) -> int:
        slot = int(slot)
        if not 0 <= slot < self.n_slots:
            raise ValueError(
                f"slot {slot} is out of range: this runner has {self.n_slots} slots (max_batch)"
            )
        return slot

    def check_room(self, slot: int, n_new: int) -> None:
        """Raise when `n_new` more positions do not fit in the slot."""
        if self.lengths[slot] + n_new > self.max_seq_len:
            raise ValueError(
                f"slot {slot} holds {int(self.lengths[slot])} positions; "
                f"{n_new} more exceed max_seq_len {self.max_seq_len}"
            )

    def torch_views(self, slot: int):
        """(k, v) of one slot as torch tensors sharing this memory: k (layers, kv_heads, S / B,
        head_dim, B), v (layers, kv_heads, S, head_dim); `write_keys` / `read_keys` index the
        blocked keys by position."""
        import torch

        return torch.from_numpy(self.k[slot]), torch.from_numpy(self.v[slot])

    def truncate(self, slot: int, length: int) -> None:
        """Forget positions >= length (e.g. rejected speculative tokens). Nothing reads a position
        before it is written again, but they are zeroed too, so that the slot is exactly as if they
        had never been written."""
        end = int(self.lengths[slot])
        if not 0 <= length <= end:
            raise ValueError(f"cannot truncate slot {slot} of length {end} to {length}")
        if length < end:
            pos = np.arange(length, end)
            self.k[slot][:, :, pos // KEY_BLOCK, :, pos % KEY_BLOCK] = 0.0
            self.v[slot][:, :, length:end] = 0.0
        self.lengths[slot] = length

    def move(self, slot: int, sources, first: int) -> None:
        """Copy the K/V of positions `sources` (increasing) to first, first + 1, ... (an accepted
        path of a draft tree becomes contiguous). Every source is >= its destination, and all are
        read before any write."""
        src = np.asarray(sources, dtype=np.int64)
        dst = np.arange(first, first + src.size)
        if src.size and (np.any(src < dst) or src[-1] >= self.lengths[slot]):
            raise ValueError(f"cannot move positions {src.tolist()} of slot {slot} to {first}..")
        k, v = self.k[slot], self.v[slot]
        k[:, :, dst // KEY_BLOCK, :, dst % KEY_BLOCK] = k[
            :, :, src // KEY_BLOCK, :, src % KEY_BLOCK
        ]
        v[:, :, dst] = v[:, :, src]

    def release(self, slot: int) -> None:
        self.lengths[slot] = 0
        self.forgotten[slot] = 0

    def forget_outside_windows(self, slot: int, slack: int) -> None:
        """Release the sliding layers' K/V pages of positions below
        boundary = (length - widest window - slack) rounded down to whole ATTN_CHUNKs.

        Every row from here on sits at the slot's length or after it (a step's rejected rows are
        truncated back to where it began), so its window starts at length - window + 1 or later:
        the chunks below the boundary lie wholly before every such row's window, and the attention
        kernels skip them unread (`attention.attend_work`). slack: positions kept besides, so that
        a prefix-cache granule saved after the next pass (it may begin a granule before the slot's
        length) is still whole. The pages read as zeros afterwards; `read` refuses them."""
        if not self.sliding_layers:
            return
        length = int(self.lengths[slot])
        boundary = (length - self.widest_window - slack) // ATTN_CHUNK * ATTN_CHUNK
        first = int(self.forgotten[slot])
        if boundary <= first:
            return
        _, layers, heads, positions, head_dim = self.v.shape
        for layer in self.sliding_layers:
            for head in range(heads):
                # (slot, layer, head)'s positions: one stretch in each array, a position's
                # head_dim floats at the same place in both (keys in blocks of KEY_BLOCK)
                at = ((slot * layers + layer) * heads + head) * positions
                for buf in (self._k_map, self._v_map):
                    release_pages(buf, (at + first) * head_dim * 4, (at + boundary) * head_dim * 4)
        self.forgotten[slot] = boundary

    def read(self, slot: int, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the K and V of positions start..end-1 of a slot: k (layers, kv_heads,
        end - start, head_dim), v (layers, kv_heads, end - start, head_dim)."""
        if not 0 <= start < end <= self.lengths[slot]:
            raise ValueError(f"slot {slot} holds {int(self.lengths[slot])}, not {start}..{end}")
        if start < self.forgotten[slot]:
            raise ValueError(
                f"slot {slot}'s sliding layers no longer hold positions below "
                f"{int(self.forgotten[slot])}, not {start}..{end}"
            )
        pos = np.arange(start, end)
        k = self.k[slot][:, :, pos // KEY_BLOCK, :, pos % KEY_BLOCK]  # (T, layers, kv_heads, d)
        return np.ascontiguousarray(k.transpose(1, 2, 0, 3)), self.v[slot][:, :, start:end].copy()

    def write(self, slot: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store K/V as `read` returns them at positions start.. of a slot, which must hold exactly
        start positions; the slot then holds start + their count."""
        n = k.shape[2]
        if start != self.lengths[slot]:
            raise ValueError(
                f"slot {slot} holds {int(self.lengths[slot])}, cannot write at {start}"
            )
        self.check_room(slot, n)
        pos = np.arange(start, start + n)
        self.k[slot][:, :, pos // KEY_BLOCK, :, pos % KEY_BLOCK] = k.transpose(2, 0, 1, 3)
        self.v[slot][:, :, start : start + n] = v
        self.lengths[slot] = start + n


def release_pages(buf: mmap.mmap | None, start: int, end: int) -> None:
    """Hand the whole pages within bytes start..end of a private anonymous mapping back to the
    system (they read as zeros afterwards); nothing where the platform cannot."""
    page = mmap.PAGESIZE
    start, end = -(-start // page) * page, end // page * page
    if buf is not None and end > start and hasattr(mmap, "MADV_DONTNEED"):
        buf.madvise(mmap.MADV_DONTNEED, start, end - start)


def lazy_mapped(shape: tuple[int, ...]) -> tuple[np.ndarray, mmap.mmap | None]:
    """float32 zeros in private anonymous memory, mapped on first write in small pages, and the
    mapping (None for an empty array).

    Every (layer, kv head) of a slot starts its own stretch of the arrays, so a slot's first write
    touches all of them. In transparent huge pages (numpy asks for them for large arrays) that
    faults in the whole slot: 2 * layers * kv_heads * max_seq_len * head_dim * 4 bytes (94 MB of
    the default model at 2,048 positions), a stall on a server's first use of each slot
    (docs/measured.md); in small pages a 64-token write faults only the 3 MB it writes."""
    nbytes = int(np.prod(shape)) * 4
    if nbytes == 0:
        return np.zeros(shape, dtype=np.float32), None
    private = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    buf = mmap.mmap(-1, nbytes, flags=private) if private else mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux: even where huge pages are always on
        buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype=np.float32).reshape(shape), buf


def write_keys(k_blocks, start: int, keys) -> None:
    """Store keys (T, kv_heads, head_dim) at positions start..start+T-1 of one layer's blocked key
    cache k_blocks (kv_heads, S / B, head_dim, B) (torch tensors; position p lives at [:, p // B, :,
    p % B])."""
    import torch

    pos = torch.arange(start, start + keys.shape[0])
    k_blocks.permute(1, 3, 0, 2)[pos // KEY_BLOCK, pos % KEY_BLOCK] = keys


def read_keys(k_blocks, end: int):
    """Keys of positions 0..end-1 of one layer's blocked key cache, as an (end, kv_heads, head_dim)
    view of a (kv_heads, head_dim, end) tensor (the memory order of the transposed cache, which the
    attention GEMMs were written against: the same strides give the same summation order)."""
    blocks = -(-end // KEY_BLOCK)
    g, _, d, b = k_blocks.shape
    keys_t = k_blocks[:, :blocks].permute(0, 2, 1, 3).reshape(g, d, blocks * b)[:, :, :end]
    return keys_t.permute(2, 0, 1)
