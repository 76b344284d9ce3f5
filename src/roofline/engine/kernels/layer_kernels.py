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
gpt-oss's experts gate with `swiglu_oai` instead.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from roofline import simd
from roofline.engine.kernels import simd_loops
from roofline.engine.kernels.fast_exp import exp_nonpos
from roofline.engine.kernels.matrices import JIT_OPTIONS, matvec, widen

GELU_2K = np.float32(2.0 * math.sqrt(2.0 / math.pi))  # 2 sqrt(2 / pi)
GELU_C = np.float32(0.044715)


@njit(**JIT_OPTIONS)
def matvec_rows(w, scale, x, out, o0, o1, accumulate, kernels):
    """out[r, o] = scale[o] * sum_i w[o, i] * x[r, i] (or += when accumulate) for rows o in [o0, o1)
    of w and every row r of x; w (n_out, n_in) fp32, bf16 bits or int8, scale (n_out,) float32 (ones
    unless int8: multiplying by 1 is exact), or stored rows (`matrices`). Each row of w comes from
    memory once for all rows of x (past four x rows, from L1 for the later groups: `matrices`).
    kernels: the `kernel_shapes.KernelShape` the rows are read in (the sums do not depend on it)."""
    matvec(w, scale, x, out, o0, o1, accumulate, kernels)


@njit(**JIT_OPTIONS)
def rms_norm(x, weight, eps, out):
    """out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, row by row."""
    n = x.shape[1]
    for r in range(x.shape[0]):
        ss = simd.dot(x, r * n, x, r * n, n)
        inv = np.float32(1.0) / np.sqrt(ss / np.float32(n) + np.float32(eps))
        for i in range(n):
            out[r, i] = x[r, i] * inv * widen(weight[i])


@njit(**JIT_OPTIONS)
def _head_rms_norm(v, start, width, weight, eps):
    """In place: RMSNorm of v[start:start+width] (one head) with a per-head-dim weight (Qwen3 q/k
    norm)."""
    ss = simd.dot(v, start, v, start, width)
    inv = np.float32(1.0) / np.sqrt(ss / np.float32(width) + np.float32(eps))
    for i in range(width):
        v[start + i] = v[start + i] * inv * weight[i]


@njit(**JIT_OPTIONS)
def _rope_head(v, start, cos_row, sin_row):
    """In place RoPE on one head in HF's rotate-half layout: pairs (i, i + d/2) turn by angle
    pos * inv_freq_i:  a' = a cos - b sin,   b' = b cos + a sin"""
    half = cos_row.shape[0]
    for i in range(half):
        a = v[start + i]
        b = v[start + half + i]
        v[start + i] = a * cos_row[i] - b * sin_row[i]
        v[start + half + i] = b * cos_row[i] + a * sin_row[i]


@njit(**JIT_OPTIONS)
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


@njit(inline="always", **JIT_OPTIONS)
def _sigmoid_exp(g, gelu):
    """e = exp(-|z|) of the sigmoid the activation is g times: z = g for SiLU; for GELU (tanh)
    0.5 (1 + tanh(y)) = sigmoid(2 y), y = sqrt(2 / pi) (g + 0.044715 g^3), so z = 2 y (same sign
    as g, as `silu_block` needs)."""
    if gelu:
        z = GELU_2K * (g + GELU_C * g * g * g)
        return exp_nonpos(-abs(z))
    return exp_nonpos(-abs(g))


@njit(**JIT_OPTIONS)
def silu_mul(gate_up, out, j0=0, j1=-1, scratch=None, gelu=False):
    """out[:, j] = SiLU(g) * u (gelu: GELU(g) * u, its tanh approximation) for columns j in
    [j0, j1) (all by default) with [g | u] = gate_up rows; SiLU(g) = g sigmoid(g), GELU(g) = g
    sigmoid(z(g)) (`_sigmoid_exp`), and with e = exp(-|z|) <= 1 sigmoid(z) = 1 / (1 + e) for
    z >= 0 and e / (1 + e) for z < 0 (no overflow either way). Sixteen columns at a time
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
                    e[lane] = _sigmoid_exp(gate_up[r, j + lane], gelu)
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
                    e[lane] = _sigmoid_exp(g, gelu)
                simd_loops.silu_block(pad, 0, lanes, e, res, 0)
                for lane in range(m):
                    out[r, j + lane] = res[lane]


@njit(**JIT_OPTIONS)
def swiglu_oai(gate_up, out, j0, j1, limit, alpha):
    """out[:, j] = (u + 1) (g sigmoid(alpha g)) for columns j in [j0, j1), g = min(g, limit), u =
    clamp(u, -limit, limit), [g | u] = gate_up rows: gpt-oss's clamped SwiGLU, in transformers'
    order (GptOssExperts._apply_gate). With e = exp(-|alpha g|) <= 1, g sigmoid(alpha g) = g / (1 +
    e) for g >= 0 and g e / (1 + e) for g < 0 (no overflow either way). Column by column: a
    column's value never depends on the range it was computed in."""
    ffn = out.shape[1]
    for r in range(out.shape[0]):
        for j in range(j0, j1):
            g = min(gate_up[r, j], limit)
            u = min(max(gate_up[r, ffn + j], -limit), limit)
            e = exp_nonpos(-abs(alpha * g))
            glu = g / (np.float32(1.0) + e) if g >= 0 else g * e / (np.float32(1.0) + e)
            out[r, j] = (u + np.float32(1.0)) * glu
