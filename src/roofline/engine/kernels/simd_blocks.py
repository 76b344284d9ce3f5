"""A block of four weight rows against up to four activation rows, summed and stored in place, as
LLVM IR: `simd.dot_block`'s sums, then out (+)= scale x sum written one x row at a time.

After the fold, a block's sixteen sums sit in one vector. Taken out one by one, each cost a
shuffle or two and a scalar multiply and store, on the port the FMAs share; packed x row by x row
instead, an x row's four sums (adjacent outputs) leave as one 4-lane piece and go to memory in one
multiply (or fused multiply-add) and one store. The arithmetic is `matrices.store_sums`'s: d s, or
out + d s rounded once.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from roofline.simd import (
    F32,
    I64,
    KEEP_FLAGS,
    WEIGHT_DTYPES,
    block_operands,
    emit_finish,
    emit_main,
    flat_pointer,
    fma,
    fold_packed,
    is_contiguous,
    vec_type,
)

_ROWS = 4  # weight rows of a block: one 4-lane piece per x row


def _literal_in(t, lo: int, hi: int) -> bool:
    return isinstance(t, types.IntegerLiteral) and lo <= t.literal_value <= hi


@intrinsic
def dot_block_into(
    typingctx, a, ia, a_stride, b, ib, b_stride, n, a_rows, b_rows, hint, lines, per, out, io,
    o_stride, scale, so, accumulate,
):  # fmt: skip
    """For w < 4, r < b_rows (a literal 1..4), d(w, r) = `simd.dot_block`'s sum of weight row w
    and x row r (same arguments, a_rows the literal 4), s_w = scale.flat[so + w] (scale None: 1):

        out.flat[io + r o_stride + w] = d(w, r) s_w          (accumulate false)
        out.flat[io + r o_stride + w] = fma(d(w, r), s_w, out.flat[...])   (accumulate true)
    """
    ints = all(
        isinstance(t, types.Integer)
        for t in (ia, a_stride, ib, b_stride, n, hint, lines, io, o_stride, so)
    )
    shape = _literal_in(a_rows, _ROWS, _ROWS) and _literal_in(b_rows, 1, 4)
    scaled = scale is types.none or is_contiguous(scale, (types.float32,))
    arrays = (
        is_contiguous(a, WEIGHT_DTYPES)
        and is_contiguous(b, (types.float32,))
        and is_contiguous(out, (types.float32,))
    )
    if not (ints and shape and _literal_in(per, 1, 4) and scaled and arrays):
        return None
    m_b = b_rows.literal_value

    def codegen(context, builder, sig, args):
        loads_a, loads_b, hints, n_v = block_operands(context, builder, sig, args, _ROWS, m_b)
        joined, n64, loads_a, step = emit_main(builder, n_v, loads_a, loads_b, False, hints, 1)
        out_ty, io_ty, os_ty, sc_ty, so_ty, acc_ty = sig.args[12:]
        base = flat_pointer(context, builder, out_ty, args[12], io_ty, args[13])
        o_stride = context.cast(builder, args[14], os_ty, types.intp)
        resume = context.cast(builder, args[17], acc_ty, types.boolean)
        piece = vec_type(_ROWS)
        if sc_ty is types.none:
            s_piece, s_each = ir.Constant(piece, [1.0] * _ROWS), [ir.Constant(F32, 1.0)] * _ROWS
        else:
            sp = flat_pointer(context, builder, sc_ty, args[15], so_ty, args[16])
            s_piece = builder.load(builder.bitcast(sp, piece.as_pointer()), align=4)
            s_each = [builder.load(builder.gep(sp, [ir.Constant(I64, w)])) for w in range(_ROWS)]

        def put(ptr, d, s):
            """*ptr = d s, or fma(d, s, *ptr) (vectors or scalars alike)."""
            with builder.if_else(resume) as (add, assign):
                with add:
                    builder.store(fma(builder, d, s, builder.load(ptr, align=4)), ptr, align=4)
                with assign:
                    builder.store(builder.fmul(d, s, flags=KEEP_FLAGS), ptr, align=4)

        def row(r):
            return builder.gep(base, [builder.mul(o_stride, ir.Constant(I64, r))])

        whole = builder.icmp_signed("==", n64, n_v)
        with builder.if_else(whole) as (packed_path, rest_path):
            with packed_path:  # no middle or tail: every sum is final after the fold
                order = [(r, w) for r in range(m_b) for w in range(_ROWS)]
                where = {}  # (r, w) -> (vector, lane), first lane holding it
                for v, groups in fold_packed(builder, [joined[w * m_b + r] for r, w in order]):
                    for lane, k in enumerate(groups):
                        where.setdefault(order[k], (v, lane))
                for r in range(m_b):
                    v = where[(r, 0)][0]
                    lanes = [where[(r, w)][1] for w in range(_ROWS)]
                    pick = ir.Constant(vec_type(_ROWS, ir.IntType(32)), lanes)
                    d = builder.shuffle_vector(v, v, pick)
                    put(builder.bitcast(row(r), piece.as_pointer()), d, s_piece)
            with rest_path:  # `simd.dot_block`'s sums, stored one by one
                totals = emit_finish(builder, n_v, n64, joined, loads_a, loads_b, step)
                for w, per_w in enumerate(totals):
                    for r, total in enumerate(per_w):
                        put(builder.gep(row(r), [ir.Constant(I64, w)]), total, s_each[w])
        return context.get_dummy_value()

    sig = types.none(
        a, ia, a_stride, b, ib, b_stride, n, a_rows, b_rows, hint, lines, per, out, io, o_stride,
        scale, so, accumulate,
    )  # fmt: skip
    return sig, codegen
