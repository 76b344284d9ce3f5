"""The weights as the file stores them, in the decode kernels' stacks (dtype `stored`).

Every matrix keeps its file format row by row (block_formats: GGUF blocks, F32/F16/BF16 elements):
a stack is data (L, rows, stride) uint8, each row's bytes as stored, stride = the longest row of the
stack (a Q4_K_M file mixes Q4_K and Q6_K rows in one stack), and beside it, where the other formats
keep their row scales, the format code of each row (L, rows) uint8 (`matrices`). Nothing is widened
on load: the kernels widen blocks in registers, and the prefill one matrix at a time into a scratch
buffer.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from roofline.engine.loading.block_formats import BLOCK_FORMATS
from roofline.engine.loading.checkpoint import FLOAT_DTYPES, is_shape_only
from roofline.engine.loading.config import ModelConfig
from roofline.engine.loading.weights import (
    DecodeWeights,
    ExpertWeights,
    expert_layout,
    expert_vector_bytes,
    expert_vectors,
    layer_layout,
    layer_vectors,
    routed_bias_bytes,
    vector,
)
from roofline.errors import UserError
from roofline.simd_memory import aligned_empty


def stored_rows(checkpoint, name: str) -> tuple[str, np.ndarray]:
    """(format name, uint8 rows (out, bytes per row)) of one matrix as the checkpoint stores it."""
    if name in checkpoint.raw:
        fmt, blocks = checkpoint.raw[name]
    else:
        t = checkpoint.tensors[name]
        fmt = checkpoint.stored_format.get(name) or FLOAT_DTYPES.get(t.dtype, str(t.dtype))
        blocks = np.ascontiguousarray(t).view(np.uint8).reshape(t.shape[0], -1)
    if fmt not in BLOCK_FORMATS:
        raise UserError(
            f"{checkpoint.path}: tensor {name} is stored as {fmt}, which the kernels cannot "
            f"compute on; supported: {', '.join(BLOCK_FORMATS)} (or run --dtype fp32)"
        )
    return fmt, blocks


def _stack(parts: list[list[tuple[str, np.ndarray]]]) -> tuple[np.ndarray, np.ndarray]:
    """Layers of [(format, rows)] pieces -> (data (L, rows, stride), codes (L, rows)), uint8 (a
    stack of no rows: stride 0); data starts on a cache line (`aligned_empty`: F32 rows of a
    multiple of 16 weights then all do), the bytes past a shorter row zero."""
    stride = max((rows.shape[1] for layer in parts for _, rows in layer), default=0)
    n_rows = sum(rows.shape[0] for _, rows in parts[0])
    data = aligned_empty((len(parts), n_rows, stride), np.uint8)
    data[...] = 0
    codes = np.empty((len(parts), n_rows), np.uint8)
    for i, layer in enumerate(parts):
        r = 0
        for fmt, rows in layer:
            data[i, r : r + rows.shape[0], : rows.shape[1]] = rows
            codes[i, r : r + rows.shape[0]] = BLOCK_FORMATS[fmt].code
            r += rows.shape[0]
    return data, codes


def _single(piece: tuple[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    data, codes = _stack([[piece]])
    return data[0], codes[0]


def expanded(checkpoint):
    """The checkpoint with every tensor float32 and stored as F32 (dtype fp32: every weight
    expanded, on the stored kernels' F32 rows). Its quantized tensors must be dequantized
    already (`load_checkpoint`'s default)."""
    if any(is_shape_only(t) for t in checkpoint.tensors.values()):
        raise ValueError("expanded() needs a checkpoint loaded with dequantize=True")
    tensors = {n: np.asarray(t, np.float32) for n, t in checkpoint.tensors.items()}
    return replace(checkpoint, tensors=tensors, raw={}, stored_format={})


def pack_stored(config: ModelConfig, checkpoint) -> DecodeWeights:
    """DecodeWeights whose matrices are stored rows (see the module doc); beside each, its rows'
    format codes."""
    c = config
    L = c.n_layers
    pieces: dict[str, list] = {k: [] for k in ("wqkv", "wo", "wgu", "wd")}  # [layer][piece]
    t = checkpoint.tensors
    for i in range(L):
        p = f"model.layers.{i}."
        for stack in pieces.values():
            stack.append([])
        for name, stack, _, _, _ in layer_layout(c):
            pieces[stack][i].append(stored_rows(checkpoint, p + name + ".weight"))
    vectors = layer_vectors(c, t)
    (wqkv, qkv_fmt), (wo, o_fmt) = _stack(pieces["wqkv"]), _stack(pieces["wo"])
    (wgu, gu_fmt), (wd, d_fmt) = _stack(pieces["wgu"]), _stack(pieces["wd"])
    experts = _stored_experts(c, checkpoint) if c.moe else None
    embed, embed_fmt = _single(stored_rows(checkpoint, "model.embed_tokens.weight"))
    if c.tie_embeddings or "lm_head.weight" not in t:
        lm_head, lm_fmt = embed, embed_fmt
    else:
        lm_head, lm_fmt = _single(stored_rows(checkpoint, "lm_head.weight"))
    norm = vector(t["model.norm.weight"])
    return DecodeWeights(
        embed=embed,
        embed_scale=embed_fmt,
        attn_norm=vectors.attn_norm,
        wqkv=wqkv,
        qkv_scale=qkv_fmt,
        bqkv=vectors.bqkv,
        q_norm=vectors.q_norm,
        k_norm=vectors.k_norm,
        wo=wo,
        o_scale=o_fmt,
        bo=vectors.bo,
        sinks=vectors.sinks,
        mlp_norm=vectors.mlp_norm,
        attn_post_norm=vectors.attn_post_norm,
        mlp_post_norm=vectors.mlp_post_norm,
        wgu=wgu,
        gu_scale=gu_fmt,
        wd=wd,
        d_scale=d_fmt,
        final_norm=norm,
        lm_head=lm_head,
        lm_scale=lm_fmt,
        experts=experts,
    )


def _stored_experts(c: ModelConfig, checkpoint) -> ExpertWeights:
    """ExpertWeights of stored rows: a stack over layers and experts (L, E, rows, stride), one
    stride for all; the routers and biases float32 (llama.cpp keeps them F32)."""
    L, E = c.n_layers, c.n_experts
    pieces: dict[str, list] = {"wgu": [], "wd": []}  # [layer * E + expert][piece]
    for i in range(L):
        for e in range(E):
            for stack in pieces.values():
                stack.append([])
            for name, stack, _, _, _ in expert_layout(c, e):
                rows = stored_rows(checkpoint, f"model.layers.{i}.{name}.weight")
                pieces[stack][-1].append(rows)
    (wgu, gu_fmt), (wd, d_fmt) = _stack(pieces["wgu"]), _stack(pieces["wd"])
    return ExpertWeights(
        **vars(expert_vectors(c, checkpoint.tensors)),
        wgu=wgu.reshape(L, E, *wgu.shape[1:]),
        gu_scale=gu_fmt.reshape(L, E, -1),
        wd=wd.reshape(L, E, *wd.shape[1:]),
        d_scale=d_fmt.reshape(L, E, -1),
    )


def _row_bytes(codes: np.ndarray, n_in: int) -> int:
    """Bytes of rows of n_in weights with these format codes, as stored (not the stride they are
    padded to)."""
    by_code = {f.code: f.row_bytes(n_in) for f in BLOCK_FORMATS.values()}
    values, counts = np.unique(codes, return_counts=True)
    return int(sum(by_code[int(v)] * int(k) for v, k in zip(values, counts)))


def stored_routed_expert_bytes(config: ModelConfig, w: DecodeWeights) -> int:
    """`weights.routed_expert_bytes` of stored experts: their rows as stored, and their biases."""
    x, c = w.experts, config
    if x is None:
        return 0
    both = _row_bytes(x.gu_scale, c.hidden) + _row_bytes(x.d_scale, c.ffn)
    return both + routed_bias_bytes(c, x)


def stored_bytes_per_token(config: ModelConfig, w: DecodeWeights) -> int:
    """Weight bytes one batch-1 decode step reads: every matrix row as stored, the norms (and
    biases), one embedding row, the whole lm_head (the embedding table itself when tied); of a
    mixture of experts, the experts a token is routed to."""
    c = config
    vectors = [w.attn_norm, w.mlp_norm, w.final_norm]
    vectors += [w.bqkv] if c.attn_bias else []
    vectors += [w.bo] if c.o_bias else []
    vectors += [w.sinks] if c.sinks else []
    vectors += [w.q_norm, w.k_norm] if c.qk_norm else []
    vectors += [w.attn_post_norm, w.mlp_post_norm] if c.post_norms else []
    matrices = (
        _row_bytes(w.qkv_scale, c.hidden)
        + _row_bytes(w.o_scale, c.q_dim)
        + _row_bytes(w.gu_scale, c.hidden)
        + _row_bytes(w.d_scale, c.ffn)
        + _row_bytes(w.lm_scale, c.hidden)
    )
    embed_row = _row_bytes(w.embed_scale[:1], c.hidden)
    x = w.experts
    if x is not None:  # every router, and the n_experts_used experts a token is routed to
        both = _row_bytes(x.gu_scale, c.hidden) + _row_bytes(x.d_scale, c.ffn)
        matrices += expert_vector_bytes(c, x) + both * c.n_experts_used // c.n_experts
    return sum(a.nbytes for a in vectors) + matrices + embed_row
