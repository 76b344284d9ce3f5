"""The weights in the decode kernels' layout, packed from the checkpoint's tensors.

Stacked over layers so that the kernels index one array per kind of weight:
    wqkv (L, q_dim + 2 kv_dim, hidden) = [Wq; Wk; Wv]     wo (L, hidden, q_dim)
    wgu  (L, 2 ffn, hidden)            = [Wg; Wu]         wd (L, hidden, ffn)
A mixture-of-experts model (ModelConfig.moe) has no dense MLP (wgu and wd with 0 rows) and
`experts` instead (`ExpertWeights`: each expert's [Wg; Wu] and Wd, stacked over layers and experts,
and the float32 router).
Matrix formats (DTYPES):
    stored  each row as the file stores it (GGUF blocks, F16, BF16, F32): `stored_weights`
    fp32    float32
    bf16    uint16 bit patterns of bf16 (round to nearest even from the checkpoint's values)
    int8    int8 with one float32 scale per output row: W[o, i] ~ scale[o] * q[o, i],
            scale[o] = max_i |W[o, i]| / 127
Every matrix has its row scales (ones for fp32 and bf16, where multiplying by them is exact). Norms,
biases and the RoPE tables stay float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from roofline.dtypes import DTYPE_NAMES
from roofline.engine.loading.checkpoint import BFLOAT16, is_shape_only
from roofline.engine.loading.config import ModelConfig
from roofline.errors import UserError
from roofline.simd_memory import aligned_empty

DTYPES = DTYPE_NAMES  # roofline.dtypes: stored as the file holds it (stored_weights), ...
_STORAGE = {"fp32": np.float32, "bf16": np.uint16, "int8": np.int8}


@dataclass(kw_only=True)
class ExpertWeights:
    """A mixture of experts' arrays, stacked over layers then experts (E), beside DecodeWeights."""

    router: np.ndarray  # (L, E, hidden) float32: the router's logits are router h
    router_scale: np.ndarray  # (L, E) float32 ones
    wgu: np.ndarray  # (L, E, 2 ffn, hidden) = [Wg; Wu] of each expert
    gu_scale: np.ndarray  # (L, E, 2 ffn)
    wd: np.ndarray  # (L, E, hidden, ffn)
    d_scale: np.ndarray  # (L, E, hidden)
    # float32 biases (gpt-oss; zeros elsewhere): the router's logits', each expert's [bg; bu]
    # and bd
    router_bias: np.ndarray  # (L, E)
    gu_bias: np.ndarray  # (L, E, 2 ffn)
    d_bias: np.ndarray  # (L, E, hidden)


@dataclass(kw_only=True)
class DecodeWeights:
    """The arrays the decode kernels read, by name (22 arrays, many of one shape: never by
    position)."""

    embed: np.ndarray  # (vocab, hidden)
    embed_scale: np.ndarray  # (vocab,)
    attn_norm: np.ndarray  # (L, hidden) float32
    wqkv: np.ndarray
    qkv_scale: np.ndarray  # (L, q_dim + 2 kv_dim)
    bqkv: np.ndarray  # (L, q_dim + 2 kv_dim) float32, zeros without attn_bias
    q_norm: np.ndarray  # (L, head_dim) float32, ones without qk_norm
    k_norm: np.ndarray
    wo: np.ndarray
    o_scale: np.ndarray  # (L, hidden)
    bo: np.ndarray  # (L, hidden) float32: the output projection's bias, zeros without o_bias
    sinks: np.ndarray  # (L, n_heads) float32: each head's sink logit (zeros without sinks)
    mlp_norm: np.ndarray  # (L, hidden) float32
    attn_post_norm: np.ndarray  # (L, hidden) float32: of the attention output (ones without)
    mlp_post_norm: np.ndarray  # (L, hidden) float32: of the MLP output (ones without)
    wgu: np.ndarray
    gu_scale: np.ndarray  # (L, 2 ffn)
    wd: np.ndarray
    d_scale: np.ndarray  # (L, hidden)
    final_norm: np.ndarray  # (hidden,) float32
    lm_head: np.ndarray  # (vocab, hidden); the same array as embed when tied
    lm_scale: np.ndarray  # (vocab,)
    experts: ExpertWeights | None = None  # a mixture of experts' (wgu and wd then have 0 rows)


def layer_layout(c: ModelConfig) -> list[tuple[str, str, str, int, int]]:
    """(HF projection name, stack attribute, scale attribute, first row, end row) of every layer
    matrix."""
    q, kv, f = c.q_dim, c.kv_dim, c.ffn
    mlp = [
        ("mlp.gate_proj", "wgu", "gu_scale", 0, f),
        ("mlp.up_proj", "wgu", "gu_scale", f, 2 * f),
        ("mlp.down_proj", "wd", "d_scale", 0, c.hidden),
    ]
    return [
        ("self_attn.q_proj", "wqkv", "qkv_scale", 0, q),
        ("self_attn.k_proj", "wqkv", "qkv_scale", q, q + kv),
        ("self_attn.v_proj", "wqkv", "qkv_scale", q + kv, q + 2 * kv),
        ("self_attn.o_proj", "wo", "o_scale", 0, c.hidden),
    ] + ([] if c.moe else mlp)


def expert_layout(c: ModelConfig, expert: int) -> list[tuple[str, str, str, int, int]]:
    """`layer_layout`'s rows for one expert's matrices (stacks of ExpertWeights)."""
    f, p = c.ffn, f"mlp.experts.{expert}."
    return [
        (p + "gate_proj", "wgu", "gu_scale", 0, f),
        (p + "up_proj", "wgu", "gu_scale", f, 2 * f),
        (p + "down_proj", "wd", "d_scale", 0, c.hidden),
    ]


@dataclass(frozen=True, kw_only=True)
class ExpertVectors:
    """A mixture of experts' float32 arrays whatever the matrices' format: the routers (L, E,
    hidden) with unit row scales (L, E), and the biases (zeros without expert_bias)."""

    router: np.ndarray
    router_scale: np.ndarray
    router_bias: np.ndarray  # (L, E)
    gu_bias: np.ndarray  # (L, E, 2 ffn) = [bg; bu]
    d_bias: np.ndarray  # (L, E, hidden)


def expert_vectors(c: ModelConfig, tensors: dict) -> ExpertVectors:
    """`ExpertVectors` of every layer. A router is a float tensor (llama.cpp keeps it F32): one
    left quantized is `shape_only`."""
    L, E = c.n_layers, c.n_experts
    names = [f"model.layers.{i}.mlp.gate.weight" for i in range(L)]
    if any(is_shape_only(tensors[n]) for n in names):
        raise UserError(
            "the experts' router is stored quantized, which --dtype stored does not compute on; "
            "run --dtype fp32"
        )
    router = np.stack([vector(tensors[n]) for n in names])
    router_bias = np.zeros((L, E), np.float32)
    gu_bias = np.zeros((L, E, 2 * c.ffn), np.float32)
    d_bias = np.zeros((L, E, c.hidden), np.float32)
    for i in range(L if c.expert_bias else 0):
        p = f"model.layers.{i}.mlp."
        router_bias[i] = vector(tensors[p + "gate.bias"])
        for e in range(E):
            x = f"{p}experts.{e}."
            gu_bias[i, e, : c.ffn] = vector(tensors[x + "gate_proj.bias"])
            gu_bias[i, e, c.ffn :] = vector(tensors[x + "up_proj.bias"])
            d_bias[i, e] = vector(tensors[x + "down_proj.bias"])
    return ExpertVectors(
        router=router,
        router_scale=np.ones(router.shape[:2], np.float32),
        router_bias=router_bias,
        gu_bias=gu_bias,
        d_bias=d_bias,
    )


def _numpy_owned(a: np.ndarray, dtype=None) -> np.ndarray:
    """A copy (converted to dtype) in line-aligned memory numpy allocates (`aligned_empty`):
    numpy asks the kernel for huge pages on large arrays, and the lm_head streamed slower from
    memory allocated otherwise."""
    out = aligned_empty(a.shape, dtype or a.dtype)
    out[...] = a
    return out


def matrix(t: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """A checkpoint's tensor as (contiguous matrix in `dtype`'s storage, float32 row scales):
    fp32; bf16 (bits as uint16, rounded to nearest even); int8, W[o] ~ scale[o] q[o], scale[o] =
    max |W[o]| / 127, q rounded half to even."""
    ones = np.ones(t.shape[0], np.float32)
    if dtype == "fp32":
        return _numpy_owned(t, np.float32), ones
    w = np.asarray(t, np.float32)
    if dtype == "bf16":
        return _numpy_owned(w.astype(BFLOAT16).view(np.uint16)), ones
    top = np.abs(w).max(axis=1)
    scale = np.where(top > 0, top / np.float32(127.0), np.float32(1.0)).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return _numpy_owned(q), scale


def vector(t: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(t, dtype=np.float32)


@dataclass(frozen=True, kw_only=True)
class LayerVectors:
    """The per-layer vectors stacked over layers, float32: zero biases, unit q/k norms and unit
    post norms where the model has none."""

    attn_norm: np.ndarray
    mlp_norm: np.ndarray
    bqkv: np.ndarray
    q_norm: np.ndarray
    k_norm: np.ndarray
    attn_post_norm: np.ndarray
    mlp_post_norm: np.ndarray
    bo: np.ndarray
    sinks: np.ndarray


def layer_vectors(config: ModelConfig, tensors: dict) -> LayerVectors:
    """The norms and biases of every layer (`LayerVectors`). With post norms (Gemma) the MLP's
    input norm is pre_feedforward_layernorm and post_attention_layernorm is the attention output's;
    else post_attention_layernorm is the MLP's input norm."""
    c, L = config, config.n_layers
    attn_norm, mlp_norm = np.empty((L, c.hidden), np.float32), np.empty((L, c.hidden), np.float32)
    attn_post, mlp_post = np.ones((L, c.hidden), np.float32), np.ones((L, c.hidden), np.float32)
    bqkv = np.zeros((L, c.q_dim + 2 * c.kv_dim), np.float32)
    q_norm, k_norm = np.ones((L, c.head_dim), np.float32), np.ones((L, c.head_dim), np.float32)
    bo, sinks = np.zeros((L, c.hidden), np.float32), np.zeros((L, c.n_heads), np.float32)
    for i in range(L):
        p = f"model.layers.{i}."
        attn_norm[i] = vector(tensors[p + "input_layernorm.weight"])
        if c.post_norms:
            mlp_norm[i] = vector(tensors[p + "pre_feedforward_layernorm.weight"])
            attn_post[i] = vector(tensors[p + "post_attention_layernorm.weight"])
            mlp_post[i] = vector(tensors[p + "post_feedforward_layernorm.weight"])
        else:
            mlp_norm[i] = vector(tensors[p + "post_attention_layernorm.weight"])
        if c.attn_bias:
            bqkv[i] = np.concatenate(
                [vector(tensors[p + f"self_attn.{x}_proj.bias"]) for x in "qkv"]
            )
        if c.qk_norm:
            q_norm[i] = vector(tensors[p + "self_attn.q_norm.weight"])
            k_norm[i] = vector(tensors[p + "self_attn.k_norm.weight"])
        if c.o_bias:
            bo[i] = vector(tensors[p + "self_attn.o_proj.bias"])
        if c.sinks:
            sinks[i] = vector(tensors[p + "self_attn.sinks"])
    return LayerVectors(
        attn_norm=attn_norm,
        mlp_norm=mlp_norm,
        bqkv=bqkv,
        q_norm=q_norm,
        k_norm=k_norm,
        attn_post_norm=attn_post,
        mlp_post_norm=mlp_post,
        bo=bo,
        sinks=sinks,
    )


def pack_weights(config: ModelConfig, tensors: dict, dtype: str) -> DecodeWeights:
    """HF-named tensors -> DecodeWeights, filling preallocated stacks layer by layer (no full-size
    temporaries)."""
    c = config
    L, qkv_dim = c.n_layers, c.q_dim + 2 * c.kv_dim
    ffn = 0 if c.moe else c.ffn  # the dense MLP's rows
    store = _STORAGE[dtype]
    # matrices line-aligned: each row then starts on a line (`simd_memory`)
    wqkv = aligned_empty((L, qkv_dim, c.hidden), store)
    wo = aligned_empty((L, c.hidden, c.q_dim), store)
    wgu = aligned_empty((L, 2 * ffn, c.hidden), store)
    wd = aligned_empty((L, c.hidden if ffn else 0, ffn), store)
    qkv_scale, o_scale = np.empty((L, qkv_dim), np.float32), np.empty((L, c.hidden), np.float32)
    gu_scale = np.empty((L, 2 * ffn), np.float32)
    d_scale = np.empty((L, c.hidden if ffn else 0), np.float32)
    stacks = {
        "wqkv": wqkv,
        "qkv_scale": qkv_scale,
        "wo": wo,
        "o_scale": o_scale,
        "wgu": wgu,
        "gu_scale": gu_scale,
        "wd": wd,
        "d_scale": d_scale,
    }
    for i in range(L):
        p = f"model.layers.{i}."
        for name, stack, scales, lo, hi in layer_layout(c):
            stacks[stack][i, lo:hi], stacks[scales][i, lo:hi] = matrix(
                tensors[p + name + ".weight"], dtype
            )
    vectors = layer_vectors(c, tensors)
    experts = _pack_experts(c, tensors, dtype) if c.moe else None
    embed, embed_scale = matrix(tensors["model.embed_tokens.weight"], dtype)
    if c.tie_embeddings or "lm_head.weight" not in tensors:
        lm_head, lm_scale = embed, embed_scale
    else:
        lm_head, lm_scale = matrix(tensors["lm_head.weight"], dtype)
    return DecodeWeights(
        embed=embed,
        embed_scale=embed_scale,
        attn_norm=vectors.attn_norm,
        wqkv=wqkv,
        qkv_scale=qkv_scale,
        bqkv=vectors.bqkv,
        q_norm=vectors.q_norm,
        k_norm=vectors.k_norm,
        wo=wo,
        o_scale=o_scale,
        bo=vectors.bo,
        sinks=vectors.sinks,
        mlp_norm=vectors.mlp_norm,
        attn_post_norm=vectors.attn_post_norm,
        mlp_post_norm=vectors.mlp_post_norm,
        wgu=wgu,
        gu_scale=gu_scale,
        wd=wd,
        d_scale=d_scale,
        final_norm=vector(tensors["model.norm.weight"]),
        lm_head=lm_head,
        lm_scale=lm_scale,
        experts=experts,
    )


def _pack_experts(c: ModelConfig, tensors: dict, dtype: str) -> ExpertWeights:
    """ExpertWeights in `dtype`, filled expert by expert."""
    L, E, store = c.n_layers, c.n_experts, _STORAGE[dtype]
    stacks = {
        "wgu": aligned_empty((L, E, 2 * c.ffn, c.hidden), store),
        "gu_scale": np.empty((L, E, 2 * c.ffn), np.float32),
        "wd": aligned_empty((L, E, c.hidden, c.ffn), store),
        "d_scale": np.empty((L, E, c.hidden), np.float32),
    }
    for i in range(L):
        for e in range(E):
            for name, stack, scales, lo, hi in expert_layout(c, e):
                stacks[stack][i, e, lo:hi], stacks[scales][i, e, lo:hi] = matrix(
                    tensors[f"model.layers.{i}.{name}.weight"], dtype
                )
    return ExpertWeights(**vars(expert_vectors(c, tensors)), **stacks)


def weight_bytes_per_token(config: ModelConfig, w: DecodeWeights, dtype: str) -> int:
    """Weight bytes one batch-1 decode step reads: every weight but the embedding table, one
    embedding row, and the full lm_head (read in full even when it is the tied embedding table);
    int8 row scales included; of a mixture of experts, the experts a token is routed to."""
    arrays = [w.attn_norm, w.wqkv, w.wo, w.mlp_norm, w.wgu, w.wd, w.final_norm, w.lm_head]
    arrays += [w.bqkv] if config.attn_bias else []
    arrays += [w.bo] if config.o_bias else []
    arrays += [w.sinks] if config.sinks else []
    arrays += [w.q_norm, w.k_norm] if config.qk_norm else []
    arrays += [w.attn_post_norm, w.mlp_post_norm] if config.post_norms else []
    arrays += [w.qkv_scale, w.o_scale, w.gu_scale, w.d_scale, w.lm_scale] if dtype == "int8" else []
    embed_row = w.embed[0].nbytes + (w.embed_scale[0].nbytes if dtype == "int8" else 0)
    return sum(a.nbytes for a in arrays) + embed_row + _expert_bytes(config, w.experts, dtype)


def _expert_bytes(c: ModelConfig, x: ExpertWeights | None, dtype: str) -> int:
    """A step's expert bytes: every router, and the n_experts_used experts it routes to a layer
    (with their biases)."""
    if x is None:
        return 0
    arrays = [x.wgu, x.wd] + ([x.gu_scale, x.d_scale] if dtype == "int8" else [])
    return expert_vector_bytes(c, x) + sum(a.nbytes for a in arrays) * c.n_experts_used // (
        c.n_experts
    )


def routed_expert_bytes(c: ModelConfig, x: ExpertWeights | None, dtype: str) -> int:
    """Bytes of every layer's every expert, the part of a step that routing chooses (matrices,
    int8 row scales, biases): a layer reads n_experts_used of its experts a row, the union of its
    rows' in a k-row pass (`ModelRunner.bytes_per_pass`). 0 for a dense model."""
    if x is None:
        return 0
    arrays = [x.wgu, x.wd] + ([x.gu_scale, x.d_scale] if dtype == "int8" else [])
    return sum(a.nbytes for a in arrays) + routed_bias_bytes(c, x)


def routed_bias_bytes(c: ModelConfig, x: ExpertWeights) -> int:
    """Bytes of every expert's biases (gpt-oss); 0 where experts have none."""
    return x.gu_bias.nbytes + x.d_bias.nbytes if c.expert_bias else 0


def expert_vector_bytes(c: ModelConfig, x: ExpertWeights) -> int:
    """A step's bytes of a mixture of experts' vectors: every router (and its bias), and the
    biases of the n_experts_used experts it routes to a layer."""
    if not c.expert_bias:
        return x.router.nbytes
    routed = (x.gu_bias.nbytes + x.d_bias.nbytes) * c.n_experts_used // c.n_experts
    return x.router.nbytes + x.router_bias.nbytes + routed
