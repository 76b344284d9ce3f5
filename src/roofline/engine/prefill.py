"""One prefill chunk of a prompt: torch GEMMs for the projections, torch's blocked attention over
the cached K/V, the decode kernels' row-wise pieces for everything else.

Chunks are cut at fixed positions (prefill_chunks.py), so every caller runs the same chunks. A chunk
[p, p + T) attends to cached positions 0..p-1 and causally to itself; its K/V go into the cache
before the next chunk. Per layer, on T rows (x: the residual stream; fused weight GEMMs):

    h = RMSNorm(x);  qkv = h [Wq; Wk; Wv]^T
    q, k = RoPE(qk-norm(q, k)) (+bias); K/V -> cache    (decode's own `qkv_to_cache`)
    x += Attention(q, K[0..p+T), V[0..p+T)) Wo^T       (scaled_dot_product_attention)
    h = RMSNorm(x);  [g; u] = h [Wg; Wu]^T;  x += (SiLU(g) u) Wd^T
    logits = RMSNorm(x[-1]) W_lm^T                      (decode's dot order: `matvec_rows`)

Element-wise steps run in one thread (a multi-threaded op ends at a barrier that, on a shared
machine, can wait a time slice for a descheduled thread); GEMMs and attention use torch's threads.
GEMMs are float32: bf16/int8 matrices are widened one at a time (a memory pass per chunk, cheap next
to the GEMM; bf16 GEMMs are slow on CPUs without bf16 instructions). Attention memory grows with T
times the context, not its square.
"""

from __future__ import annotations

import itertools
import math
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F

from roofline.engine import layer_kernels, widened_rows
from roofline.engine.block_formats import BLOCK_FORMATS
from roofline.engine.config import ModelConfig
from roofline.engine.kv_cache import KEY_BLOCK
from roofline.engine.threads import TorchLayerTrial
from roofline.engine.weights import DecodeWeights

__all__ = ["attention", "keys_for_attention", "prefill_chunk"]


_F32_CODE = BLOCK_FORMATS["F32"].code


def _torch(a: np.ndarray) -> torch.Tensor:
    """A torch view of a numpy array (bf16 bits, stored as uint16, viewed as torch.bfloat16)."""
    return (
        torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        if a.dtype == np.uint16
        else torch.from_numpy(a)
    )


class _Widener:
    """float32 (out, in) views of one packed matrix at a time: fp32 as stored, bf16 and int8 widened
    (int8 times its row scales) and stored rows (`widened_rows`) widened by the decode kernels' own
    loaders, into a scratch buffer that is reused for every matrix; F32 rows are read in place. Its
    Python threads also split other row-wise kernels (`split_rows`)."""

    def __init__(self, w: DecodeWeights, c: ModelConfig):
        self.stored = w.wqkv.dtype == np.uint8
        self.narrow = w.wqkv.dtype != np.float32
        widths = (c.hidden, c.q_dim, c.hidden, c.ffn)
        sizes = [s.shape[1] * n for s, n in zip((w.wqkv, w.wo, w.wgu, w.wd), widths)]
        self._scratch = torch.empty(max(sizes) if self.narrow else 0, dtype=torch.float32)
        self._pool: ThreadPoolExecutor | None = None

    def split_rows(self, run, n: int) -> None:
        """run(a, b) for rows [a, b) of n, cut into torch's thread count of parts, each in a Python
        thread (the kernels release the GIL); a row's result does not depend on its part."""
        parts = torch.get_num_threads()
        if parts == 1:
            run(0, n)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(parts)
        cuts = [n * j // parts for j in range(parts + 1)]
        jobs = [self._pool.submit(run, a, b) for a, b in itertools.pairwise(cuts)]
        for job in jobs:
            job.result()

    def _widen_stored(self, rows: np.ndarray, codes: np.ndarray, out: np.ndarray) -> None:
        self.split_rows(
            lambda a, b: widened_rows.stored_rows_f32(rows[a:b], codes[a:b], out[a:b]), len(rows)
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def layer(self, stack: np.ndarray, i: int, scales: np.ndarray, n_in: int) -> torch.Tensor:
        """Layer i of a stacked matrix as float32 (out, n_in)."""
        if self.stored:
            if stack.shape[2] == 4 * n_in and not np.any(scales[i] != _F32_CODE):
                # F32 rows are the float32 values themselves: read in place, not copied through
                # the widener every chunk (docs/measured.md)
                return torch.from_numpy(stack[i].view(np.float32))
            out = self._scratch[: stack.shape[1] * n_in].view(stack.shape[1], n_in)
            self._widen_stored(stack[i], scales[i], out.numpy())
            return out
        matrix, scale = stack[i], scales[i]
        t = _torch(matrix)
        if not self.narrow:
            return t
        out = self._scratch[: matrix.size].view(matrix.shape)
        if matrix.dtype == np.int8:
            return torch.mul(t, torch.from_numpy(scale)[:, None], out=out)
        return out.copy_(t)


def embeddings(w: DecodeWeights, token_ids: np.ndarray) -> np.ndarray:
    """(T, hidden) float32 rows of the embedding table (widened, times their row scales)."""
    if w.embed.dtype == np.uint8:  # stored rows
        x = np.empty((token_ids.shape[0], w.attn_norm.shape[1]), np.float32)
        widened_rows.embed_rows(w.embed, w.embed_scale, token_ids, x)
        return x
    x = (
        w.embed[token_ids].astype(np.float32)
        if w.embed.dtype != np.uint16
        else (w.embed[token_ids].astype(np.uint32) << 16).view(np.float32)
    )
    x *= w.embed_scale[token_ids][:, None]
    return np.ascontiguousarray(x, dtype=np.float32)


def keys_for_attention(k_cache_layer: np.ndarray, end: int) -> torch.Tensor:
    """Keys of positions 0..end-1 of one slot's layer, (kv_heads, end, d), from the blocked,
    transposed cache (kv_heads, S / B, d, B): a copy (the cache is laid out for the decode kernels),
    made by numpy in one thread."""
    nb = -(-end // KEY_BLOCK)
    g, _, d, b = k_cache_layer.shape
    keys = np.ascontiguousarray(k_cache_layer[:, :nb].transpose(0, 1, 3, 2)).reshape(g, nb * b, d)
    return torch.from_numpy(keys)[:, :end]


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, mask: torch.Tensor | None
) -> torch.Tensor:
    """q (T, H, d) at positions start..start+T-1; k, v (G, S = start + T, d); query i sees keys
    0..start+i: the causal form when start == 0, else `mask` (T, S), 0 where a key is seen and -inf
    where not. Returns (T, H, d)."""
    d = q.shape[2]
    qh = q.transpose(0, 1)[None]
    if start == 0:
        out = F.scaled_dot_product_attention(
            qh, k[None], v[None], is_causal=True, scale=1.0 / math.sqrt(d), enable_gqa=True
        )
    else:
        out = F.scaled_dot_product_attention(
            qh, k[None], v[None], attn_mask=mask, scale=1.0 / math.sqrt(d), enable_gqa=True
        )
    return out[0].transpose(0, 1)


def causal_mask(start: int, T: int) -> torch.Tensor:
    """(T, start + T) float32: 0 where query i (at start + i) sees key t (t <= start + i), -inf
    elsewhere."""
    mask = torch.zeros(T, start + T)
    mask[:, start:] = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
    return mask


def prefill_chunk(
    config: ModelConfig,
    w: DecodeWeights,
    token_ids: np.ndarray,
    slot: int,
    start: int,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
    *,
    logits: bool = True,
    trial: TorchLayerTrial | None = None,
    pieces: list[tuple[int, int]] | None = None,
) -> np.ndarray | None:
    """Run token_ids (T,) at positions start..start+T-1 of `slot`, whose cache holds 0..start-1:
    k_cache (slots, layers, kv_heads, S / B, d, B), v_cache (slots, layers, kv_heads, S, d);
    cos/sin (positions, d / 2). Writes the chunk's K/V; returns the float32 logits (vocab,) of
    its last token (None when logits=False). Call under torch.inference_mode() with torch's thread
    count set. A `trial` (threads.py) sets each layer's thread count and gets its time; torch's
    ops here give the same bits on any thread count (a test checks), so it changes no result.

    `pieces` (default: one) cut the chunk into granule pieces [a, b): the GEMMs run over all rows,
    attention once per piece, over keys 0..b-1, as that piece alone would."""
    c = config
    T, end = token_ids.shape[0], start + token_ids.shape[0]
    qd, kvd, hidden, eps = c.q_dim, c.kv_dim, c.hidden, np.float32(c.rms_eps)
    widen = _Widener(w, c)
    x = embeddings(w, token_ids)
    h, qkv = np.empty((T, hidden), np.float32), np.empty((T, qd + 2 * kvd), np.float32)
    att, gu, act = (
        np.empty((T, qd), np.float32),
        np.empty((T, 2 * c.ffn), np.float32),
        np.empty((T, c.ffn), np.float32),
    )
    X, Hh, QKV, ATT, GU, ACT = (torch.from_numpy(a) for a in (x, h, qkv, att, gu, act))
    slots, positions = np.full(T, slot, dtype=np.int64), np.arange(start, end, dtype=np.int64)
    pieces = pieces or [(start, end)]
    if pieces[0][0] != start or pieces[-1][1] != end:
        raise ValueError(f"pieces {pieces} do not cover positions {start}..{end - 1}")
    masks = [causal_mask(a, b - a) if a else None for a, b in pieces]
    v_slot = torch.from_numpy(v_cache[slot])
    q = QKV[:, :qd].view(T, c.n_heads, c.head_dim)
    try:
        for i in range(c.n_layers):
            if trial is not None:
                n_threads = trial.threads_for_layer(i)
                if torch.get_num_threads() != n_threads:
                    torch.set_num_threads(n_threads)
                layer_started = time.perf_counter()
            layer_kernels.rms_norm(x, w.attn_norm[i], eps, h)
            torch.mm(Hh, widen.layer(w.wqkv, i, w.qkv_scale, hidden).T, out=QKV)
            layer_kernels.qkv_to_cache(
                qkv,
                w.bqkv[i],
                w.q_norm[i],
                w.k_norm[i],
                c.qk_norm,
                eps,
                c.n_heads,
                cos,
                sin,
                slots,
                positions,
                positions,
                i,
                k_cache,
                v_cache,
            )
            heads = att.reshape(T, c.n_heads, c.head_dim)
            for (a, b), mask in zip(pieces, masks):
                keys = keys_for_attention(k_cache[slot, i], b)
                heads[a - start : b - start] = attention(
                    q[a - start : b - start], keys, v_slot[i, :, :b], a, mask
                ).numpy()
            X.addmm_(ATT, widen.layer(w.wo, i, w.o_scale, qd).T)
            layer_kernels.rms_norm(x, w.mlp_norm[i], eps, h)
            torch.mm(Hh, widen.layer(w.wgu, i, w.gu_scale, hidden).T, out=GU)
            layer_kernels.silu_mul(gu, act)
            X.addmm_(ACT, widen.layer(w.wd, i, w.d_scale, c.ffn).T)
            if trial is not None:
                trial.record_layer(i, n_threads, time.perf_counter() - layer_started)
        if not logits:
            return None
        # the last row's logits in the decode's dot order (`matvec_rows`), the vocabulary split
        layer_kernels.rms_norm(x[-1:], w.final_norm, eps, h[:1])
        out = np.empty((1, c.vocab_size), np.float32)
        widen.split_rows(
            lambda a, b: layer_kernels.matvec_rows(w.lm_head, w.lm_scale, h[:1], out, a, b, False),
            c.vocab_size,
        )
        return out[0]
    finally:
        widen.close()
