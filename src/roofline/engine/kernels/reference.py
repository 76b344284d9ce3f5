"""The Llama-family decoder in plain torch: the readable reference forward the tests hold the engine
to (the runner computes every row, prefill or decode, with the decode kernels), on the RoPE tables
the runner takes too (`rope`). The engine itself runs without torch: only this reference, and so
the tests, need it.

Covers Llama 2/3 (llama3 RoPE scaling), Mistral, SmolLM, Qwen2 (q/k/v bias), Qwen3 (q/k RMSNorm),
Gemma 3 (below). Weights: a dict under HF names and layouts (Linear weight (out, in)), numpy (a
checkpoint's) or torch, float32, bfloat16, or int8 with per-row scales under `<name>_scale`; norm
weights the factors the norm multiplies by (a Gemma checkpoint's 1 + w, as the loaders hand them);
activations float32. Per layer (d = head_dim):

    h = RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w
    q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
    q, k = RoPE(q), RoPE(k): pair (i, i + d/2) turns by pos * inv_freq_i, inv_freq_i = theta^(-2i/d)
    x = x + softmax(q k^T / sqrt(d) + causal mask) v Wo^T   (n_heads / n_kv_heads share a kv head)
    h = RMSNorm(x);  x = x + (SiLU(h Wg^T) * (h Wu^T)) Wd^T
    logits = RMSNorm(x) W_lm^T                              (W_lm = embedding table when tied)

Gemma 3 (the ModelConfig fields): x starts as the embedding times embed_scale; the attention and
MLP outputs go through their own RMSNorm before each residual add, and the MLP's input norm is
pre_feedforward_layernorm; GELU (tanh) for SiLU; scores times query_scale; a sliding layer's query
sees its last `window` positions, and turns by its own RoPE table; logits = cap tanh(logits / cap).

A mixture of experts (Qwen3-MoE, Mixtral: ModelConfig.moe): the MLP is `moe_mlp`.

gpt-oss: o_proj has a bias; each head's sink logit joins its softmax (`attention`); the router
has a bias and weighs its top-k logits by a softmax over them alone; the experts have biases and
gate with the clamped SwiGLU; RoPE is YaRN's (`yarn`: its frequencies, cos and sin scaled).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F

from roofline.engine.kernels import rope as rope_numpy
from roofline.engine.kernels.kv_cache import read_keys, write_keys
from roofline.engine.loading.checkpoint import BFLOAT16
from roofline.engine.loading.config import Activation, ModelConfig, Routing


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """Per-pair rotation frequencies (head_dim / 2,), float32 (`rope`: the runner's)."""
    return torch.from_numpy(rope_numpy.rope_inv_freq(config))


def rope_tables(config: ModelConfig, n_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of pos * inv_freq, float32 (n_positions, head_dim / 2) (`rope`)."""
    cos, sin = rope_numpy.rope_tables(config, n_positions)
    return torch.from_numpy(cos), torch.from_numpy(sin)


def rope_table_stack(config: ModelConfig, n_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every RoPE table of the model, stacked: float32 (tables, n_positions, head_dim / 2)
    (`rope`)."""
    cos, sin = rope_numpy.rope_table_stack(config, n_positions)
    return torch.from_numpy(cos), torch.from_numpy(sin)


def torch_weights(weights: Mapping) -> dict[str, torch.Tensor]:
    """A checkpoint's numpy tensors as torch tensors sharing their memory (bfloat16 through its
    bits); torch tensors as they are."""
    return {name: as_torch(t) for name, t in weights.items()}


def as_torch(t) -> torch.Tensor:
    """One tensor of `torch_weights`."""
    if isinstance(t, torch.Tensor):
        return t
    if t.dtype == BFLOAT16:
        return torch.from_numpy(np.ascontiguousarray(t).view(np.int16)).view(torch.bfloat16)
    # read-only memory (a mapped file) shared with the checkpoint: the reference never writes it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.asarray(t))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (T, heads, d); cos/sin: (T, d/2). Rotate-half pairs (i, i + d/2): (a, b) -> (a c - b s, b
    c + a s)."""
    a, b = x.chunk(2, dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((a * c - b * s, b * c + a * s), dim=-1)


def dense_weight(weights: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
    """A Linear weight as stored, or, for int8, dequantized: W[o, i] = scale[o] * q[o, i]."""
    w = weights[name]
    if w.dtype == torch.int8:
        return w.float() * weights[name + "_scale"][:, None]
    return w


def embedding_rows(weights: Mapping[str, torch.Tensor], token_ids: torch.Tensor) -> torch.Tensor:
    """The embedding rows of token_ids as float32 (int8 rows times their scales)."""
    name = "model.embed_tokens.weight"
    rows = weights[name][token_ids].float()
    return (
        rows * weights[name + "_scale"][token_ids][:, None] if name + "_scale" in weights else rows
    )


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x W^T (+ b) with float32 activations; bf16 weights multiply bf16-rounded activations (a bf16
    GEMM)."""
    y = F.linear(x.to(w.dtype), w).float() if w.dtype != x.dtype else F.linear(x, w)
    return y if b is None else y + b.float()


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    start: int,
    window: int = 0,
    scale: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal GQA attention. q: (T, H, d) at positions start..start+T-1; k, v: (S, G, d) at
    positions 0..S-1. Query i sees keys 0..start+i (with a sliding window, the last `window` of
    them). scale: the scores' (default 1 / sqrt(d)); sinks: (H,) one more logit a head in each
    softmax, with no value (gpt-oss). Returns (T, H*d)."""
    T, H, d = q.shape
    S = k.shape[0]
    key_pos = torch.arange(S)
    query_pos = (start + torch.arange(T))[:, None]
    allowed = key_pos[None, :] <= query_pos  # (T, S) causal mask
    if window > 0:
        allowed &= key_pos[None, :] > query_pos - window
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if sinks is not None:  # transformers' eager gpt-oss attention: the sink as a last column
        group = H // k.shape[1]
        kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.einsum("thd,shd->hts", q, kk) * scale
        scores = scores.masked_fill(~allowed, float("-inf"))
        combined = torch.cat([scores, sinks.float()[:, None, None].expand(H, T, 1)], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = torch.softmax(combined, dim=-1)[..., :-1]
        return torch.einsum("hts,shd->thd", probs, vv).reshape(T, H * d)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        attn_mask=allowed,
        scale=scale,
        enable_gqa=True,
    )
    return out[0].transpose(0, 1).reshape(T, H * d)


def moe_mlp(config: ModelConfig, weights: Mapping[str, torch.Tensor], p: str, h: torch.Tensor):
    """sum_j w_j SwiGLU_{e_j}(h) per row: e_j the top-k experts of softmax(h Wr^T), w_j their
    probabilities (renormalised with norm_topk), the sum in rank order. gpt-oss: the router and
    experts have biases, w_j = softmax of the top-k logits alone, the gate is the clamped
    SwiGLU."""
    c = config
    logits = linear(
        h, dense_weight(weights, p + "mlp.gate.weight"), weights.get(p + "mlp.gate.bias")
    )
    if c.routing == Routing.TOPK_SOFTMAX:
        top, ids = torch.topk(logits, c.n_experts_used, dim=-1)
        top = torch.softmax(top, dim=-1)
    else:
        top, ids = torch.topk(torch.softmax(logits, dim=-1), c.n_experts_used, dim=-1)
        if c.norm_topk:
            top = top / top.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(h)
    for r in range(h.shape[0]):
        for j in range(c.n_experts_used):
            e = f"{p}mlp.experts.{int(ids[r, j])}."

            def proj(x, name, e=e):
                return linear(
                    x, dense_weight(weights, e + name + ".weight"), weights.get(e + name + ".bias")
                )

            gate, up = proj(h[r : r + 1], "gate_proj"), proj(h[r : r + 1], "up_proj")
            if c.activation == Activation.SWIGLU_OAI:
                gate = gate.clamp(max=c.swiglu_limit)
                up = up.clamp(min=-c.swiglu_limit, max=c.swiglu_limit)
                act = (up + 1) * (gate * torch.sigmoid(gate * c.swiglu_alpha))
            else:
                act = F.silu(gate) * up
            out[r] += top[r, j] * proj(act, "down_proj")[0]
    return out


def forward(
    config: ModelConfig,
    weights: Mapping,
    token_ids: torch.Tensor,
    *,
    rope: tuple[torch.Tensor, torch.Tensor],
    start: int = 0,
    cache: tuple[torch.Tensor, torch.Tensor] | None = None,
    last_only: bool = False,
) -> torch.Tensor:
    """Logits (T, vocab) float32 for token_ids (T,) at positions start..start+T-1.

    cache: (k, v) of one sequence, float32, k (n_layers, n_kv_heads, S / B, head_dim, B) (keys
    transposed in blocks of B positions, as the decode kernels read them; see kv_cache.py), v
    (n_layers, n_kv_heads, S, head_dim); this call writes its K/V at positions start.. and attends
    over 0..start+T-1. Without a cache, start must be 0. rope: (cos, sin) tables from `rope_tables`
    covering the positions, or every table of the model from `rope_table_stack`. last_only: logits
    of the last token only.
    """
    c = config
    T = token_ids.shape[0]
    if cache is None and start != 0:
        raise ValueError("start > 0 needs a cache holding the earlier positions")
    cos_all, sin_all = (t if t.dim() == 3 else t[None] for t in rope)
    w = torch_weights(weights)
    x = embedding_rows(w, token_ids)
    if c.embed_scale != 1.0:
        x = x * torch.tensor(c.embed_scale, dtype=torch.float32)
    windows, tables = c.windows, c.layer_rope_tables
    for i in range(c.n_layers):
        p = f"model.layers.{i}."
        table = tables[i] if cos_all.shape[0] > 1 else 0
        cos, sin = cos_all[table][start : start + T], sin_all[table][start : start + T]
        h = rms_norm(x, w[p + "input_layernorm.weight"], c.rms_eps)
        q, k, v = (
            linear(
                h,
                dense_weight(w, p + f"self_attn.{n}_proj.weight"),
                w.get(p + f"self_attn.{n}_proj.bias"),
            )
            for n in "qkv"
        )
        q = q.view(T, c.n_heads, c.head_dim)
        k, v = k.view(T, c.n_kv_heads, c.head_dim), v.view(T, c.n_kv_heads, c.head_dim)
        if c.qk_norm:  # Qwen3: RMSNorm over each head's d values, before RoPE
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], c.rms_eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], c.rms_eps)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k_cache, v_cache = cache[0][i], cache[1][i]  # (G, S/B, d, B) and (G, S, d)
            write_keys(k_cache, start, k)
            v_cache[:, start : start + T] = v.transpose(0, 1)
            k, v = read_keys(k_cache, start + T), v_cache[:, : start + T].transpose(0, 1)
        sinks = w[p + "self_attn.sinks"] if c.sinks else None
        att = attention(q, k, v, start, window=windows[i], scale=c.attention_scale, sinks=sinks)
        o = linear(
            att, dense_weight(w, p + "self_attn.o_proj.weight"), w.get(p + "self_attn.o_proj.bias")
        )
        if c.post_norms:
            o = rms_norm(o, w[p + "post_attention_layernorm.weight"], c.rms_eps)
        x = x + o
        mlp_norm = "pre_feedforward_layernorm" if c.post_norms else "post_attention_layernorm"
        h = rms_norm(x, w[p + mlp_norm + ".weight"], c.rms_eps)
        if c.moe:
            x = x + moe_mlp(c, w, p, h)
            continue
        gate = linear(h, dense_weight(w, p + "mlp.gate_proj.weight"))
        up = linear(h, dense_weight(w, p + "mlp.up_proj.weight"))
        act = (
            F.gelu(gate, approximate="tanh")
            if c.activation == Activation.GELU_TANH
            else F.silu(gate)
        )
        m = linear(act * up, dense_weight(w, p + "mlp.down_proj.weight"))
        if c.post_norms:
            m = rms_norm(m, w[p + "post_feedforward_layernorm.weight"], c.rms_eps)
        x = x + m
    if last_only:
        x = x[-1:]
    x = rms_norm(x, w["model.norm.weight"], c.rms_eps)
    logits = linear(
        x,
        dense_weight(w, "lm_head.weight" if "lm_head.weight" in w else "model.embed_tokens.weight"),
    )
    if c.final_softcap is not None:
        logits = torch.tanh(logits / c.final_softcap) * c.final_softcap
    return logits
