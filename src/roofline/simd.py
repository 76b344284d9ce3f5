"""Explicit-order float reductions and the hot inner loops of the decode kernels, as LLVM IR.

With fastmath, LLVM picks how `acc += a[i] * b[i]` is split into SIMD lanes, and that choice can
differ between two compilations of one source (a kernel's softmax sum changed order when loaded
from numba's cache). These reductions emit one fixed order instead:

    main    n64 = n - n % 64: four 16-lane partial sums, element i into sum (i // 16) % 4, lane
            i % 16; s = (a0 + a1) + (a2 + a3), folded in halves (v[:h] + v[h:]) 16 -> ... -> 1
    middle  if 8 or more remain: an 8-lane sum seeded [s, 0, ..., 0] over the 8-blocks, folded
    tail    the rest one by one: s = fma(w_i, x_i, s)

the order LLVM 22 (numba 0.68) gave fastmath loops on AVX-512 (width 16, interleave 4), so values
match the kernels this replaced bit for bit. Products are fused; float ops carry `afn`, which keeps
numba's fastmath pass from adding `reassoc`. The attention loops (`block_scores`,
`weighted_rows`) and the 16-lane SiLU (`silu_block`) are written out likewise.
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_F32 = ir.FloatType()
_I64 = ir.IntType(64)
# a flag that changes nothing, present so numba's fastmath pass leaves the op alone
_KEEP = ("afn",)
_WIDTH = 16  # lanes of the main sums (one AVX-512 register of float32)
_HALF = 8
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def _vec(n: int, t=_F32) -> ir.VectorType:
    return ir.VectorType(t, n)


_ZERO16 = ir.Constant(_vec(_WIDTH), [0.0] * _WIDTH)


def _fma(builder, a, b, c):
    """a * b + c with one rounding (llvm.fma on a float32 scalar or vector)."""
    name = f"llvm.fma.v{a.type.count}f32" if isinstance(a.type, ir.VectorType) else "llvm.fma.f32"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(a.type, [a.type] * 3), name)
    return builder.call(fn, [a, b, c])


def _fold(builder, v, lanes: int):
    """Sum of a vector's lanes by halving: v[:h] + v[h:] until one lane is left."""
    while lanes > 1:
        h = lanes // 2
        mask_type = _vec(h, ir.IntType(32))
        lo = builder.shuffle_vector(v, v, ir.Constant(mask_type, list(range(h))))
        hi = builder.shuffle_vector(v, v, ir.Constant(mask_type, list(range(h, 2 * h))))
        v = builder.fadd(lo, hi, flags=_KEEP)
        lanes = h
    return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))


_ELEMENT = {types.float32: _F32, types.uint16: ir.IntType(16), types.int8: ir.IntType(8)}


def _loader(builder, dtype, base):
    """load(i, lanes) -> float32 vector (or scalar when lanes == 0) of elements base[i:i+lanes],
    widened: bf16 bits (uint16) shift into the high half of a float32; int8 converts exactly."""
    elem = _ELEMENT[dtype]

    def load(i, lanes):
        ptr = builder.gep(base, [i])
        if lanes:
            raw = builder.load(
                builder.bitcast(ptr, _vec(lanes, elem).as_pointer()), align=dtype.bitwidth // 8
            )
            target = _vec(lanes, ir.IntType(32))
            shift = ir.Constant(target, [16] * lanes)
        else:
            raw = builder.load(ptr)
            target, shift = ir.IntType(32), ir.Constant(ir.IntType(32), 16)
        if dtype == types.float32:
            return raw
        if dtype == types.uint16:
            return builder.bitcast(
                builder.shl(builder.zext(raw, target), shift), _vec(lanes) if lanes else _F32
            )
        return builder.sitofp(raw, _vec(lanes) if lanes else _F32)  # int8

    return load


def _emit_sums(builder, n, load_a, loads_b, split=False):
    """[sum_i a_i * b_i for each b in loads_b] (or [sum_i a_i] when loads_b is [None]) over i < n,
    in the module docstring's order. a is loaded once per step for all sums: independent chains
    keep the FMA units busy where one row would wait on its accumulators. split: load_a(i, off,
    lanes) loads element i + off, i a multiple of 64 and off a Python int, so block formats know
    their place in a block at compile time.
    """
    if not split:
        plain_a = load_a

        def load_a(i, off, lanes):
            return plain_a(i if off == 0 else builder.add(i, ir.Constant(_I64, off)), lanes)

    def step(acc, a, load_b, j, lanes):
        old = builder.load(acc)
        builder.store(
            builder.fadd(old, a, flags=_KEEP)
            if load_b is None
            else _fma(builder, a, load_b(j, lanes), old),
            acc,
        )

    accs = [[cgutils.alloca_once_value(builder, _ZERO16) for _ in range(4)] for _ in loads_b]
    n64 = builder.and_(n, ir.Constant(_I64, ~63))
    with cgutils.for_range_slice(builder, ir.Constant(_I64, 0), n64, ir.Constant(_I64, 64)) as (
        i,
        _,
    ):
        for c in range(4):
            j = builder.add(i, ir.Constant(_I64, c * _WIDTH))
            a = load_a(i, c * _WIDTH, _WIDTH)
            for acc, load_b in zip(accs, loads_b):
                step(acc[c], a, load_b, j, _WIDTH)
    totals = []
    for acc in accs:
        v = [builder.load(x) for x in acc]
        pair = builder.fadd(
            builder.fadd(v[0], v[1], flags=_KEEP),
            builder.fadd(v[2], v[3], flags=_KEEP),
            flags=_KEEP,
        )
        totals.append(cgutils.alloca_once_value(builder, _fold(builder, pair, _WIDTH)))
    n8 = builder.add(n64, builder.and_(builder.sub(n, n64), ir.Constant(_I64, ~7)))
    with builder.if_then(builder.icmp_signed(">", n8, n64)):
        zero8 = ir.Constant(_vec(_HALF), [0.0] * _HALF)
        acc8 = [cgutils.alloca_once_value(builder, zero8) for _ in loads_b]
        for acc, total in zip(acc8, totals):
            builder.store(
                builder.insert_element(zero8, builder.load(total), ir.Constant(ir.IntType(32), 0)),
                acc,
            )
        with cgutils.for_range_slice(builder, n64, n8, ir.Constant(_I64, _HALF)) as (i, _):
            a = load_a(i, 0, _HALF)
            for acc, load_b in zip(acc8, loads_b):
                step(acc, a, load_b, i, _HALF)
        for acc, total in zip(acc8, totals):
            builder.store(_fold(builder, builder.load(acc), _HALF), total)
    with cgutils.for_range_slice(builder, n8, n, ir.Constant(_I64, 1)) as (i, _):
        a = load_a(i, 0, 0)
        for total, load_b in zip(totals, loads_b):
            step(total, a, load_b, i, 0)
    return [builder.load(t) for t in totals]


def _flat_pointer(context, builder, aryty, ary, index_ty, index):
    """Pointer to the element at flat (C order) index `index` of a C-contiguous array."""
    arr = context.make_array(aryty)(context, builder, ary)
    return builder.gep(arr.data, [context.cast(builder, index, index_ty, types.intp)])


_WEIGHTS = (types.float32, types.uint16, types.int8)


def _contiguous(a, dtypes) -> bool:
    return isinstance(a, types.Array) and a.layout == "C" and a.dtype in dtypes


def _float32_arrays(*arrays) -> bool:
    return all(_contiguous(a, (types.float32,)) for a in arrays)


@intrinsic
def dot(typingctx, a, ia, b, ib, n):
    """sum_{i < n} a.flat[ia + i] * b.flat[ib + i] in float32, in the fixed order (products fused);
    a is C-contiguous float32, bf16 bits (uint16) or int8 (widened exactly), b C-contiguous float32.
    No bounds checks: the caller keeps both ranges inside their arrays."""
    ints = all(isinstance(t, types.Integer) for t in (ia, ib, n))
    if not (ints and _contiguous(a, _WEIGHTS) and _contiguous(b, (types.float32,))):
        return None

    def codegen(context, builder, sig, args):
        a_ty, ia_ty, b_ty, ib_ty, n_ty = sig.args
        load_a = _loader(
            builder, a_ty.dtype, _flat_pointer(context, builder, a_ty, args[0], ia_ty, args[1])
        )
        load_b = _loader(
            builder, types.float32, _flat_pointer(context, builder, b_ty, args[2], ib_ty, args[3])
        )
        return _emit_sums(
            builder, context.cast(builder, args[4], n_ty, types.intp), load_a, [load_b]
        )[0]

    return types.float32(a, ia, b, ib, n), codegen


@intrinsic
def vsum(typingctx, a, ia, n):
    """sum_{i < n} a.flat[ia + i] in float32, in the fixed order (plain adds); a C-contiguous
    float32."""
    if not (
        _contiguous(a, (types.float32,))
        and isinstance(ia, types.Integer)
        and isinstance(n, types.Integer)
    ):
        return None

    def codegen(context, builder, sig, args):
        load = _loader(
            builder,
            types.float32,
            _flat_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1]),
        )
        return _emit_sums(
            builder, context.cast(builder, args[2], sig.args[2], types.intp), load, [None]
        )[0]

    return types.float32(a, ia, n), codegen


@intrinsic
def dot_rows(typingctx, a, ia, b, ib, b_stride, n, rows):
    """(sum_i a.flat[ia + i] * b.flat[ib + r b_stride + i] for r < rows), rows a literal 1..4: `dot`
    of one weight row with several activation rows at once, each in the same order as `dot` (so bit
    for bit equal to it)."""
    ints = all(isinstance(t, types.Integer) for t in (ia, ib, b_stride, n))
    if not (
        ints
        and isinstance(rows, types.IntegerLiteral)
        and 1 <= rows.literal_value <= 4
        and _contiguous(a, _WEIGHTS)
        and _contiguous(b, (types.float32,))
    ):
        return None
    m = rows.literal_value
    result = types.UniTuple(types.float32, m)

    def codegen(context, builder, sig, args):
        a_ty, ia_ty, b_ty, ib_ty, sb_ty, n_ty, _ = sig.args
        load_a = _loader(
            builder, a_ty.dtype, _flat_pointer(context, builder, a_ty, args[0], ia_ty, args[1])
        )
        ib = context.cast(builder, args[3], ib_ty, types.intp)
        sb = context.cast(builder, args[4], sb_ty, types.intp)
        loads = [
            _loader(
                builder,
                types.float32,
                _flat_pointer(
                    context,
                    builder,
                    b_ty,
                    args[2],
                    types.intp,
                    builder.add(ib, builder.mul(sb, ir.Constant(_I64, r))),
                ),
            )
            for r in range(m)
        ]
        sums = _emit_sums(builder, context.cast(builder, args[5], n_ty, types.intp), load_a, loads)
        return context.make_tuple(builder, result, sums)

    return result(a, ia, b, ib, b_stride, n, rows), codegen


def _host_has(feature: str) -> bool:
    import llvmlite.binding as llvm

    return ("+" + feature) in llvm.get_host_cpu_features().flatten().split(",")


_AVX512 = _X86 and _host_has("avx512f")


def _vload16(builder, ptr):
    return builder.load(builder.bitcast(ptr, _vec(_WIDTH).as_pointer()), align=4)


def _splat16(builder, x):
    v = builder.insert_element(
        ir.Constant(_vec(_WIDTH), ir.Undefined), x, ir.Constant(ir.IntType(32), 0)
    )
    return builder.shuffle_vector(v, v, ir.Constant(_vec(_WIDTH, ir.IntType(32)), [0] * _WIDTH))


@intrinsic
def silu_block(typingctx, gate_up, ig, iu, e, out, io):
    """out.flat[io + l] = SiLU(g_l) * u_l for 16 lanes, g_l = gate_up.flat[ig + l],
    u_l = gate_up.flat[iu + l], given e_l = exp(-|g_l|) (e: 16 float32):

        SiLU(g) u = g u / (1 + e) for g >= 0,  g u e / (1 + e) for g < 0

    On AVX-512 the quotient is VRCP14PS's estimate r of 1 / d, d = 1 + e, refined once
    (q0 = n r; q = q0 - r (q0 d - n), fused): LLVM's choice for the engine's vectorised SiLU, kept
    for bit-equal values. Elsewhere an exact division.
    """
    if not _float32_arrays(gate_up, e, out):
        return None

    def codegen(context, builder, sig, args):
        ga_ty, ig_ty, iu_ty, e_ty, out_ty, io_ty = sig.args
        v16 = _vec(_WIDTH)
        g = _vload16(builder, _flat_pointer(context, builder, ga_ty, args[0], ig_ty, args[1]))
        u = _vload16(builder, _flat_pointer(context, builder, ga_ty, args[0], iu_ty, args[2]))
        e0 = context.get_constant(types.intp, 0)
        ex = _vload16(builder, _flat_pointer(context, builder, e_ty, args[3], types.intp, e0))
        one = ir.Constant(v16, [1.0] * _WIDTH)
        gu = builder.fmul(g, u, flags=_KEEP)
        d = builder.fadd(ex, one, flags=_KEEP)
        num = builder.select(
            builder.fcmp_ordered(">=", g, _ZERO16), gu, builder.fmul(gu, ex, flags=_KEEP)
        )
        if _AVX512:
            fn = cgutils.get_or_insert_function(
                builder.module,
                ir.FunctionType(v16, [v16, v16, ir.IntType(16)]),
                "llvm.x86.avx512.rcp14.ps.512",
            )
            r = builder.call(fn, [d, _ZERO16, ir.Constant(ir.IntType(16), -1)])
            q0 = builder.fmul(num, r, flags=_KEEP)
            t = _fma(builder, q0, d, builder.fneg(num, flags=_KEEP))
            q = _fma(builder, builder.fneg(r, flags=_KEEP), t, q0)
        else:
            q = builder.fdiv(num, d, flags=_KEEP)
        dst = builder.bitcast(
            _flat_pointer(context, builder, out_ty, args[4], io_ty, args[5]), v16.as_pointer()
        )
        builder.store(q, dst, align=4)
        return context.get_dummy_value()

    return types.none(gate_up, ig, iu, e, out, io), codegen


SCORE_TILE = 4  # key blocks (of 16 positions) per `block_scores` call


@intrinsic
def block_scores(typingctx, keys, k_off, head_dim, q, q_a, q_b, scale, out, o_a, o_b):
    """Scores of query heads h = a, b (a == b for one) over SCORE_TILE key blocks of 16 positions,
    keys.flat[k_off:] laid out (block, head_dim, 16); for m < SCORE_TILE, t < 16, with d = head_dim:

        out.flat[o_h + 16 m + t] = sum_i (q.flat[q_h + i] scale) keys.flat[k_off + (m d + i) 16 + t]

    summed over i from 0, fused. Eight independent 16-lane sums hide the FMA latency, and each key
    row is loaded once for both heads.
    """
    if not _float32_arrays(keys, q, out):
        return None

    def codegen(context, builder, sig, args):
        (keys_ty, koff_ty, hd_ty, q_ty, qa_ty, qb_ty, sc_ty, out_ty, oa_ty, ob_ty) = sig.args
        kbase = _flat_pointer(context, builder, keys_ty, args[0], koff_ty, args[1])
        hd = context.cast(builder, args[2], hd_ty, types.intp)
        qa = _flat_pointer(context, builder, q_ty, args[3], qa_ty, args[4])
        qb = _flat_pointer(context, builder, q_ty, args[3], qb_ty, args[5])
        scale = context.cast(builder, args[6], sc_ty, types.float32)
        accs = [
            [cgutils.alloca_once_value(builder, _ZERO16) for _ in range(SCORE_TILE)]
            for _ in range(2)
        ]
        with cgutils.for_range_slice(builder, ir.Constant(_I64, 0), hd, ir.Constant(_I64, 1)) as (
            i,
            _,
        ):
            qs = [
                _splat16(
                    builder, builder.fmul(builder.load(builder.gep(p, [i])), scale, flags=_KEEP)
                )
                for p in (qa, qb)
            ]
            for m in range(SCORE_TILE):
                row = builder.mul(
                    builder.add(builder.mul(ir.Constant(_I64, m), hd), i), ir.Constant(_I64, _WIDTH)
                )
                k = _vload16(builder, builder.gep(kbase, [row]))
                for h in range(2):
                    builder.store(_fma(builder, qs[h], k, builder.load(accs[h][m])), accs[h][m])
        for h, (o_ty, o_v) in enumerate(((oa_ty, args[8]), (ob_ty, args[9]))):
            obase = _flat_pointer(context, builder, out_ty, args[7], o_ty, o_v)
            for m in range(SCORE_TILE):
                dst = builder.bitcast(
                    builder.gep(obase, [ir.Constant(_I64, m * _WIDTH)]), _vec(_WIDTH).as_pointer()
                )
                builder.store(builder.load(accs[h][m]), dst, align=4)
        return context.get_dummy_value()

    return types.none(keys, k_off, head_dim, q, q_a, q_b, scale, out, o_a, o_b), codegen


@intrinsic
def weighted_rows(typingctx, values, v_off, n, head_dim, p, p_a, p_b, out, o_a, o_b, accumulate):
    """For heads h = a, b and i < head_dim, summed over t < n from 0, fused:

        out.flat[o_h + i] = sum_t p.flat[p_h + t] * values.flat[v_off + t head_dim + i]

    Columns in slices of 64 (then 16, then 1): up to eight independent 16-lane sums. accumulate:
    start from out's values instead of 0, so a run split in two calls (t < m, then t >= m) gives
    exactly the one-call result (each sum is one FMA chain over t either way).
    """
    if not _float32_arrays(values, p, out):
        return None

    def codegen(context, builder, sig, args):
        (v_ty, voff_ty, n_ty, hd_ty, p_ty, pa_ty, pb_ty, out_ty, oa_ty, ob_ty, acc_ty) = sig.args
        resume = context.cast(builder, args[10], acc_ty, types.boolean)
        vbase = _flat_pointer(context, builder, v_ty, args[0], voff_ty, args[1])
        n_v = context.cast(builder, args[2], n_ty, types.intp)
        hd = context.cast(builder, args[3], hd_ty, types.intp)
        ps = [
            _flat_pointer(context, builder, p_ty, args[4], t, a)
            for t, a in ((pa_ty, args[5]), (pb_ty, args[6]))
        ]
        outs = [
            _flat_pointer(context, builder, out_ty, args[7], t, a)
            for t, a in ((oa_ty, args[8]), (ob_ty, args[9]))
        ]

        def columns(c0, width, lanes):
            """Columns [c0, c0 + lanes width) of both heads (lanes 16, or 1 for scalars)."""
            zero = _ZERO16 if lanes > 1 else ir.Constant(_F32, 0.0)

            def start(h, c):
                src = builder.gep(outs[h], [builder.add(c0, ir.Constant(_I64, c * lanes))])
                src = builder.bitcast(src, _vec(_WIDTH).as_pointer()) if lanes > 1 else src
                slot = cgutils.alloca_once_value(builder, zero)
                with builder.if_then(resume):
                    builder.store(builder.load(src, align=4), slot)
                return slot

            accs = [[start(h, c) for c in range(width)] for h in range(2)]
            with cgutils.for_range_slice(
                builder, ir.Constant(_I64, 0), n_v, ir.Constant(_I64, 1)
            ) as (t, _):
                pt = [builder.load(builder.gep(base, [t])) for base in ps]
                pt = [_splat16(builder, x) for x in pt] if lanes > 1 else pt
                row = builder.add(builder.mul(t, hd), c0)
                for c in range(width):
                    src = builder.gep(vbase, [builder.add(row, ir.Constant(_I64, c * lanes))])
                    v = _vload16(builder, src) if lanes > 1 else builder.load(src)
                    for h in range(2):
                        builder.store(_fma(builder, pt[h], v, builder.load(accs[h][c])), accs[h][c])
            for h in range(2):
                for c in range(width):
                    dst = builder.gep(outs[h], [builder.add(c0, ir.Constant(_I64, c * lanes))])
                    dst = builder.bitcast(dst, _vec(_WIDTH).as_pointer()) if lanes > 1 else dst
                    builder.store(builder.load(accs[h][c]), dst, align=4)

        wide = builder.and_(hd, ir.Constant(_I64, ~63))
        narrow = builder.and_(hd, ir.Constant(_I64, ~15))
        with cgutils.for_range_slice(
            builder, ir.Constant(_I64, 0), wide, ir.Constant(_I64, 64)
        ) as (c0, _):
            columns(c0, 4, _WIDTH)
        with cgutils.for_range_slice(builder, wide, narrow, ir.Constant(_I64, _WIDTH)) as (c0, _):
            columns(c0, 1, _WIDTH)
        with cgutils.for_range_slice(builder, narrow, hd, ir.Constant(_I64, 1)) as (c0, _):
            columns(c0, 1, 1)
        return context.get_dummy_value()

    return types.none(values, v_off, n, head_dim, p, p_a, p_b, out, o_a, o_b, accumulate), codegen
