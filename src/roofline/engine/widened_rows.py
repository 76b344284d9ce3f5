"""Whole rows as float32: a token's embedding row (each decode pass), many tokens' (the prefill),
and every row of a stored matrix (the prefill's GEMM operand). The per-element kernels are
`matrices`' (`widen`) and `block_simd`'s (stored rows), so a row here equals the decode kernels'
view of it bit for bit.
"""

from __future__ import annotations

from numba import njit
from numba.extending import overload

from roofline.engine import block_simd
from roofline.engine.matrices import _JIT, _OVERLOAD, _stored, widen


def embed_into(embed, embed_scale, token, x, r):
    """x[r] = the embedding row of `token` as float32."""
    raise NotImplementedError


@overload(embed_into, jit_options=_OVERLOAD)
def _embed_into_overload(embed, embed_scale, token, x, r):
    if _stored(embed):

        def stored(embed, embed_scale, token, x, r):  # embed_scale: the rows' format codes
            n = x.shape[1]
            block_simd.stored_row(embed, token * embed.shape[1], embed_scale[token], n, x, r * n)

        return stored

    def plain(embed, embed_scale, token, x, r):
        s = embed_scale[token]
        for i in range(x.shape[1]):
            x[r, i] = widen(embed[token, i]) * s

    return plain


@njit(**_JIT)
def stored_rows_f32(w, fmt, out):
    """out (rows, n_in) float32 = every row of a stored matrix widened (the prefill's GEMM operand).
    One thread (nogil: callers split rows over Python threads). Not a numba parallel region: a
    process whose first OpenMP region is numba's ran torch's 2-thread GEMMs to other bits than one
    whose first is torch's, and the fp32 path's first is torch's."""
    n = out.shape[1]
    for o in range(w.shape[0]):
        block_simd.stored_row(w, o * w.shape[1], fmt[o], n, out, o * n)


@njit(**_JIT)
def embed_rows(embed, embed_scale, tokens, x):
    """x[r] = the embedding row of tokens[r], for every r."""
    for r in range(tokens.shape[0]):
        embed_into(embed, embed_scale, tokens[r], x, r)
