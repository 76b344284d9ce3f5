"""Numba kernels for the decode hot path: the maths of one layer, piece by piece.

A batch-1 decode step reads every weight once: it is bound by memory bandwidth, which torch's eager
CPU matrix-vector kernels do not reach. Each projection is fp32 row dot products, a row of W
streamed once and dotted with every input row while it sits in L1:

    out[r, o] = scale[o] * sum_i W[o, i] * x[r, i]     (fp32 accumulation, W widened in-register)

W: fp32 or bf16 bits as uint16 (scale 1; widening is a shift and a bitcast), or int8 with an fp32
scale per output row. Every float reduction goes through `simd` (`dot_block` for the weights,
`dot` / `vsum` for the rest), which fixes the summation order: row r of a k-row pass is
bit-identical to a 1-row pass on it (batched decode == each sequence alone; a speculative verify ==
plain decode steps).

Per layer (x: residual stream, one row per token):
    h = RMSNorm(x);  [q|k|v] = Wqkv h (+ bias);  q, k = RoPE(qk-norm(q, k));  k, v -> cache
    x += Wo Attention(q, K[:pos+1], V[:pos+1]);  h = RMSNorm(x);  [g|u] = Wgu h
    x += Wd (SiLU(g) * u)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from roofline import simd, simd_loops
from roofline.engine import kv_cache
from roofline.engine.fast_exp import exp_nonpos
from roofline.engine.matrices import _JIT, matvec, widen


@njit(**_JIT)
def matvec_rows(w, scale, x, out, o0, o1, accumulate):
    """out[r, o] = scale[o] * sum_i w[o, i] * x[r, i] (or += when accumulate) for rows o in [o0, o1)
    of w and every row r of x; w (n_out, n_in) fp32, bf16 bits or int8, scale (n_out,) float32 (ones
    unless int8: multiplying by 1 is exact), or stored rows (`matrices`). Each row of w comes from
    memory once for all rows of x (past four x rows, from L1 for the later groups: `matrices`)."""
    matvec(w, scale, x, out, o0, o1, accumulate)


@njit(**_JIT)
def rms_norm(x, weight, eps, out):
    """out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, row by row."""
    n = x.shape[1]
    for r in range(x.shape[0]):
        ss = simd.dot(x, r * n, x, r * n, n)
        inv = np.float32(1.0) / np.sqrt(ss / np.float32(n) + np.float32(eps))
        for i in range(n):
            out[r, i] = x[r, i] * inv * widen(weight[i])


@njit(**_JIT)
def _head_rms_norm(v, start, width, weight, eps):
    """In place: RMSNorm of v[start:start+width] (one head) with a per-head-dim weight (Qwen3 q/k
    norm)."""
    ss = simd.dot(v, start, v, start, width)
    inv = np.float32(1.0) / np.sqrt(ss / np.float32(width) + np.float32(eps))
    for i in range(width):
        v[start + i] = v[start + i] * inv * weight[i]


@njit(**_JIT)
def _rope_head(v, start, cos_row, sin_row):
    """In place RoPE on one head in HF's rotate-half layout: pairs (i, i + d/2) turn by angle
    pos * inv_freq_i:  a' = a cos - b sin,   b' = b cos + a sin"""
    half = cos_row.shape[0]
    for i in range(half):
        a = v[start + i]
        b = v[start + half + i]
        v[start + i] = a * cos_row[i] - b * sin_row[i]
        v[start + half + i] = b * cos_row[i] + a * sin_row[i]


@njit(**_JIT)
def qkv_to_cache(
    qkv,
    bias,
    q_norm,
    k_norm,
    use_qk_norm,
    eps,
    n_heads,
    cos,
    sin,
    slots,
    positions,
    cache_positions,
    layer,
    k_cache,
    v_cache,
):
    """Per row: add bias, per-head q/k norm (Qwen3), RoPE on q and k heads at the row's position,
    then write k and v at the row's cache position of its slot (the same position, except for the
    nodes of a draft tree: a node at depth d sits at a later cache position, but turns by its
    position in the sequence). qkv rows are [q (n_heads*d) | k (n_kv*d) | v (n_kv*d)]; q stays in
    qkv. Cache layouts (kv_cache.py): k_cache (slots, L, n_kv, S/B, d, B) -- keys transposed in
    blocks of B positions --, v_cache (slots, L, n_kv, S, d)."""
    n_kv, head_dim = v_cache.shape[2], v_cache.shape[4]
    block = k_cache.shape[5]
    q_dim = n_heads * head_dim
    kv_dim = n_kv * head_dim
    for r in range(qkv.shape[0]):
        row = qkv[r]
        for i in range(row.shape[0]):
            row[i] += bias[i]
        p = positions[r]
        for h in range(n_heads + n_kv):  # q heads then k heads
            if use_qk_norm:
                _head_rms_norm(row, h * head_dim, head_dim, q_norm if h < n_heads else k_norm, eps)
            _rope_head(row, h * head_dim, cos[p], sin[p])
        s = slots[r]
        p = cache_positions[r]
        b, t = p // block, p % block
        for g in range(n_kv):
            for i in range(head_dim):
                k_cache[s, layer, g, b, i, t] = row[q_dim + g * head_dim + i]
                v_cache[s, layer, g, p, i] = row[q_dim + kv_dim + g * head_dim + i]


# Causal GQA attention of each row's q heads over its slot's cache up to and including its position:
#     out_h = sum_t softmax_t(q_h . k_t / sqrt(d)) v_t,   t = 0..pos,   kv head = h // group
# (group = n_heads / n_kv), in work units (`attend_unit`) that `merge_attention` combines. A unit:
# one row, one kv head with its query heads, ATTN_CHUNK positions of context (a multiple of the key
# block; the cache holds whole chunks). Units depend only on their own row's data and context
# length, so a row's result never depends on the batch.
ATTN_CHUNK = kv_cache.ATTN_CHUNK
KEY_BLOCK = kv_cache.KEY_BLOCK


@njit(**_JIT)
def attention_units(positions, n_kv):
    """(first_unit, n_chunks): row r owns units first_unit[r] .. first_unit[r+1]-1, n_chunks[r] =
    ceil((pos_r + 1) / ATTN_CHUNK) chunks of n_kv units each: unit first_unit[r] + c * n_kv + g is
    chunk c of kv head g (full chunks first, so that threads taking units in order finish close
    together)."""
    n_chunks = (positions + ATTN_CHUNK) // ATTN_CHUNK
    first_unit = np.zeros(positions.shape[0] + 1, dtype=np.int64)
    for r in range(positions.shape[0]):
        first_unit[r + 1] = first_unit[r] + n_kv * n_chunks[r]
    return first_unit, n_chunks


@njit(**_JIT)
def attend_unit(
    u,
    first_unit,
    qkv,
    n_heads,
    slots,
    positions,
    tree_base,
    tree_path,
    layer,
    k_cache,
    v_cache,
    scores,
    part_out,
    part_max,
    part_sum,
    gather_k,
    gather_v,
    gather_s,
):
    """Unit u: partial softmax attention of the `group` query heads of one kv head g over one chunk
    [t0, t0 + n) of one row's context, with s_jt = q_j . k_t / sqrt(d):

        part_max[u, j] = max_t s_jt
        part_sum[u, j] = sum_t exp(s_jt - max)
        part_out[u, j] = sum_t exp(s_jt - max) v_t

    Sums run over d, then t, in order. Query heads go in pairs (`simd_loops.block_scores`,
    `simd_loops.weighted_rows`; an odd one pairs with itself); a partial chunk's scores are computed
    to the end of its last key tile and ignored past n. scores: scratch (units, group, ATTN_CHUNK).

    Tree attention: row r's context is positions t < tree_base[r] in place in the cache, then its
    draft ancestors tree_base[r] .. positions[r] at cache positions tree_path[r, t - tree_base[r]]
    (tree_base[r] > positions[r] for a plain row). Those keys and values are gathered in order into
    the thread's scratch (gather_k in the cache's key-block layout, gather_v, gather_s) and go
    through the same loops, the value sum continuing the same FMA chain, so a tree node's attention
    is bit-identical to the same token decoded alone: a tree mask without a mask matrix."""
    r = 0
    while first_unit[r + 1] <= u:
        r += 1
    n_kv, head_dim = v_cache.shape[2], v_cache.shape[4]
    c, g = divmod(u - first_unit[r], n_kv)
    group = n_heads // n_kv
    scale = np.float32(1.0 / math.sqrt(head_dim))
    t0 = c * ATTN_CHUNK
    n = min(ATTN_CHUNK, positions[r] + 1 - t0)
    # positions read in place; the other n - n_direct are gathered
    n_direct = min(n, max(0, tree_base[r] - t0))
    n_tree = n - n_direct
    keys, values = k_cache[slots[r], layer, g], v_cache[slots[r], layer, g]
    q0 = r * qkv.shape[1] + g * group * head_dim  # flat offset of the group's first query head
    s0 = u * group * ATTN_CHUNK  # flat offset of the unit's scores
    tile = simd_loops.SCORE_TILE * KEY_BLOCK
    sc = scores[u]
    for ja in range(0, group, 2):
        jb = min(ja + 1, group - 1)
        for p0 in range(0, n_direct, tile):
            simd_loops.block_scores(
                keys,
                (t0 + p0) * head_dim,
                head_dim,
                qkv,
                q0 + ja * head_dim,
                q0 + jb * head_dim,
                scale,
                scores,
                s0 + ja * ATTN_CHUNK + p0,
                s0 + jb * ATTN_CHUNK + p0,
            )
    if n_tree > 0:
        first = t0 + n_direct - tree_base[r]  # index in tree_path[r] of the first gathered position
        for i in range(n_tree):
            ph = tree_path[r, first + i]
            kb, kt = ph // KEY_BLOCK, ph % KEY_BLOCK
            o = (i // KEY_BLOCK) * head_dim * KEY_BLOCK + i % KEY_BLOCK
            for d in range(head_dim):
                gather_k[o + d * KEY_BLOCK] = keys[kb, d, kt]
                gather_v[i, d] = values[ph, d]
        width = gather_s.shape[0] // 2
        for ja in range(0, group, 2):
            jb = min(ja + 1, group - 1)
            for p0 in range(0, n_tree, tile):
                simd_loops.block_scores(
                    gather_k,
                    p0 * head_dim,
                    head_dim,
                    qkv,
                    q0 + ja * head_dim,
                    q0 + jb * head_dim,
                    scale,
                    gather_s,
                    p0,
                    width + p0,
                )
            for i in range(n_tree):
                sc[ja, n_direct + i] = gather_s[i]
                sc[jb, n_direct + i] = gather_s[width + i]
    for j in range(group):
        best = np.float32(-np.inf)
        for t in range(n):
            best = max(best, sc[j, t])
        for t in range(n):
            sc[j, t] = exp_nonpos(sc[j, t] - best)
        part_max[u, j] = best
        part_sum[u, j] = simd.vsum(scores, s0 + j * ATTN_CHUNK, n)
    for ja in range(0, group, 2):  # o_j = sum_t p_jt v_t
        jb = min(ja + 1, group - 1)
        oa, ob = (u * group + ja) * head_dim, (u * group + jb) * head_dim
        if n_direct > 0:
            simd_loops.weighted_rows(
                values,
                t0 * head_dim,
                n_direct,
                head_dim,
                scores,
                s0 + ja * ATTN_CHUNK,
                s0 + jb * ATTN_CHUNK,
                part_out,
                oa,
                ob,
                False,
            )
        if n_tree > 0:
            simd_loops.weighted_rows(
                gather_v,
                0,
                n_tree,
                head_dim,
                scores,
                s0 + ja * ATTN_CHUNK + n_direct,
                s0 + jb * ATTN_CHUNK + n_direct,
                part_out,
                oa,
                ob,
                n_direct > 0,
            )


@njit(**_JIT)
def gather_scratch(n_threads, path_len, head_dim):
    """(gather_k, gather_v, gather_s) per thread for draft-tree rows whose ancestor paths hold up to
    path_len positions: keys in whole score tiles of key blocks, values, and a pair of heads'
    scores."""
    tile = simd_loops.SCORE_TILE * KEY_BLOCK
    padded = max(1, (path_len + tile - 1) // tile) * tile
    return (
        np.zeros((n_threads, padded * head_dim), dtype=np.float32),
        np.zeros((n_threads, padded, head_dim), dtype=np.float32),
        np.zeros((n_threads, 2 * padded), dtype=np.float32),
    )


@njit(**_JIT)
def merge_attention(first_unit, n_chunks, part_out, part_max, part_sum, out):
    """Combine the chunks of each (row, head) as in flash-decoding:
    m = max_c m_c,   out_h = sum_c e^(m_c - m) o_c / sum_c e^(m_c - m) l_c"""
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


@njit(**_JIT)
def attention_scratch(n_units, group, head_dim):
    """(scores, part_out, part_max, part_sum) for n_units attention units."""
    return (
        np.empty((n_units, group, ATTN_CHUNK), dtype=np.float32),
        np.empty((n_units, group, head_dim), dtype=np.float32),
        np.empty((n_units, group), dtype=np.float32),
        np.empty((n_units, group), dtype=np.float32),
    )


@njit(**_JIT)
def silu_mul(gate_up, out, j0=0, j1=-1, scratch=None):
    """out[:, j] = SiLU(g) * u for columns j in [j0, j1) (all by default) with [g | u] = gate_up
    rows; SiLU(g) = g sigmoid(g), and with e = exp(-|g|) <= 1 sigmoid(g) = 1 / (1 + e) for g >= 0
    and e / (1 + e) for g < 0 (no overflow either way). Sixteen columns at a time
    (`simd_loops.silu_block`; a ragged end goes through a padded copy), so a column's value never
    depends on the range it was computed in. scratch: (4, 16) float32, allocated when not given."""
    ffn = out.shape[1]
    end = ffn if j1 < 0 else j1
    lanes = 16
    if scratch is None:
        scratch = np.empty((4, lanes), dtype=np.float32)
    e, pad, res = scratch[0], scratch[1:3], scratch[3]
    for r in range(out.shape[0]):
        for j in range(j0, end, lanes):
            m = min(lanes, end - j)
            if m == lanes:
                for lane in range(lanes):
                    e[lane] = exp_nonpos(-abs(gate_up[r, j + lane]))
                simd_loops.silu_block(
                    gate_up, r * 2 * ffn + j, r * 2 * ffn + ffn + j, e, out, r * ffn + j
                )
            else:
                for lane in range(lanes):
                    g = gate_up[r, j + lane] if lane < m else np.float32(0.0)
                    pad[0, lane], pad[1, lane] = (
                        g,
                        (gate_up[r, ffn + j + lane] if lane < m else np.float32(0.0)),
                    )
                    e[lane] = exp_nonpos(-abs(g))
                simd_loops.silu_block(pad, 0, lanes, e, res, 0)
                for lane in range(m):
                    out[r, j + lane] = res[lane]
