"""Causal GQA attention of each row's q heads over its slot's cache, up to and including its
position, in the decode pass:

    out_h = sum_t softmax_t(q_h . k_t * scale) v_t,   t = lo..pos,   kv head = h // group

(scale: 1 / sqrt(d), or the model's own; lo = 0, or pos - window + 1 on a sliding-window layer:
the scores before lo are set aside, their weights exactly 0, and a chunk wholly before lo is
skipped, its partial an empty one.)
(group = n_heads / n_kv). Partials: one per row, kv head and ATTN_CHUNK positions of context (a
multiple of the key block; the cache holds whole chunks), combined by `merge_attention`:

    part_max = max_t s_t,   part_sum = sum_t exp(s_t - max),   part_out = sum_t exp(s_t - max) v_t

Work items (`attention_work`): one chunk and kv head of a run of consecutive rows of one slot (a
verify pass's rows, a short prompt's). The rows of a run share their context up to the first
draft or newest position, so the item scores those keys and weights those values once for all
the run's (row, head) queries, four at a time (docs/measured.md), then each row's own rest. Each
sum stays one chain in the order a row alone would take (scores over d, values over t), so a
row's result never depends on the batch.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from roofline import simd
from roofline.engine.kernels import kv_cache, simd_loops
from roofline.engine.kernels.fast_exp import exp_nonpos
from roofline.engine.kernels.matrices import JIT_OPTIONS

ATTN_CHUNK = kv_cache.ATTN_CHUNK
KEY_BLOCK = kv_cache.KEY_BLOCK
TILE = simd_loops.SCORE_TILE * KEY_BLOCK  # positions a `block_scores` call covers
ITEMS_PER_THREAD = 4
EMPTY_MAX = np.float32(-3.0e38)  # an empty partial's max: below every score, finite


@njit(**JIT_OPTIONS)
def attention_units(positions, n_kv):
    """(first_unit, n_chunks): row r owns partials first_unit[r] .. first_unit[r+1]-1, n_chunks[r]
    = ceil((pos_r + 1) / ATTN_CHUNK) chunks of n_kv each: partial first_unit[r] + c * n_kv + g is
    chunk c of kv head g."""
    n_chunks = (positions + ATTN_CHUNK) // ATTN_CHUNK
    first_unit = np.zeros(positions.shape[0] + 1, dtype=np.int64)
    for r in range(positions.shape[0]):
        first_unit[r + 1] = first_unit[r] + n_kv * n_chunks[r]
    return first_unit, n_chunks


@njit(**JIT_OPTIONS)
def attention_work(slots, n_chunks, n_kv, n_threads):
    """Work items (n, 3): (first row, end row, c * n_kv + g) for each run of consecutive rows of
    one slot, each chunk c any of its rows has and each kv head g. A run with few chunks is cut
    into pieces of rows, so that it makes at least ITEMS_PER_THREAD items a thread (16 rows at 100
    positions made three items for two threads)."""
    k, n = slots.shape[0], 0
    for fill in range(2):  # count, then fill
        work = np.empty((n, 3), dtype=np.int64)
        n, r = 0, 0
        while r < k:
            end, chunks = r + 1, n_chunks[r]
            while end < k and slots[end] == slots[r]:
                chunks = max(chunks, n_chunks[end])
                end += 1
            want = ITEMS_PER_THREAD * n_threads
            pieces = min(end - r, max(1, (want + chunks * n_kv - 1) // (chunks * n_kv)))
            size = (end - r + pieces - 1) // pieces
            for lo in range(r, end, size):
                for cg in range(chunks * n_kv):
                    if fill:
                        work[n, 0], work[n, 1], work[n, 2] = lo, min(lo + size, end), cg
                    n += 1
            r = end
    return work


@njit(inline="always", **JIT_OPTIONS)
def _direct(r, t0, positions, tree_base):
    """(n, n_direct, first): row r's positions in the chunk from t0, those read in place, and the
    index in its tree path of the first one gathered."""
    n = min(ATTN_CHUNK, positions[r] + 1 - t0)
    n_direct = min(n, max(0, tree_base[r] - t0))
    return n, n_direct, t0 + n_direct - tree_base[r]


@njit(inline="always", **JIT_OPTIONS)
def _scores4(keys, k_off, head_dim, q, qo, scale, out, oo, i, m, o_add):
    """`block_scores` for queries i .. i+m-1 (m 1..4) of the offset lists qo, oo (+ o_add)."""
    if m >= 4:
        simd_loops.block_scores(
            keys, k_off, head_dim, q, (qo[i], qo[i + 1], qo[i + 2], qo[i + 3]), scale, out,
            (oo[i] + o_add, oo[i + 1] + o_add, oo[i + 2] + o_add, oo[i + 3] + o_add),
        )  # fmt: skip
    elif m == 3:
        simd_loops.block_scores(
            keys, k_off, head_dim, q, (qo[i], qo[i + 1], qo[i + 2]), scale, out,
            (oo[i] + o_add, oo[i + 1] + o_add, oo[i + 2] + o_add),
        )  # fmt: skip
    elif m == 2:
        simd_loops.block_scores(
            keys, k_off, head_dim, q, (qo[i], qo[i + 1]), scale, out,
            (oo[i] + o_add, oo[i + 1] + o_add),
        )  # fmt: skip
    else:
        simd_loops.block_scores(keys, k_off, head_dim, q, (qo[i],), scale, out, (oo[i] + o_add,))


@njit(inline="always", **JIT_OPTIONS)
def _weighted4(values, v_off, n, head_dim, p, po, p_add, out, oo, i, m, resume):
    """`weighted_rows` for queries i .. i+m-1 (m 1..4): probabilities at po (+ p_add), out at oo."""
    if m >= 4:
        simd_loops.weighted_rows(
            values, v_off, n, head_dim, p,
            (po[i] + p_add, po[i + 1] + p_add, po[i + 2] + p_add, po[i + 3] + p_add), out,
            (oo[i], oo[i + 1], oo[i + 2], oo[i + 3]), resume,
        )  # fmt: skip
    elif m == 3:
        simd_loops.weighted_rows(
            values, v_off, n, head_dim, p,
            (po[i] + p_add, po[i + 1] + p_add, po[i + 2] + p_add), out,
            (oo[i], oo[i + 1], oo[i + 2]), resume,
        )  # fmt: skip
    elif m == 2:
        simd_loops.weighted_rows(
            values, v_off, n, head_dim, p, (po[i] + p_add, po[i + 1] + p_add), out,
            (oo[i], oo[i + 1]), resume,
        )  # fmt: skip
    else:
        simd_loops.weighted_rows(
            values, v_off, n, head_dim, p, (po[i] + p_add,), out, (oo[i],), resume
        )


@njit(inline="always", **JIT_OPTIONS)
def _queries(u, r, g, group, head_dim, qkv, offs, at):
    """Row r's query heads of kv head g into offs[:, at:at+group]: their offsets in qkv (0), in the
    scores (1) and in part_out (2) of its partial u."""
    for j in range(group):
        offs[0, at + j] = r * qkv.shape[1] + (g * group + j) * head_dim
        offs[1, at + j] = (u * group + j) * ATTN_CHUNK
        offs[2, at + j] = (u * group + j) * head_dim


@njit(**JIT_OPTIONS)
def _row_scores(
    u, r, t0, start, n, n_direct, qkv, offs, at, keys, tree, scores, gather_k, gather_s, scale
):
    """Scores of partial u (row r, the chunk from t0; its heads' offsets in offs[:, at:at+group])
    for positions [start, n): in place up to n_direct (start a multiple of TILE; a tile's scores
    past n_direct are computed and ignored), then the draft ancestors' keys, gathered.

    Tree attention: row r's context is positions t < tree_base[r] in place in the cache, then its
    draft ancestors tree_base[r] .. positions[r] at cache positions tree_path[r, t - tree_base[r]]
    (tree_base[r] > positions[r] for a plain row). Their keys and values are gathered in order into
    the thread's scratch (gather_k in the cache's key-block layout, gather_v, gather_s) and go
    through the same loops, the value sum continuing the same FMA chain, so a tree node's attention
    is bit-identical to the same token decoded alone: a tree mask without a mask matrix."""
    tree_path, first = tree  # the rows' paths; index in row r's of its first gathered position
    head_dim, group = keys.shape[1], scores.shape[1]
    qo, so = offs[0], offs[1]
    for p0 in range(start, n_direct, TILE):
        for i in range(0, group, 4):
            m = min(4, group - i)
            _scores4(keys, (t0 + p0) * head_dim, head_dim, qkv, qo, scale, scores, so, at + i, m,
                     p0)  # fmt: skip
    n_tree = n - n_direct
    if n_tree <= 0:
        return
    for i in range(n_tree):
        ph = tree_path[r, first + i]
        kb, kt = ph // KEY_BLOCK, ph % KEY_BLOCK
        o = (i // KEY_BLOCK) * head_dim * KEY_BLOCK + i % KEY_BLOCK
        for d in range(head_dim):
            gather_k[o + d * KEY_BLOCK] = keys[kb, d, kt]
    width = gather_s.shape[0] // 2
    sc = scores[u]
    for ja in range(0, group, 2):
        jb = min(ja + 1, group - 1)
        for p0 in range(0, n_tree, TILE):
            simd_loops.block_scores(
                gather_k, p0 * head_dim, head_dim, qkv, (qo[at + ja], qo[at + jb]), scale,
                gather_s, (p0, width + p0),
            )  # fmt: skip
        for i in range(n_tree):
            sc[ja, n_direct + i] = gather_s[i]
            sc[jb, n_direct + i] = gather_s[width + i]


@njit(**JIT_OPTIONS)
def _row_softmax(u, n, lo, scores, part_max, part_sum):
    """exp(s - max) in place over partial u's n scores a head, those before lo 0; its max and
    sum."""
    group = scores.shape[1]
    for j in range(group):
        at = (u * group + j) * ATTN_CHUNK
        row = scores[u, j]
        if lo == n:  # none in the window: an empty partial, weights 0
            for t in range(n):
                row[t] = np.float32(0.0)
            part_max[u, j], part_sum[u, j] = EMPTY_MAX, np.float32(0.0)
            continue
        best = simd_loops.vmax(scores, at + lo, n - lo)
        for t in range(lo):
            row[t] = np.float32(0.0)
        for t in range(lo, n):
            row[t] = exp_nonpos(row[t] - best)
        part_max[u, j] = best
        part_sum[u, j] = simd.vsum(scores, at, n)


@njit(**JIT_OPTIONS)
def _empty_partial(u, part_out, part_max, part_sum):
    """Partial u of a chunk wholly outside the window: no weight (`merge_attention` gives it
    e^(EMPTY_MAX - m) 0 = 0)."""
    for j in range(part_out.shape[1]):
        part_max[u, j] = EMPTY_MAX
        part_sum[u, j] = np.float32(0.0)
        for i in range(part_out.shape[2]):
            part_out[u, j, i] = np.float32(0.0)


@njit(inline="always", **JIT_OPTIONS)
def window_start(r, positions, window):
    """The first position row r attends to: 0, or pos - window + 1 with a window."""
    return max(0, positions[r] - window + 1) if window > 0 else 0


@njit(inline="always", **JIT_OPTIONS)
def _outside(r, c, t0, n_chunks, positions, window):
    """Row r has chunk c (from t0) and its window starts past it."""
    return c < n_chunks[r] and window_start(r, positions, window) >= t0 + ATTN_CHUNK


@njit(**JIT_OPTIONS)
def _row_values(r, t0, start, n, n_direct, offs, at, values, tree, scores, gather_v, part_out):
    """o_j = sum_t p_jt v_t of one partial (heads' offsets in offs[:, at:at+group]) from position
    start on, continuing the sums of [0, start) when start > 0: in place, then the gathered
    draft ancestors' values."""
    group, head_dim = scores.shape[1], values.shape[1]
    po, oo = offs[1], offs[2]
    tree_path, first = tree
    n_tree = n - n_direct
    for i in range(n_tree):
        ph = tree_path[r, first + i]
        for d in range(head_dim):
            gather_v[i, d] = values[ph, d]
    for i in range(0, group, 4):
        m = min(4, group - i)
        if n_direct > start:
            _weighted4(values, (t0 + start) * head_dim, n_direct - start, head_dim, scores, po,
                       start, part_out, oo, at + i, m, start > 0)  # fmt: skip
        if n_tree > 0:
            _weighted4(gather_v, 0, n_tree, head_dim, scores, po, n_direct, part_out, oo, at + i,
                       m, n_direct > 0)  # fmt: skip


@njit(**JIT_OPTIONS)
def attend_work(
    item, work, first_unit, n_chunks, qkv, n_heads, scale, window, slots, positions, tree_base,
    tree_path, layer, k_cache, v_cache, scores, part_out, part_max, part_sum, gather_k, gather_v,
    gather_s, offs,
):  # fmt: skip
    """Work item `item` (`attention_work`): chunk c, kv head g of a run of rows of one slot. The
    positions all its rows read in place (whole tiles) are scored and weighted for all of them at
    once, four (row, head) queries a call; each row's rest follows, its sums continued. scale:
    the scores'; window: the layer's sliding window (0: none; rows whose window the chunk lies
    wholly before get an empty partial, `_empty_partial`). offs: (3, rows * group) int64
    scratch."""
    r_lo, r_hi, cg = work[item, 0], work[item, 1], work[item, 2]
    n_kv, head_dim = v_cache.shape[2], v_cache.shape[4]
    c, g = cg // n_kv, cg % n_kv
    group, t0 = n_heads // n_kv, c * ATTN_CHUNK
    if window > 0:  # rows at the run's ends whose window starts past the chunk: nothing to do
        while r_lo < r_hi and _outside(r_lo, c, t0, n_chunks, positions, window):
            _empty_partial(first_unit[r_lo] + cg, part_out, part_max, part_sum)
            r_lo += 1
        while r_hi > r_lo and _outside(r_hi - 1, c, t0, n_chunks, positions, window):
            _empty_partial(first_unit[r_hi - 1] + cg, part_out, part_max, part_sum)
            r_hi -= 1
        if r_lo == r_hi:
            return
    shared, q = ATTN_CHUNK, 0
    for r in range(r_lo, r_hi):
        if c < n_chunks[r]:
            shared = min(shared, _direct(r, t0, positions, tree_base)[1])
            _queries(first_unit[r] + cg, r, g, group, head_dim, qkv, offs, q)
            q += group
    shared = shared // TILE * TILE if q > group else 0
    keys, values = k_cache[slots[r_lo], layer, g], v_cache[slots[r_lo], layer, g]
    for p0 in range(0, shared, TILE):
        for i in range(0, q, 4):
            _scores4(keys, (t0 + p0) * head_dim, head_dim, qkv, offs[0], scale, scores, offs[1],
                     i, min(4, q - i), p0)  # fmt: skip
    at = 0
    for r in range(r_lo, r_hi):  # each row's rest, then its softmax
        if c < n_chunks[r]:
            u = first_unit[r] + cg
            n, n_direct, first = _direct(r, t0, positions, tree_base)
            _row_scores(u, r, t0, shared, n, n_direct, qkv, offs, at, keys, (tree_path, first),
                        scores, gather_k, gather_s, scale)  # fmt: skip
            # a row inside the run whose window starts past the chunk: all its weights 0
            lo = min(max(0, window_start(r, positions, window) - t0), n)
            _row_softmax(u, n, lo, scores, part_max, part_sum)
            at += group
    if shared > 0:
        for i in range(0, q, 4):
            _weighted4(values, t0 * head_dim, shared, head_dim, scores, offs[1], 0, part_out,
                       offs[2], i, min(4, q - i), False)  # fmt: skip
    at = 0
    for r in range(r_lo, r_hi):
        if c < n_chunks[r]:
            n, n_direct, first = _direct(r, t0, positions, tree_base)
            _row_values(r, t0, shared, n, n_direct, offs, at, values, (tree_path, first), scores,
                        gather_v, part_out)  # fmt: skip
            at += group


@njit(**JIT_OPTIONS)
def gather_scratch(n_threads, path_len, head_dim):
    """(gather_k, gather_v, gather_s) per thread for draft-tree rows whose ancestor paths hold up to
    path_len positions: keys in whole score tiles of key blocks, values, and a pair of heads'
    scores."""
    padded = max(1, (path_len + TILE - 1) // TILE) * TILE
    return (
        np.zeros((n_threads, padded * head_dim), dtype=np.float32),
        np.zeros((n_threads, padded, head_dim), dtype=np.float32),
        np.zeros((n_threads, 2 * padded), dtype=np.float32),
    )


@njit(**JIT_OPTIONS)
def merge_attention(first_unit, n_chunks, part_out, part_max, part_sum, out, sinks, use_sinks):
    """Combine the chunks of each (row, head) as in flash-decoding:
    m = max_c m_c,   out_h = sum_c e^(m_c - m) o_c / sum_c e^(m_c - m) l_c
    With sinks (gpt-oss: sinks[h], one logit a head, use_sinks): the sink is one more score with
    no value, so m = max(max_c m_c, sink) and the denominator gains e^(sink - m)."""
    group, head_dim = part_out.shape[1], part_out.shape[2]
    for r in range(n_chunks.shape[0]):
        n_kv = (first_unit[r + 1] - first_unit[r]) // n_chunks[r]
        for g in range(n_kv):
            u0 = first_unit[r] + g  # chunk c of this kv head is unit u0 + c * n_kv
            for j in range(group):
                o0 = (g * group + j) * head_dim
                m = part_max[u0, j]
                for c in range(1, n_chunks[r]):
                    m = max(m, part_max[u0 + c * n_kv, j])
                denom = np.float32(0.0)
                if use_sinks:
                    sink = sinks[g * group + j]
                    m = max(m, sink)
                    denom = exp_nonpos(sink - m)
                for i in range(head_dim):
                    out[r, o0 + i] = 0.0
                for c in range(n_chunks[r]):
                    w = exp_nonpos(part_max[u0 + c * n_kv, j] - m)
                    denom += w * part_sum[u0 + c * n_kv, j]
                    for i in range(head_dim):
                        out[r, o0 + i] += w * part_out[u0 + c * n_kv, j, i]
                inv = np.float32(1.0) / denom
                for i in range(head_dim):
                    out[r, o0 + i] *= inv


@njit(**JIT_OPTIONS)
def attention_scratch(n_units, group, head_dim):
    """(scores, part_out, part_max, part_sum) for n_units partials."""
    return (
        np.empty((n_units, group, ATTN_CHUNK), dtype=np.float32),
        np.empty((n_units, group, head_dim), dtype=np.float32),
        np.empty((n_units, group), dtype=np.float32),
        np.empty((n_units, group), dtype=np.float32),
    )
