"""Numba kernels for the decode hot path: one call runs every layer for a few token rows.

Decoding one token at batch 1 reads every weight once, so the step is bound by memory bandwidth, and
torch's eager CPU matrix-vector kernels stream only a third of it at this model size. Here each
projection is a row-parallel dot product in fp32 (threads split the output rows; each row of W is
streamed once and dotted with every input row while it sits in L1):

    out[r, o] = scale[o] * sum_i W[o, i] * x[r, i]     (fp32 accumulation, W widened in-register)

W is fp32 (scale 1), bf16 stored as uint16 (scale 1) -- a bf16 is the top half of an fp32, so widening is
a shift by 16 and a bitcast (`_f32_from_bf16_bits`) and the memory stream is half as long -- or int8
with one fp32 scale per output row (weight-only int8, a quarter of the fp32 stream).

One kernel serves 1 and k rows with the same compiled loop for every row, so row r of a k-row call is
bit-identical to a 1-row call on that row: a batched decode equals each sequence decoded alone, and a
speculative verify pass over k drafted tokens equals k plain decode steps. The fused layouts (q|k|v rows
in one matrix, gate|up rows in one matrix) halve the number of parallel regions per layer.

Per layer (x: residual stream, one row per token):
    h = RMSNorm(x);  [q|k|v] = Wqkv h (+ bias);  q, k = RoPE(qk-norm(q, k));  append k, v to the cache
    x += Wo Attention(q, K[:pos+1], V[:pos+1]);   h = RMSNorm(x);  [g|u] = Wgu h;  x += Wd (SiLU(g) * u)
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic, overload

# fastmath lets LLVM reassociate the dot-product sums into SIMD lanes; the order it picks is fixed by
# the compiled code, so results are reproducible run to run and independent of the number of rows.
# error_model="numpy": float division without Python's zero check, which would block vectorisation.
_JIT = dict(fastmath=True, cache=True, nogil=True, error_model="numpy")


@intrinsic
def _f32_from_bf16_bits(typingctx, bits):
    """bf16 bits (uint16) -> float32: zero-extend to 32 bits, shift into the high half, reinterpret."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        wide = builder.zext(args[0], ir.IntType(32))
        return builder.bitcast(builder.shl(wide, ir.Constant(ir.IntType(32), 16)), ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def _f32_from_i32_bits(typingctx, bits):
    """Reinterpret int32 bits as float32 (used to build 2^n for exp)."""
    if bits != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@njit(fastmath=True, error_model="numpy", inline="always")
def exp_nonpos(x):
    """e^x for x <= 0, within ~3 ulp (relative 4e-7), branch-free so that loops over it vectorise (calls
    to libm's expf do not): e^x = 2^n e^r with n = round(x / ln 2), |r| <= ln2 / 2, e^r by its degree-7 Taylor-like polynomial
    (Cephes' coefficients), 2^n built from its exponent bits. Inputs below -87 give ~1e-38 instead of 0."""
    x = max(x, np.float32(-87.0))
    k = np.int32(np.float32(0.5) - x * np.float32(1.44269504))  # floor(0.5 - x / ln2) >= 0 by truncation
    n = -np.float32(k)  # round(x / ln2)
    r = x - n * np.float32(0.693359375) + n * np.float32(2.12194440e-4)  # x - n ln2, ln2 split in two
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    return p * _f32_from_i32_bits(np.int32((np.int32(127) - k) << np.int32(23)))


def widen(w):
    """A weight element as float32 (pure-Python stub; the jitted versions are the overloads below)."""
    raise NotImplementedError


@overload(widen, inline="always")
def _widen_overload(w):
    if w == types.uint16:  # bf16 bits
        return lambda w: _f32_from_bf16_bits(w)
    if w == types.float32:
        return lambda w: w
    if w == types.int8:
        return lambda w: np.float32(w)
    return None


@njit(inline="always", **_JIT)
def row_dot(w, o, x, r):
    """sum_i w[o, i] * x[r, i] in float32, in one fixed order whatever the number of rows of x (so a
    k-row verify pass gives each row bit for bit what a 1-row decode gives)."""
    acc = np.float32(0.0)
    for i in range(w.shape[1]):
        acc += widen(w[o, i]) * x[r, i]
    return acc


@njit(parallel=True, **_JIT)
def matvec(w, scale, x, out):
    """out[r, o] = scale[o] * sum_i w[o, i] * x[r, i] for every row r of x; w (n_out, n_in) fp32, bf16 bits
    or int8, scale (n_out,) float32 (ones unless int8: multiplying by 1 is exact)."""
    for o in prange(w.shape[0]):
        for r in range(x.shape[0]):
            out[r, o] = row_dot(w, o, x, r) * scale[o]


@njit(parallel=True, **_JIT)
def matvec_add(w, scale, x, out):
    """out[r, o] += scale[o] * sum_i w[o, i] * x[r, i]: a projection added into the residual stream."""
    for o in prange(w.shape[0]):
        for r in range(x.shape[0]):
            out[r, o] += row_dot(w, o, x, r) * scale[o]


@njit(**_JIT)
def rms_norm(x, weight, eps, out):
    """out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, row by row."""
    n = x.shape[1]
    for r in range(x.shape[0]):
        ss = np.float32(0.0)
        for i in range(n):
            ss += x[r, i] * x[r, i]
        inv = np.float32(1.0) / np.sqrt(ss / np.float32(n) + np.float32(eps))
        for i in range(n):
            out[r, i] = x[r, i] * inv * widen(weight[i])


@njit(**_JIT)
def _head_rms_norm(v, start, width, weight, eps):
    """In place: RMSNorm of v[start:start+width] (one head) with a per-head-dim weight (Qwen3 q/k norm)."""
    ss = np.float32(0.0)
    for i in range(width):
        ss += v[start + i] * v[start + i]
    inv = np.float32(1.0) / np.sqrt(ss / np.float32(width) + np.float32(eps))
    for i in range(width):
        v[start + i] = v[start + i] * inv * weight[i]


@njit(**_JIT)
def _rope_head(v, start, cos_row, sin_row):
    """In place RoPE on one head in HF's rotate-half layout: pairs (i, i + d/2) turn by angle pos * inv_freq_i.
        a' = a cos - b sin,   b' = b cos + a sin"""
    half = cos_row.shape[0]
    for i in range(half):
        a = v[start + i]
        b = v[start + half + i]
        v[start + i] = a * cos_row[i] - b * sin_row[i]
        v[start + half + i] = b * cos_row[i] + a * sin_row[i]


@njit(**_JIT)
def qkv_to_cache(qkv, bias, q_norm, k_norm, use_qk_norm, eps, n_heads, cos, sin, slots, positions, layer, k_cache, v_cache):
    """Per row: add bias, per-head q/k norm (Qwen3), RoPE on q and k heads, then write k and v at the row's
    position of its slot. qkv rows are [q (n_heads*d) | k (n_kv*d) | v (n_kv*d)]; q stays in qkv.
    Cache layouts: k_cache (slots, L, n_kv, d, S) -- keys transposed --, v_cache (slots, L, n_kv, S, d)."""
    n_kv, head_dim = v_cache.shape[2], v_cache.shape[4]
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
        for g in range(n_kv):
            for i in range(head_dim):
                k_cache[s, layer, g, i, p] = row[q_dim + g * head_dim + i]
                v_cache[s, layer, g, p, i] = row[q_dim + kv_dim + g * head_dim + i]


# Attention work unit: one row, one kv head with its query heads, ATTN_CHUNK positions of context. Units
# depend only on their own row's data and context length, so a row's result never depends on the batch.
ATTN_CHUNK = 128


@njit(**_JIT, inline="never")
def _attend_chunk(q_row, q0, group, keys_t, values, t0, t1, scale, scores, part_out, part_max, part_sum):
    """Partial softmax attention of `group` query heads (q_row[q0 : q0 + group*d]) over positions [t0, t1)
    of one kv head: part_max[j] = max_t s_jt, part_sum[j] = sum_t exp(s_jt - max), part_out[j] = sum_t
    exp(s_jt - max) v_t, with s_jt = q_j . k_t / sqrt(d). Keys are read once for all the group's heads.
    scores: scratch of at least (group, t1 - t0)."""
    head_dim = values.shape[1]
    n = t1 - t0
    scores[:, :n] = 0.0
    for i in range(head_dim):  # s_jt = sum_i q_ji k_ti, vectorised over t (keys stored transposed)
        key_i = keys_t[i, t0:t1]
        for j in range(group):
            qi = q_row[q0 + j * head_dim + i] * scale
            sj = scores[j]
            for t in range(n):
                sj[t] += qi * key_i[t]
    for j in range(group):
        sj = scores[j]
        best = np.float32(-np.inf)
        for t in range(n):
            best = max(best, sj[t])
        total = np.float32(0.0)
        for t in range(n):
            e = exp_nonpos(sj[t] - best)
            sj[t] = e
            total += e
        part_max[j] = best
        part_sum[j] = total
    part_out[:, :] = 0.0
    for t in range(n):  # o_j = sum_t p_jt v_t, vectorised over d
        v_t = values[t0 + t]
        for j in range(group):
            p = scores[j, t]
            oj = part_out[j]
            for i in range(head_dim):
                oj[i] += p * v_t[i]


@njit(parallel=True, **_JIT)
def attention(qkv, n_heads, slots, positions, layer, k_cache, v_cache, out):
    """Causal GQA attention of each row's q heads over its slot's cache up to and including its position:
        out_h = sum_t softmax_t(q_h . k_t / sqrt(d)) v_t,   t = 0..pos,  kv head = h // (n_heads / n_kv)
    split into chunks of ATTN_CHUNK positions (parallel units) and merged as in flash-decoding:
        m = max_c m_c,   out_h = sum_c e^(m_c - m) o_c / sum_c e^(m_c - m) l_c"""
    k = qkv.shape[0]
    n_kv, head_dim = v_cache.shape[2], v_cache.shape[4]
    group = n_heads // n_kv
    scale = np.float32(1.0 / math.sqrt(head_dim))
    n_chunks = (positions + ATTN_CHUNK) // ATTN_CHUNK  # ceil((pos + 1) / CHUNK)
    first_unit = np.zeros(k + 1, dtype=np.int64)
    for r in range(k):
        first_unit[r + 1] = first_unit[r] + n_kv * n_chunks[r]
    n_units = first_unit[k]
    part_out = np.empty((n_units, group, head_dim), dtype=np.float32)
    part_max = np.empty((n_units, group), dtype=np.float32)
    part_sum = np.empty((n_units, group), dtype=np.float32)
    scratch = np.empty((n_units, group, ATTN_CHUNK), dtype=np.float32)
    for u in prange(n_units):
        r = 0
        while first_unit[r + 1] <= u:
            r += 1
        g, c = divmod(u - first_unit[r], n_chunks[r])
        t0 = c * ATTN_CHUNK
        t1 = min(t0 + ATTN_CHUNK, positions[r] + 1)
        s = slots[r]
        _attend_chunk(qkv[r], g * group * head_dim, group, k_cache[s, layer, g], v_cache[s, layer, g], t0, t1, scale,
                      scratch[u], part_out[u], part_max[u], part_sum[u])
    for r in range(k):
        for g in range(n_kv):
            u0 = first_unit[r] + g * n_chunks[r]
            for j in range(group):
                o0 = (g * group + j) * head_dim
                m = part_max[u0, j]
                for c in range(1, n_chunks[r]):
                    m = max(m, part_max[u0 + c, j])
                denom = np.float32(0.0)
                for i in range(head_dim):
                    out[r, o0 + i] = 0.0
                for c in range(n_chunks[r]):
                    w = exp_nonpos(part_max[u0 + c, j] - m)
                    denom += w * part_sum[u0 + c, j]
                    for i in range(head_dim):
                        out[r, o0 + i] += w * part_out[u0 + c, j, i]
                inv = np.float32(1.0) / denom
                for i in range(head_dim):
                    out[r, o0 + i] *= inv


@njit(**_JIT)
def silu_mul(gate_up, out):
    """out = SiLU(g) * u with [g | u] = gate_up rows; SiLU(g) = g sigmoid(g), and with e = exp(-|g|) <= 1
    sigmoid(g) = 1 / (1 + e) for g >= 0 and e / (1 + e) for g < 0 (no overflow either way)."""
    ffn = out.shape[1]
    for r in range(out.shape[0]):
        for j in range(ffn):
            g = gate_up[r, j]
            e = exp_nonpos(-abs(g))
            sig = (np.float32(1.0) if g >= 0 else e) / (np.float32(1.0) + e)
            out[r, j] = g * sig * gate_up[r, ffn + j]


@njit(**_JIT)
def decode_rows(
    tokens, slots, positions, embed, embed_scale, attn_norm, wqkv, qkv_scale, bqkv, q_norm, k_norm, use_qk_norm,
    wo, o_scale, mlp_norm, wgu, gu_scale, wd, d_scale, final_norm, lm_head, lm_scale, cos, sin, k_cache, v_cache,
    n_heads, eps, logit_rows, logits,
):
    """Run all layers for k token rows, row r being token tokens[r] of slot slots[r] at position positions[r];
    write each row's K/V into the cache, and the float32 logits of row logit_rows[j] into logits[j] (a
    prefill needs only its last row's). Stacked weights: wqkv (L, q+2kv, hidden), wo (L, hidden, q),
    wgu (L, 2 ffn, hidden), wd (L, hidden, ffn), each with per-output-row scales (L, rows)."""
    k = tokens.shape[0]
    n_layers, qkv_dim, hidden = wqkv.shape
    ffn = wd.shape[2]
    q_dim = wo.shape[2]
    x = np.empty((k, hidden), dtype=np.float32)  # the residual stream
    for r in range(k):
        for i in range(hidden):
            x[r, i] = widen(embed[tokens[r], i]) * embed_scale[tokens[r]]
    h = np.empty((k, hidden), dtype=np.float32)
    qkv = np.empty((k, qkv_dim), dtype=np.float32)
    att = np.empty((k, q_dim), dtype=np.float32)
    gu = np.empty((k, 2 * ffn), dtype=np.float32)
    act = np.empty((k, ffn), dtype=np.float32)
    for layer in range(n_layers):
        rms_norm(x, attn_norm[layer], eps, h)
        matvec(wqkv[layer], qkv_scale[layer], h, qkv)
        qkv_to_cache(qkv, bqkv[layer], q_norm[layer], k_norm[layer], use_qk_norm, eps, n_heads, cos, sin,
                     slots, positions, layer, k_cache, v_cache)
        attention(qkv, n_heads, slots, positions, layer, k_cache, v_cache, att)
        matvec_add(wo[layer], o_scale[layer], att, x)
        rms_norm(x, mlp_norm[layer], eps, h)
        matvec(wgu[layer], gu_scale[layer], h, gu)
        silu_mul(gu, act)
        matvec_add(wd[layer], d_scale[layer], act, x)
    picked = np.empty((logit_rows.shape[0], hidden), dtype=np.float32)
    for j in range(logit_rows.shape[0]):
        picked[j] = x[logit_rows[j]]
    rms_norm(picked, final_norm, eps, h[: logit_rows.shape[0]])
    matvec(lm_head, lm_scale, h[: logit_rows.shape[0]], logits)
