"""A weight matrix as the decode kernels see it: rows W (out, n_in), one value per row beside them.

    float32, bf16 bits (uint16), int8   the value is the row's float32 scale (1 unless int8)
    stored rows (uint8)                 W (out, stride): each row's bytes as the file stores them
                                        (block_formats); the value is the row's format code
                                        (uint8); n_in is the activations' width

Stacks over layers add a leading axis to both. numba specialises on the dtypes: `matvec` and
`embed_into` have one body per kind; stored rows go through `block_simd` (widened in registers,
then the float32 order).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from roofline import simd
from roofline.engine import block_simd

# fastmath lets LLVM vectorise element-wise loops; reductions take their order from `simd` instead.
# error_model="numpy": float division without Python's zero check, which would block vectorisation.
_JIT = dict(fastmath=True, cache=True, nogil=True, error_model="numpy")
_OVERLOAD = dict(fastmath=True, nogil=True, error_model="numpy")  # the same flags, for overloads


def _stored(w) -> bool:
    return isinstance(w, types.Array) and w.dtype == types.uint8


@intrinsic
def _f32_from_bf16_bits(typingctx, bits):
    """bf16 bits (uint16) -> float32: zero-extend, shift into the high half, reinterpret."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        wide = builder.zext(args[0], ir.IntType(32))
        return builder.bitcast(builder.shl(wide, ir.Constant(ir.IntType(32), 16)), ir.FloatType())

    return types.float32(types.uint16), codegen


def widen(w):
    """A weight element as float32 (a stub; the jitted versions are the overloads below)."""
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


@njit(**_JIT)
def _store(out, r, o, d, s, accumulate):
    """out[r, o] = d s, or += d s: the product and the sum in one place, so that every caller (1
    to 4 rows) compiles them alike (fastmath may fuse them into one fma: then everywhere)."""
    if accumulate:
        out[r, o] += d * s
    else:
        out[r, o] = d * s


def matvec(w, scale, x, out, o0, o1, accumulate):
    """out[r, o] (+)= scale[o] sum_i w[o, i] x[r, i], rows o in [o0, o1) (overloads below)."""
    raise NotImplementedError


# Weight rows are read this many bytes ahead with software prefetches: the hardware prefetchers
# left one-row passes waiting on memory, most of all over stored blocks, whose widening is several
# instructions per 16 weights, so a core asks for its next bytes slowly (a profile put a third of
# a pass on the instruction after the block load). 2, 4 and 8 KiB measured alike (docs/measured.md).
PREFETCH_BYTES = 4096


@njit(**_JIT)
def _prefetch_row(w, o, row_bytes):
    """Hint the bytes PREFETCH_BYTES past the start of row o (rows of row_bytes), one row's worth,
    within w."""
    ahead = o * row_bytes + PREFETCH_BYTES
    for b in range(ahead, min(ahead + row_bytes, w.size * w.itemsize), 64):
        simd.prefetch(w, b)


@overload(matvec, jit_options=_OVERLOAD)
def _matvec_overload(w, scale, x, out, o0, o1, accumulate):
    if _stored(w):

        def stored(w, scale, x, out, o0, o1, accumulate):  # scale: the rows' format codes
            # row groups outside, weight rows inside: each group's code runs over the whole range
            # (its rows stay in L1/L2 for the next group), rather than switching code every row;
            # the first sweep over the range reads from memory, so it prefetches ahead
            fmt, stride, k, n, row = scale, x.shape[1], x.shape[0], x.shape[1], w.shape[1]
            one = np.float32(1.0)
            r = 0
            while r + 4 <= k:
                for o in range(o0, o1):
                    if r == 0:
                        _prefetch_row(w, o, row)
                    d = block_simd.stored_dot_rows(w, o * row, fmt[o], x, r * stride, stride, n, 4)
                    for i in range(4):
                        _store(out, r + i, o, d[i], one, accumulate)
                r += 4
            if k - r == 3:
                for o in range(o0, o1):
                    if r == 0:
                        _prefetch_row(w, o, row)
                    d3 = block_simd.stored_dot_rows(w, o * row, fmt[o], x, r * stride, stride, n, 3)
                    for i in range(3):
                        _store(out, r + i, o, d3[i], one, accumulate)
            elif k - r == 2:
                for o in range(o0, o1):
                    if r == 0:
                        _prefetch_row(w, o, row)
                    d2 = block_simd.stored_dot_rows(w, o * row, fmt[o], x, r * stride, stride, n, 2)
                    for i in range(2):
                        _store(out, r + i, o, d2[i], one, accumulate)
            elif k - r == 1:
                for o in range(o0, o1):
                    if r == 0:
                        _prefetch_row(w, o, row)
                    d1 = block_simd.stored_dot_rows(w, o * row, fmt[o], x, r * stride, stride, n, 1)
                    _store(out, r, o, d1[0], one, accumulate)

        return stored

    def plain(w, scale, x, out, o0, o1, accumulate):
        # as for stored rows: groups of four x rows outside, weight rows inside, so a group's x
        # rows stay in L1 while the range's weight rows (a unit: tens of KB) come from L2 after
        # the first group (the one that prefetches); weight rows outside re-read every x row per
        # weight row, which past 4-8 rows no longer fit L1 beside the streamed weights
        n, stride, k, r = w.shape[1], x.shape[1], x.shape[0], 0
        row_bytes = n * w.itemsize
        while r + 4 <= k:
            for o in range(o0, o1):
                if r == 0:
                    _prefetch_row(w, o, row_bytes)
                d = simd.dot_rows(w, o * n, x, r * stride, stride, n, 4)
                for i in range(4):
                    _store(out, r + i, o, d[i], scale[o], accumulate)
            r += 4
        if k - r == 3:
            for o in range(o0, o1):
                if r == 0:
                    _prefetch_row(w, o, row_bytes)
                d3 = simd.dot_rows(w, o * n, x, r * stride, stride, n, 3)
                for i in range(3):
                    _store(out, r + i, o, d3[i], scale[o], accumulate)
        elif k - r == 2:
            for o in range(o0, o1):
                if r == 0:
                    _prefetch_row(w, o, row_bytes)
                d2 = simd.dot_rows(w, o * n, x, r * stride, stride, n, 2)
                for i in range(2):
                    _store(out, r + i, o, d2[i], scale[o], accumulate)
        elif k - r == 1:
            for o in range(o0, o1):
                if r == 0:
                    _prefetch_row(w, o, row_bytes)
                _store(out, r, o, simd.dot(w, o * n, x, r * stride, n), scale[o], accumulate)

    return plain


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
