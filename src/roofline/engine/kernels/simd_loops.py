"""The hot inner loops of the decode kernels, as LLVM IR: attention scores over key blocks
(`block_scores`), probability-weighted value rows (`weighted_rows`), the largest score of a row
(`vmax`) and the 16-lane SiLU (`silu_block`), each written out in one fixed order like
`roofline.simd`'s reductions.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from roofline.simd import (
    F32,
    I64,
    KEEP_FLAGS,
    LANES,
    ZERO16,
    are_float32_arrays,
    flat_pointer,
    fma,
    fold,
    vec_type,
)


def _vload16(builder, ptr):
    return builder.load(builder.bitcast(ptr, vec_type(LANES).as_pointer()), align=4)


def _splat16(builder, x):
    v = builder.insert_element(
        ir.Constant(vec_type(LANES), ir.Undefined), x, ir.Constant(ir.IntType(32), 0)
    )
    return builder.shuffle_vector(v, v, ir.Constant(vec_type(LANES, ir.IntType(32)), [0] * LANES))


@intrinsic
def silu_block(typingctx, gate_up, ig, iu, e, out, io):
    """out.flat[io + l] = SiLU(g_l) * u_l for 16 lanes, g_l = gate_up.flat[ig + l],
    u_l = gate_up.flat[iu + l], given e_l = exp(-|g_l|) (e: 16 float32):

        SiLU(g) u = g u / (1 + e) for g >= 0,  g u e / (1 + e) for g < 0

    The quotient is an exact division on every ISA. (It was VRCP14PS's estimate refined once on
    AVX-512, which rounds apart from AVX2's division: AVX2 and AVX-512 logits differed in 80-90% of
    their values, up to 3.3e-7 relative; the division costs ~10 us a token row.)
    """
    if not are_float32_arrays(gate_up, e, out):
        return None

    def codegen(context, builder, sig, args):
        ga_ty, ig_ty, iu_ty, e_ty, out_ty, io_ty = sig.args
        v16 = vec_type(LANES)
        g = _vload16(builder, flat_pointer(context, builder, ga_ty, args[0], ig_ty, args[1]))
        u = _vload16(builder, flat_pointer(context, builder, ga_ty, args[0], iu_ty, args[2]))
        e0 = context.get_constant(types.intp, 0)
        ex = _vload16(builder, flat_pointer(context, builder, e_ty, args[3], types.intp, e0))
        one = ir.Constant(v16, [1.0] * LANES)
        gu = builder.fmul(g, u, flags=KEEP_FLAGS)
        d = builder.fadd(ex, one, flags=KEEP_FLAGS)
        num = builder.select(
            builder.fcmp_ordered(">=", g, ZERO16), gu, builder.fmul(gu, ex, flags=KEEP_FLAGS)
        )
        q = builder.fdiv(num, d, flags=KEEP_FLAGS)  # correctly rounded on every ISA
        dst = builder.bitcast(
            flat_pointer(context, builder, out_ty, args[4], io_ty, args[5]), v16.as_pointer()
        )
        builder.store(q, dst, align=4)
        return context.get_dummy_value()

    return types.none(gate_up, ig, iu, e, out, io), codegen


@intrinsic
def vmax(typingctx, a, ia, n):
    """max_{i < n} a.flat[ia + i] (float32, C-contiguous a; -inf when n is 0), four 16-lane maxima
    over the 64-steps, then the rest one by one. A maximum is one of its inputs whatever the order,
    so this equals a scalar loop's (with NaN-free inputs; a -0 and a +0 may come out either way,
    which no difference s - max can tell); the scalar loop, one compare after another, held much
    of a verify pass's softmax (docs/measured.md)."""
    if not (
        are_float32_arrays(a) and isinstance(ia, types.Integer) and isinstance(n, types.Integer)
    ):
        return None

    def codegen(context, builder, sig, args):
        base = flat_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        n_v = context.cast(builder, args[2], sig.args[2], types.intp)
        v16 = vec_type(LANES)

        def biggest(x, y):
            return builder.select(builder.fcmp_ordered(">", y, x), y, x)

        low = ir.Constant(v16, [float("-inf")] * LANES)
        accs = [cgutils.alloca_once_value(builder, low) for _ in range(4)]
        n64 = builder.and_(n_v, ir.Constant(I64, ~63))
        with cgutils.for_range_slice(builder, ir.Constant(I64, 0), n64, ir.Constant(I64, 64)) as (
            i,
            _,
        ):
            for c, acc in enumerate(accs):
                at = builder.add(i, ir.Constant(I64, c * LANES))
                v = _vload16(builder, builder.gep(base, [at]))
                builder.store(biggest(builder.load(acc), v), acc)
        m = [builder.load(acc) for acc in accs]
        v = biggest(biggest(m[0], m[1]), biggest(m[2], m[3]))
        best = cgutils.alloca_once_value(builder, fold(builder, v, LANES, join=biggest))
        with cgutils.for_range_slice(builder, n64, n_v, ir.Constant(I64, 1)) as (i, _):
            builder.store(biggest(builder.load(best), builder.load(builder.gep(base, [i]))), best)
        return builder.load(best)

    return types.float32(a, ia, n), codegen


SCORE_TILE = 4  # key blocks (of 16 positions) per `block_scores` call


def _offsets(tup) -> bool:
    return isinstance(tup, types.UniTuple) and isinstance(tup.dtype, types.Integer)


def _pointers(context, builder, ary_ty, ary, tup_ty, tup):
    """Pointers to the elements at the flat indices of a tuple of ints."""
    return [
        flat_pointer(context, builder, ary_ty, ary, tup_ty.dtype, v)
        for v in cgutils.unpack_tuple(builder, tup, tup_ty.count)
    ]


@intrinsic
def block_scores(typingctx, keys, k_off, head_dim, q, q_offs, scale, out, o_offs):
    """Scores of query heads h (q_offs: a tuple, each head's flat offset in q; o_offs: where its
    scores go in out) over SCORE_TILE key blocks of 16 positions, keys.flat[k_off:] laid out
    (block, head_dim, 16); for m < SCORE_TILE, t < 16, with d = head_dim:

        out.flat[o_h + 16 m + t] = sum_i (q.flat[q_h + i] scale) keys.flat[k_off + (m d + i) 16 + t]

    summed over i from 0, fused. SCORE_TILE independent 16-lane sums a head hide the FMA latency,
    and each key row is loaded once for all the heads (up to four: 16 sums in registers).
    """
    if not (are_float32_arrays(keys, q, out) and _offsets(q_offs) and _offsets(o_offs)):
        return None
    if q_offs.count != o_offs.count:
        return None

    def codegen(context, builder, sig, args):
        (keys_ty, koff_ty, hd_ty, q_ty, qo_ty, sc_ty, out_ty, oo_ty) = sig.args
        kbase = flat_pointer(context, builder, keys_ty, args[0], koff_ty, args[1])
        hd = context.cast(builder, args[2], hd_ty, types.intp)
        qp = _pointers(context, builder, q_ty, args[3], qo_ty, args[4])
        scale = context.cast(builder, args[5], sc_ty, types.float32)
        accs = [[cgutils.alloca_once_value(builder, ZERO16) for _ in range(SCORE_TILE)] for _ in qp]
        with cgutils.for_range_slice(builder, ir.Constant(I64, 0), hd, ir.Constant(I64, 1)) as (
            i,
            _,
        ):
            qs = [
                _splat16(
                    builder,
                    builder.fmul(builder.load(builder.gep(p, [i])), scale, flags=KEEP_FLAGS),
                )
                for p in qp
            ]
            for m in range(SCORE_TILE):
                row = builder.mul(
                    builder.add(builder.mul(ir.Constant(I64, m), hd), i), ir.Constant(I64, LANES)
                )
                k = _vload16(builder, builder.gep(kbase, [row]))
                for h in range(len(qp)):
                    builder.store(fma(builder, qs[h], k, builder.load(accs[h][m])), accs[h][m])
        for h, obase in enumerate(_pointers(context, builder, out_ty, args[6], oo_ty, args[7])):
            for m in range(SCORE_TILE):
                dst = builder.bitcast(
                    builder.gep(obase, [ir.Constant(I64, m * LANES)]), vec_type(LANES).as_pointer()
                )
                builder.store(builder.load(accs[h][m]), dst, align=4)
        return context.get_dummy_value()

    return types.none(keys, k_off, head_dim, q, q_offs, scale, out, o_offs), codegen


@intrinsic
def weighted_rows(typingctx, values, v_off, n, head_dim, p, p_offs, out, o_offs, accumulate):
    """For heads h (p_offs: a tuple, each head's flat offset in p; o_offs: its output's in out) and
    i < head_dim, summed over t < n from 0, fused:

        out.flat[o_h + i] = sum_t p.flat[p_h + t] * values.flat[v_off + t head_dim + i]

    Columns in slices of 64 (then 16, then 1): four independent 16-lane sums a head, each value
    row loaded once for all the heads (up to four). accumulate: start from out's values instead
    of 0, so a run split in two calls (t < m, then t >= m) gives exactly the one-call result (each
    sum is one FMA chain over t either way).
    """
    if not (are_float32_arrays(values, p, out) and _offsets(p_offs) and _offsets(o_offs)):
        return None
    if p_offs.count != o_offs.count:
        return None

    def codegen(context, builder, sig, args):
        (v_ty, voff_ty, n_ty, hd_ty, p_ty, po_ty, out_ty, oo_ty, acc_ty) = sig.args
        resume = context.cast(builder, args[8], acc_ty, types.boolean)
        vbase = flat_pointer(context, builder, v_ty, args[0], voff_ty, args[1])
        n_v = context.cast(builder, args[2], n_ty, types.intp)
        hd = context.cast(builder, args[3], hd_ty, types.intp)
        ps = _pointers(context, builder, p_ty, args[4], po_ty, args[5])
        outs = _pointers(context, builder, out_ty, args[6], oo_ty, args[7])
        heads = range(len(ps))

        def columns(c0, width, lanes):
            """Columns [c0, c0 + lanes width) of every head (lanes 16, or 1 for scalars)."""
            zero = ZERO16 if lanes > 1 else ir.Constant(F32, 0.0)

            def start(h, c):
                src = builder.gep(outs[h], [builder.add(c0, ir.Constant(I64, c * lanes))])
                src = builder.bitcast(src, vec_type(LANES).as_pointer()) if lanes > 1 else src
                slot = cgutils.alloca_once_value(builder, zero)
                with builder.if_then(resume):
                    builder.store(builder.load(src, align=4), slot)
                return slot

            accs = [[start(h, c) for c in range(width)] for h in heads]
            with cgutils.for_range_slice(
                builder, ir.Constant(I64, 0), n_v, ir.Constant(I64, 1)
            ) as (t, _):
                pt = [builder.load(builder.gep(base, [t])) for base in ps]
                pt = [_splat16(builder, x) for x in pt] if lanes > 1 else pt
                row = builder.add(builder.mul(t, hd), c0)
                for c in range(width):
                    src = builder.gep(vbase, [builder.add(row, ir.Constant(I64, c * lanes))])
                    v = _vload16(builder, src) if lanes > 1 else builder.load(src)
                    for h in heads:
                        builder.store(fma(builder, pt[h], v, builder.load(accs[h][c])), accs[h][c])
            for h in heads:
                for c in range(width):
                    dst = builder.gep(outs[h], [builder.add(c0, ir.Constant(I64, c * lanes))])
                    dst = builder.bitcast(dst, vec_type(LANES).as_pointer()) if lanes > 1 else dst
                    builder.store(builder.load(accs[h][c]), dst, align=4)

        wide = builder.and_(hd, ir.Constant(I64, ~63))
        narrow = builder.and_(hd, ir.Constant(I64, ~15))
        with cgutils.for_range_slice(builder, ir.Constant(I64, 0), wide, ir.Constant(I64, 64)) as (
            c0,
            _,
        ):
            columns(c0, 4, LANES)
        with cgutils.for_range_slice(builder, wide, narrow, ir.Constant(I64, LANES)) as (c0, _):
            columns(c0, 1, LANES)
        with cgutils.for_range_slice(builder, narrow, hd, ir.Constant(I64, 1)) as (c0, _):
            columns(c0, 1, 1)
        return context.get_dummy_value()

    sig = types.none(values, v_off, n, head_dim, p, p_offs, out, o_offs, accumulate)
    return sig, codegen
