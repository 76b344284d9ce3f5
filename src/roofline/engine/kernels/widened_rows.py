"""A token's embedding row as float32, in each pass. The per-element kernels are `matrices`'
(`widen`) and `block_simd`'s (stored rows), so a row here equals the decode kernels' view of it bit
for bit.
"""

from __future__ import annotations

from numba.extending import overload

from roofline.engine.kernels import block_simd
from roofline.engine.kernels.matrices import OVERLOAD_OPTIONS, is_stored_rows, widen


def embed_into(embed, embed_scale, token, x, r):
    """x[r] = the embedding row of `token` as float32."""
    raise NotImplementedError


@overload(embed_into, jit_options=OVERLOAD_OPTIONS)
def _embed_into_overload(embed, embed_scale, token, x, r):
    if is_stored_rows(embed):

        def stored(embed, embed_scale, token, x, r):  # embed_scale: block_simd.StoredCodes
            n, off = x.shape[1], token * embed.shape[1]
            codes, formats = embed_scale.codes, embed_scale.formats
            block_simd.stored_row(embed, off, codes[token], formats, n, x, r * n)

        return stored

    def plain(embed, embed_scale, token, x, r):
        s = embed_scale[token]
        for i in range(x.shape[1]):
            x[r, i] = widen(embed[token, i]) * s

    return plain
