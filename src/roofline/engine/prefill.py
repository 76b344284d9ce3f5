"""Prompt prefill in fixed chunks: torch GEMMs over the packed weights, attention over the cached K/V.

A prompt is cut at fixed positions -- every multiple of the chunk size C -- whoever asks for it: the
scheduler runs one chunk per step between decode steps, `ModelRunner.prefill` runs them all in a row, and
both run the same chunks in the same order on the same data, so a request's logits (and greedy output)
do not depend on how its prefill was interleaved with other requests. A chunk [p, p + C) attends to the
cached positions 0..p-1 and causally to itself; its K/V go into the slot's cache before the next chunk.

Per chunk and layer (T rows, fused weights as the decode kernels hold them: one GEMM for q|k|v, one for
gate|up; bf16 weights multiply bf16-rounded activations, accumulating in fp32):

    h = RMSNorm(x);  [q|k|v] = h Wqkv^T (+b);  q, k = RoPE(qk-norm(q, k));  K/V -> cache
    x += Attention(q, K[0..p+T), V[0..p+T)) Wo^T;  h = RMSNorm(x);  [g|u] = h Wgu^T;  x += (SiLU(g) u) Wd^T

Attention is torch's scaled_dot_product_attention with the query heads of a kv head folded into the rows
(no K/V copied per query head): its CPU kernel works in blocks with an online softmax, so memory grows
with T times the context, never with the context squared, and a chunk that starts at position 0 (the
whole first chunk) uses its causal form, which skips the masked blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from roofline.engine.config import ModelConfig
from roofline.engine.kv_cache import KEY_BLOCK
from roofline.engine.weights import DecodeWeights

__all__ = ["PrefillWeights", "attention", "prefill_chunk"]

@dataclass
class PrefillWeights:
    """torch views of the packed DecodeWeights (no copies): stacks over layers, bf16 bits as torch.bfloat16;
    int8 matrices stay int8 here (`PrefillWeights.matrix` widens one layer's on use)."""

    embed: torch.Tensor
    embed_scale: torch.Tensor
    attn_norm: torch.Tensor
    wqkv: torch.Tensor
    qkv_scale: torch.Tensor
    bqkv: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    wo: torch.Tensor
    o_scale: torch.Tensor
    mlp_norm: torch.Tensor
    wgu: torch.Tensor
    gu_scale: torch.Tensor
    wd: torch.Tensor
    d_scale: torch.Tensor
    final_norm: torch.Tensor
    lm_head: torch.Tensor
    lm_scale: torch.Tensor

    @classmethod
    def of(cls, config: ModelConfig, w: DecodeWeights) -> PrefillWeights:
        def t(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == np.uint16 else torch.from_numpy(a)

        return cls(t(w.embed), t(w.embed_scale), t(w.attn_norm), t(w.wqkv), t(w.qkv_scale),
                   t(w.bqkv) if config.attn_bias else None, t(w.q_norm) if config.qk_norm else None,
                   t(w.k_norm) if config.qk_norm else None, t(w.wo), t(w.o_scale), t(w.mlp_norm), t(w.wgu),
                   t(w.gu_scale), t(w.wd), t(w.d_scale), t(w.final_norm), t(w.lm_head), t(w.lm_scale))


def _linear(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x W^T in float32 for one (out, in) matrix: fp32 as is; bf16 as a bf16 GEMM on bf16-rounded x (fp32
    accumulation); int8 widened to float32 with its row scales for this call."""
    if w.dtype == torch.float32:
        return x @ w.T
    if w.dtype == torch.bfloat16:
        return (x.to(torch.bfloat16) @ w.T).float()
    return x @ (w.float() * scale[:, None]).T


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (T, heads, d), rotate-half pairs (i, i + d/2) by the positions' angles; cos/sin (T, 1, d/2)."""
    a, b = x.chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
    """Store k, v (T, kv_heads, d) at positions start.. of one layer: keys into the blocked, transposed
    (kv_heads, S / B, d, B) cache, values into (kv_heads, S, d)."""
    T = k.shape[0]
    v_cache[:, start : start + T] = v.transpose(0, 1)
    end, first_block = start + T, start // KEY_BLOCK
    last_block = -(-end // KEY_BLOCK)
    blocks = k_cache[:, first_block:last_block]  # (G, nb, d, B)
    lo, hi = start - first_block * KEY_BLOCK, end - first_block * KEY_BLOCK
    flat = blocks.permute(0, 1, 3, 2).reshape(k.shape[1], -1, k.shape[2])  # (G, nb * B, d): a copy unless nb == 1
    flat[:, lo:hi] = k.transpose(0, 1)
    blocks.copy_(flat.reshape(k.shape[1], last_block - first_block, KEY_BLOCK, k.shape[2]).permute(0, 1, 3, 2))


def read_k(k_cache: torch.Tensor, end: int) -> torch.Tensor:
    """Keys of positions 0..end-1 of one layer as a contiguous (kv_heads, end, d) tensor."""
    nb = -(-end // KEY_BLOCK)
    g, _, d, b = k_cache.shape
    return k_cache[:, :nb].permute(0, 1, 3, 2).reshape(g, nb * b, d)[:, :end]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    """q (T, H, d) at positions start..start+T-1; k, v (G, S = start + T, d). Query i sees keys 0..start+i.
    The H / G query heads of a kv head become rows of one (G, H / G * T, d) problem. Returns (T, H * d)."""
    T, H, d = q.shape
    G, S, _ = k.shape
    r = H // G
    qg = q.view(T, G, r, d).permute(1, 2, 0, 3).reshape(G, r * T, d)
    if start == 0 and r == 1:
        out = F.scaled_dot_product_attention(qg[None], k[None], v[None], is_causal=True, scale=1.0 / math.sqrt(d))
    else:
        allowed = torch.arange(S)[None, :] <= (start + torch.arange(T))[:, None]  # (T, S)
        mask = allowed.repeat(r, 1)  # (r T, S): row j T + i is query head j of the group at position start + i
        out = F.scaled_dot_product_attention(qg[None], k[None], v[None], attn_mask=mask, scale=1.0 / math.sqrt(d))
    return out[0].view(G, r, T, d).permute(2, 0, 1, 3).reshape(T, H * d)


def prefill_chunk(config: ModelConfig, w: PrefillWeights, token_ids: torch.Tensor, start: int,
                  k_cache: torch.Tensor, v_cache: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  *, logits: bool = True) -> torch.Tensor | None:
    """Run token_ids (T,) at positions start..start+T-1 of one slot whose cache holds positions 0..start-1:
    k_cache (layers, kv_heads, S / B, d, B), v_cache (layers, kv_heads, S, d), cos/sin (positions, d/2).
    Writes the chunk's K/V; returns the float32 logits (vocab,) of its last token (None when logits=False)."""
    c = config
    T = token_ids.shape[0]
    qd, kvd = c.q_dim, c.kv_dim
    cos_t, sin_t = cos[start : start + T, None, :], sin[start : start + T, None, :]
    x = w.embed[token_ids].float() * w.embed_scale[token_ids][:, None]
    for i in range(c.n_layers):
        h = _rms_norm(x, w.attn_norm[i], c.rms_eps)
        qkv = _linear(h, w.wqkv[i], w.qkv_scale[i])
        if w.bqkv is not None:
            qkv = qkv + w.bqkv[i]
        q = qkv[:, :qd].view(T, c.n_heads, c.head_dim)
        k = qkv[:, qd : qd + kvd].view(T, c.n_kv_heads, c.head_dim)
        v = qkv[:, qd + kvd :].view(T, c.n_kv_heads, c.head_dim)
        if w.q_norm is not None:
            q, k = _rms_norm(q, w.q_norm[i], c.rms_eps), _rms_norm(k, w.k_norm[i], c.rms_eps)
        q, k = _rope(q, cos_t, sin_t), _rope(k, cos_t, sin_t)
        write_kv(k_cache[i], v_cache[i], start, k, v)
        end = start + T
        keys = k.transpose(0, 1).contiguous() if start == 0 else read_k(k_cache[i], end)
        values = v_cache[i][:, :end]
        x = x + _linear(attention(q, keys, values, start), w.wo[i], w.o_scale[i])
        h = _rms_norm(x, w.mlp_norm[i], c.rms_eps)
        gu = _linear(h, w.wgu[i], w.gu_scale[i])
        x = x + _linear(F.silu(gu[:, : c.ffn]) * gu[:, c.ffn :], w.wd[i], w.d_scale[i])
    if not logits:
        return None
    h = _rms_norm(x[-1:], w.final_norm, c.rms_eps)
    return _linear(h, w.lm_head, w.lm_scale)[0]
